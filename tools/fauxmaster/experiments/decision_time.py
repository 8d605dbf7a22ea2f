"""The experiments on decision time: ``architectures`` (monolithic vs two-level vs shared-state
with slow service decisions) and ``tjob-sweep`` (the service scheduler's t_job swept)."""

from __future__ import annotations

from typing import Any

from cellstate.model import JobKind
from tools.fauxmaster.experiments.architectures import CodePath, MultiPath, OfferBroker
from tools.fauxmaster.experiments.runs import BATCH_T_JOB, BATCH_T_TASK, T_TASK, Bench, RunFigures, pair
from tools.fauxmaster.experiments.verdicts import (
    Column, ExperimentReport, ExperimentVerdict, noise_note, successful_txns, clearly_larger, compared,
    conflict_setup_warnings, counts_conclusive, ratio, verdict_of,
)
from tools.fauxmaster.scheduler_process import SchedulerConfig


# ------------------------------------------------------------------- architectures


def architectures(bench: Bench) -> ExperimentReport:
    t_svc = bench.sizing.service_t_job
    paths = {JobKind.BATCH: CodePath("batch", BATCH_T_JOB, BATCH_T_TASK),
             JobKind.SERVICE: CodePath("service", t_svc, T_TASK)}
    trace = bench.trace()
    runs = {
        "monolithic": bench.run(trace, [SchedulerConfig("monolithic", "batch", seed=1, jobs="all")], "monolithic",
                               multipath=MultiPath(paths, seed=1)),
        "two-level": bench.run(trace, pair(service_t_job=t_svc), "two-level", broker=OfferBroker()),
        "shared-state": bench.run(trace, pair(service_t_job=t_svc)),
    }
    rows = [_architecture_row(name, f) for name, f in runs.items()]
    wait = {name: f.of("batch").wait_placed.mean for name, f in runs.items()}
    shared = wait["shared-state"]
    reproduced = clearly_larger(wait["monolithic"], shared) and clearly_larger(wait["two-level"], shared)
    warnings = [] if runs["shared-state"].of("service").jobs else [
        "the trace has no service jobs: the monolithic scheduler's head-of-line blocking behind slow service "
        "decisions cannot occur, so this set-up cannot produce the effect"]
    detail = (f"mean batch wait to placed: shared-state {shared:.2f} s vs monolithic {wait['monolithic']:.2f} s "
              f"({ratio(wait['monolithic'], shared):.1f}x) and two-level {wait['two-level']:.2f} s "
              f"({ratio(wait['two-level'], shared):.1f}x)")
    columns = [Column("architecture", "architecture"),
               Column("batch_wait_first", "batch wait to 1st attempt (s)", ".2f"),
               Column("batch_wait_placed", "batch wait to placed (s)", ".2f"),
               Column("batch_wait_p90", "batch p90 to placed (s)", ".2f"),
               Column("batch_unscheduled", "batch jobs unscheduled"),
               Column("service_wait_placed", "service wait to placed (s)", ".2f"),
               Column("busyness", "busyness (per scheduler)"), Column("conflict_fraction", "conflict fraction", ".3f"),
               Column("offers_text", "empty offers")]
    return ExperimentReport(
        "architectures", "Monolithic vs two-level vs shared-state, slow service decisions",
        "Omega §4 (Fig. 5-7): with slow service decisions, the monolithic scheduler's batch jobs wait behind "
        "service jobs (head-of-line blocking) and Mesos-style offers lock resources away from the batch "
        "scheduler; shared-state keeps batch wait low.",
        f"{bench.describe()}; service t_job {t_svc:g} s, batch t_job {BATCH_T_JOB:g} s, t_task {T_TASK:g} s; "
        f"two-level offers: all free machines nobody holds",
        columns, rows, ExperimentVerdict(reproduced, detail, warnings=tuple(warnings)),
        runs_ok=all(f.invariants_ok for f in runs.values()))


def _architecture_row(name: str, f: RunFigures) -> dict[str, Any]:
    batch, service = f.of("batch"), f.of("service")
    return {"architecture": name, "batch_wait_first": batch.wait_first.mean,
            "batch_wait_placed": batch.wait_placed.mean,
            "batch_wait_p90": batch.wait_placed.p90, "batch_unscheduled": batch.unscheduled,
            "service_wait_placed": service.wait_placed.mean,
            "busyness": " / ".join(f"{s.name} {f.busyness([s.name]):.2f}" for s in f.schedulers),
            "conflict_fraction": f.conflict_fraction(), **f.extra,
            "offers_text": f"{f.extra['empty_offers']}/{f.extra['offers']}" if f.extra else ""}


# ----------------------------------------------------------------------- t_job sweep


def tjob_sweep(bench: Bench) -> ExperimentReport:
    trace = bench.trace()
    rows, warnings = [], []
    ok = True
    for t_job in bench.sizing.tjob_sweep:
        f = bench.run(trace, pair(service_t_job=t_job))
        ok &= f.invariants_ok
        warnings += conflict_setup_warnings(f"service t_job {t_job:g} s", f)
        rows.append({"t_job": t_job, "service_busyness": f.busyness(["service"]),
                     "service_conflicts": f.conflicts(["service"]), "service_txns_ok": successful_txns(f, ["service"]),
                     "service_conflict_fraction": f.conflict_fraction(["service"]),
                     "batch_conflict_fraction": f.conflict_fraction(["batch"]),
                     "service_wait_placed": f.of("service").wait_placed.mean,
                     "service_unscheduled": f.of("service").unscheduled})
    first, last = rows[0], rows[-1]
    busy_up = clearly_larger(last["service_busyness"], first["service_busyness"])
    conflict_up = compared(
        clearly_larger(last["service_conflict_fraction"], first["service_conflict_fraction"]),
        counts_conclusive(last["service_conflicts"], last["service_txns_ok"],
                          first["service_conflicts"], first["service_txns_ok"]))
    detail = (f"t_job {first['t_job']:g} -> {last['t_job']:g} s: service busyness {first['service_busyness']:.3f} -> "
              f"{last['service_busyness']:.3f} ({_monotone(rows, 'service_busyness')}), conflict fraction "
              f"{first['service_conflict_fraction']:.3f} -> {last['service_conflict_fraction']:.3f} "
              f"({_monotone(rows, 'service_conflict_fraction')}; {first['service_conflicts']} -> "
              f"{last['service_conflicts']} conflicts{noise_note(conflict_up)})")
    columns = [Column("t_job", "service t_job (s)", "g"), Column("service_busyness", "service busyness", ".3f"),
               Column("service_conflict_fraction", "service conflict fraction", ".3f"),
               Column("batch_conflict_fraction", "batch conflict fraction", ".3f"),
               Column("service_wait_placed", "service wait to placed (s)", ".2f"),
               Column("service_unscheduled", "service jobs unscheduled")]
    return ExperimentReport(
        "tjob-sweep", "Shared-state: sweep of the service scheduler's t_job",
        "Omega §4.2 (Fig. 6/7): as t_job(service) grows, the service scheduler gets busier and its "
        "conflict fraction rises (longer decisions see more concurrent change).",
        f"{bench.describe()}; shared-state, batch t_job {BATCH_T_JOB:g} s, resource-fit, incremental",
        columns, rows, verdict_of([compared(busy_up), conflict_up], detail, warnings), runs_ok=ok)


def _monotone(rows: list[dict], key: str) -> str:
    values = [r[key] for r in rows]
    return "monotone" if all(b >= a for a, b in zip(values, values[1:])) else "not monotone"

