"""``batch-scaling``: one vs three batch schedulers (plus one service scheduler, shared-state)
at increasing batch load (Omega §4.2, Fig. 8/9: three batch schedulers give about 3x the
headroom before the batch side saturates).

Load: with the synthetic trace, the batch arrival rate times each load factor (short batch
tasks and a shorter span, so the cell does not fill up before the schedulers do); with a
given trace, which cannot be re-rated, the batch decision times times the factor instead
(same busyness per job arrival, same cell load).

A set-up is *saturated* at a load when its batch schedulers' mean busyness reaches 0.9 or
at least 10 % of the batch jobs are left unscheduled. Headroom is also estimated from the
highest unsaturated load as load ÷ busyness (busyness grows about linearly with load).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tools.fauxmaster.experiments.runs import BATCH_T_TASK, T_TASK, Bench
from tools.fauxmaster.experiments.verdicts import MIN_EFFECT, Column, ExperimentReport, ExperimentVerdict, ratio
from tools.fauxmaster.scheduler_process import SchedulerConfig

COUNTS = (1, 3)
SATURATED_BUSYNESS = 0.9
SATURATED_UNSCHEDULED = 0.10


def batch_scaling(bench: Bench) -> ExperimentReport:
    rows, ok = [], True
    for count in COUNTS:
        for factor in bench.sizing.load_factors:
            row, fine = _run(bench, count, factor)
            rows.append(row)
            ok &= fine
    saturation = {n: _first_saturated([r for r in rows if r["schedulers"] == n]) for n in COUNTS}
    capacity = {n: _capacity([r for r in rows if r["schedulers"] == n]) for n in COUNTS}
    one, three = (saturation[n] for n in COUNTS)
    later = (one is not None and three is None) or (one is not None and three is not None and three > one)
    estimate = ratio(capacity[3], capacity[1])
    detail = (f"1 batch scheduler saturates at load x{_show(one)}, 3 at load x{_show(three)}; estimated headroom "
              f"(load ÷ busyness) {capacity[1]:.2f} vs {capacity[3]:.2f}: {estimate:.1f}x (paper ~3x)")
    columns = [Column("schedulers", "batch schedulers"), Column("load", "batch load"),
               Column("batch_busyness", "batch busyness (mean)", ".3f"),
               Column("batch_conflict_fraction", "batch conflict fraction", ".4f"),
               Column("batch_wait_first", "batch wait to 1st attempt (s)", ".2f"),
               Column("unscheduled_fraction", "batch jobs unscheduled", ".1%"),
               Column("saturated", "saturated")]
    return ExperimentReport(
        "batch-scaling", "One vs three batch schedulers at increasing batch load",
        "Omega §4.2 (Fig. 8/9): with 3 batch schedulers sharing the cell, batch load can grow about 3x "
        "before the schedulers saturate (busyness near 1, unscheduled jobs growing).",
        f"{_setup(bench)}; shared-state, batch t_job {bench.sizing.scaling_batch_t_job:g} s, service scheduler "
        f"t_job 0.1 s, resource-fit, incremental",
        columns, rows, ExperimentVerdict(later and estimate >= MIN_EFFECT, detail), runs_ok=ok)


def _setup(bench: Bench) -> str:
    if bench.given:
        return f"trace {bench.given}; load x f = batch decision times x f"
    return f"synthetic: {_spec(bench, 1).describe()}; load x f = batch arrival rate x f"


def _spec(bench: Bench, factor: float):
    base = bench.sizing.spec
    mix = replace(base.mix, batch_duration_median_s=bench.sizing.scaling_task_median_s)
    return replace(base, duration_s=bench.sizing.scaling_duration_s, mix=mix).with_batch_rate(factor)


def _run(bench: Bench, count: int, factor: float) -> tuple[dict[str, Any], bool]:
    t_job = bench.sizing.scaling_batch_t_job
    t_task = BATCH_T_TASK
    if bench.given:
        trace, t_job, t_task, load = bench.trace(), t_job * factor, t_task * factor, f"x{factor:g} (t_job)"
    else:
        spec = _spec(bench, factor)
        trace, load = bench.trace(spec), f"x{factor:g} ({spec.mix.batch_rate:g} jobs/s)"
    batch = [f"b{i}" for i in range(count)]
    schedulers = [SchedulerConfig(name, "batch", seed=1 + i, t_job=t_job, t_task=t_task)
                  for i, name in enumerate(batch)]
    schedulers.append(SchedulerConfig("service", "service", seed=99, t_job=0.1, t_task=T_TASK))
    f = bench.run(trace, schedulers)
    jobs = f.of("batch").jobs
    unscheduled = f.of("batch").unscheduled / jobs if jobs else 0.0
    busy = f.busyness(batch)
    row = {"schedulers": count, "factor": factor, "load": load, "batch_busyness": busy,
           "batch_conflict_fraction": f.conflict_fraction(batch), "batch_wait_first": f.of("batch").wait_first.mean,
           "unscheduled_fraction": unscheduled,
           "saturated": "yes" if busy >= SATURATED_BUSYNESS or unscheduled >= SATURATED_UNSCHEDULED else "no"}
    return row, f.invariants_ok


def _first_saturated(rows: list[dict]) -> float | None:
    return next((r["factor"] for r in rows if r["saturated"] == "yes"), None)


def _capacity(rows: list[dict]) -> float:
    """Load factor at which busyness would reach 1, from the highest unsaturated load (0 if none)."""
    unsaturated = [r for r in rows if r["saturated"] == "no" and r["batch_busyness"] > 0]
    if not unsaturated:
        return 0.0
    top = max(unsaturated, key=lambda r: r["factor"])
    return top["factor"] / top["batch_busyness"]


def _show(factor: float | None) -> str:
    return "—(not in range)" if factor is None else f"{factor:g}"
