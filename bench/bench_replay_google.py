"""Fauxmaster replay speed on Google clusterdata-2011 part 0 (real scheduler code, virtual time).

Imports part 0 once (cached in the temp dir), replays ``--hours`` (or ``--until`` seconds) of it
with the default schedulers (one batch, one service; Omega's modelled decision times) on the
in-memory store (no history), once per initial state (``--initial-state``: the recorded t = 0
cell, the tasks scheduled again, or both, the default), and prints virtual seconds per wall
second (and per CPU second) of each. Goal: >= 300x. ``--profile`` writes a pyinstrument profile (HTML, or text for a .txt name).

Fidelity (issue 20): beside the speed, the replay's fidelity against the trace's ground truth
(``tools.fauxmaster.fidelity``; goals: initial_pending_fraction <= 0.01, scheduled_ratio >= 0.95,
delay p50/p90 ratios in [0.5, 2]). ``--kth`` also replays the KTH SP2 SWF log (imported once,
cached; its own 100 nodes; ``--max-txn-ops 256`` so its gangs of up to 100 processors can be
placed) and prints the replay's job wait p50 against the logged one (goal: within 2x), with the
replay's default schedulers (place a job as soon as it fits) or, ``--kth-scheduler easy``, one
EASY backfilling scheduler (docs/EASY.md: the policy the log's header names); ``--kth-only``
skips part 0.

``--cell-model`` picks the import's cell (docs/TRACE_FORMAT.md, "Cell models and machine_events";
each cached under its own name): ``overcommit`` (default, as ``omega import google2011``), Borg's
reclamation, the cell of the fidelity goals; ``plain``, every task against capacity, the default of
older trees' bench: pass ``--cell-model plain`` to both trees of ``bench/side_by_side.sh`` to compare
with one of those.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_common import interpreter, verdict  # noqa: E402
from tools.fauxmaster.replay import ReplayConfig, replay  # noqa: E402
from tools.trace.format import FORMAT_VERSION  # noqa: E402
from tools.trace.google2011.cell import CELL_MODELS, CapacityModel, CellModel  # noqa: E402
from tools.trace.google2011.importer import import_google2011  # noqa: E402
from tools.trace.google2011.schema import IMPORTER_REVISION  # noqa: E402
from tools.trace.swf import IMPORTER_REVISION as SWF_REVISION  # noqa: E402
from tools.trace.swf import import_swf  # noqa: E402
from tools.trace.shared import traces_dir  # noqa: E402

TRACES = traces_dir() / "google-2011"
GOAL = 300.0


def imported_trace(cell_model: str = "plain") -> Path:
    """Part 0 as an omega trace, imported once per temp dir (and trace format, importer revision,
    cell model and truth: ``.w`` = the truth records part windows, which an older tree's reader
    refuses, so it keeps a file of its own)."""
    suffix = ("" if cell_model == "plain" else f".{cell_model}") + ".w"
    out = Path(tempfile.gettempdir()) / (f"omega-bench-google2011-part0.v{FORMAT_VERSION}.i{IMPORTER_REVISION}"
                                         f"{suffix}.omt")
    if not out.exists():
        started = time.perf_counter()
        tmp = out.with_suffix(f".{os.getpid()}.tmp")
        import_google2011(str(TRACES / "task_events/part-00000-of-00500.csv.gz"),
                          str(TRACES / "job_events/part-00000-of-00500.csv.gz"), tmp, CapacityModel("mix", 0),
                          cell_model=CellModel(cell_model))
        tmp.rename(out)
        print(f"imported part 0 in {time.perf_counter() - started:.1f} s -> {out}")
    return out


def imported_kth(nodes: int | None = None) -> Path:
    """The KTH SP2 SWF log as an omega trace on ``nodes`` machines (None: the header's 100),
    imported once per temp dir (bad lines skipped)."""
    suffix = "" if nodes is None else f".n{nodes}"
    out = Path(tempfile.gettempdir()) / f"omega-bench-kth-sp2.v{FORMAT_VERSION}.i{SWF_REVISION}{suffix}.omt"
    if not out.exists():
        tmp = out.with_suffix(f".{os.getpid()}.tmp")
        import_swf(str(traces_dir() / "swf" / "KTH-SP2-1996-2.1-cln.swf.gz"), tmp, skip_bad=True, nodes=nodes)
        tmp.rename(out)
    return out


KTH_SCHEDULERS = {"default": None, "easy": [{"name": "easy", "kind": "easy"}]}


def run_kth(until: float | None, scheduler: str = "default", nodes: int | None = None) -> None:
    """Replay KTH SP2 with the ``KTH_SCHEDULERS[scheduler]`` schedulers (None: the replay's
    default ones) on ``nodes`` machines (None: the log's header) and print the replay's wait p50
    against the logged one."""
    from tools.trace.format import read_trace

    trace = imported_kth(nodes)
    header, reader = read_trace(trace)
    with reader:
        horizon = reader.truth.horizon
    cell = header.capacity_model.split(",")[0]  # "swf: N machines"
    config = ReplayConfig(until=until or horizon, check=False, max_txn_ops=256, sample_every_s=3600.0,
                          **({} if KTH_SCHEDULERS[scheduler] is None else {"schedulers": KTH_SCHEDULERS[scheduler]}))
    cpu_started = time.process_time()
    result = replay(trace, config)
    cpu = time.process_time() - cpu_started
    f = result.fidelity
    kinds = ", ".join(f"{s.name}:{s.kind}" for s in config.schedulers)
    print(f"== KTH SP2 ({cell}, max_txn_ops 256, schedulers {kinds}): virtual {result.sim_time_s:,.0f} s, wall "
          f"{result.wall_time_s:.1f} s, cpu {cpu:.1f} s, {result.jobs_submitted:,} jobs, "
          f"{result.jobs_unscheduled:,} unscheduled at the end")
    print("\n".join(f.lines()))
    ratio = f.delay_p50_ratio
    print(f"KTH SP2 wait p50: replay {f.replay_delay['p50']:,.2f} s vs logged {f.real_delay['p50']:,.2f} s "
          f"(ratio {'n/a' if ratio is None else f'{ratio:.3f}'}; goal within 2x: "
          f"{'met' if ratio is not None and 0.5 <= ratio <= 2 else 'MISSED'}; over {f.both_placed:,} jobs both "
          f"placed, replay never placed {f.real_only:,})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hours", type=float, default=1.56, help="virtual hours to replay (default 1.56)")
    parser.add_argument("--until", type=float, help="virtual seconds to replay (overrides --hours)")
    parser.add_argument("--batch", type=int, default=1, help="batch schedulers (default 1)")
    parser.add_argument("--service-scheduler", choices=("service", "batch"), default="service",
                        help="chain placing service jobs (default: the real ServiceScheduler; batch: a "
                             "second batch-chain scheduler, the setup before the service index)")
    parser.add_argument("--initial-state", choices=("recorded", "scheduled", "both"), default="both",
                        help="start from the recorded t = 0 placements, schedule them again, or run both "
                             "(default)")
    parser.add_argument("--cell-model", choices=CELL_MODELS, default="overcommit",
                        help="the import's cell model (default overcommit: Borg's reclamation, the importer's "
                             "default and the fidelity goals' cell; plain: every task against capacity, the "
                             "default of older trees' bench: pass it to both trees to compare with one)")
    parser.add_argument("--decision-commits", choices=("as-decided", "at-end"), default="as-decided",
                        help="when a modelled decision's txns go out (omega replay --decision-commits)")
    parser.add_argument("--unplaced-charge", choices=("every", "once"), default="every",
                        help="modelled t_task for a decision's unplaced tasks (omega replay --unplaced-charge)")
    parser.add_argument("--submit-latency", type=float, default=None, metavar="S",
                        help="submission latency (default: the trace header's, 0.62 s for a Google import)")
    parser.add_argument("--digest", action="store_true", help="also print digests of the figures (wall times "
                        "left out) and of every key and value of the final cell, to check that a change of "
                        "the replay's code left what it simulates unchanged")
    parser.add_argument("--kth", action="store_true", help="also replay the KTH SP2 SWF log and print its wait "
                        "fidelity (replay wait p50 vs the logged one)")
    parser.add_argument("--kth-until", type=float, default=None, help="virtual seconds of KTH SP2 to replay "
                        "(default: the whole log, to its last logged start)")
    parser.add_argument("--kth-scheduler", choices=sorted(KTH_SCHEDULERS), default="default",
                        help="KTH's schedulers: default (the replay's: a job starts as soon as it fits) or "
                             "easy (FCFS with EASY backfilling, docs/EASY.md)")
    parser.add_argument("--kth-only", action="store_true", help="replay only KTH SP2 (implies --kth)")
    parser.add_argument("--kth-nodes", type=int, default=None, help="KTH's machines (default: the log's "
                        "header, 100); a probe of how the waits depend on the nodes the log does not record "
                        "(docs/EASY.md), never the goal's cell")
    parser.add_argument("--profile", metavar="OUT", help="write a pyinstrument profile here (HTML; text if "
                        "OUT ends with .txt)")
    args = parser.parse_args()
    if args.kth_only:
        run_kth(args.kth_until, args.kth_scheduler, args.kth_nodes)
        return 0
    trace = imported_trace(args.cell_model)
    print(f"interpreter {interpreter()}")
    print(f"cell model {args.cell_model} (mix capacity model, seed 0)")
    schedulers = [dict(name=f"batch{i}", kind="batch", seed=i) for i in range(args.batch)]
    schedulers.append(dict(name="service", kind=args.service_scheduler, jobs="service"))
    until = args.until if args.until is not None else args.hours * 3600
    modes = ("recorded", "scheduled") if args.initial_state == "both" else (args.initial_state,)
    for mode in modes:
        print(f"== initial state {mode}")
        config = ReplayConfig(schedulers=schedulers, until=until, check=False, initial_state=mode,
                              decision_commits=args.decision_commits, unplaced_charge=args.unplaced_charge,
                              submit_latency_s=args.submit_latency)
        profile = args.profile if len(modes) == 1 else _suffixed(args.profile, mode)
        run_once(trace, config, profile, args.digest)
    if args.kth:
        run_kth(args.kth_until, args.kth_scheduler, args.kth_nodes)
    return 0


def _suffixed(path: str | None, mode: str) -> str | None:
    if path is None:
        return None
    p = Path(path)
    return str(p.with_name(f"{p.stem}.{mode}{p.suffix}"))


def run_once(trace: Path, config: ReplayConfig, profile: str | None, digest: bool = False) -> None:
    """One replay: its figures, CPU time and verdict on stdout."""
    profiler = None
    if profile:
        from pyinstrument import Profiler
        profiler = Profiler()
        profiler.start()
    cpu_started = time.process_time()
    result = replay(trace, config, progress=_progress_printer(time.perf_counter(), cpu_started))
    cpu = time.process_time() - cpu_started
    if profiler is not None:
        profiler.stop()
        text = profile.endswith(".txt")
        Path(profile).write_text(profiler.output_text(show_all=False) if text else profiler.output_html())
    print_figures(result)
    print(f"process CPU time {cpu:.1f} s: {result.sim_time_s / cpu:.1f} virtual s per CPU s (the host is shared: "
          f"wall time includes waiting for a CPU)")
    if result.fidelity is not None:
        print("\n".join(result.fidelity.lines()))
    if digest:
        print_digests(result)
    print(verdict(f"replay speed ({config.initial_state})", result.speedup, GOAL, "virtual s per wall s",
                  higher_is_better=True))


def _progress_printer(wall_started: float, cpu_started: float, every_s: float = 300.0):
    """A replay progress callback: one stderr line per ``every_s`` virtual seconds."""
    next_at = [every_s]

    def progress(now: float, until: float | None) -> None:
        if now >= next_at[0]:
            next_at[0] = (now // every_s + 1) * every_s
            print(f"  virtual {now:,.0f} s: wall {time.perf_counter() - wall_started:.1f} s, "
                  f"cpu {time.process_time() - cpu_started:.1f} s", file=sys.stderr, flush=True)
    return progress


def print_digests(result) -> None:
    """sha256 of the figures without wall times (and without the fidelity section, which has its
    own), and of the final cell's keys and values."""
    import json

    plain = result.to_dict(include_wall=False)
    fidelity = plain.pop("fidelity", None)
    figures = hashlib.sha256(json.dumps(plain, indent=2, sort_keys=True).encode()).hexdigest()

    cell = hashlib.sha256()
    for kv in result.store.range(result.keys.prefix).kvs:
        cell.update(kv.key.encode())
        cell.update(kv.value)
    print(f"digest figures {figures[:16]} cell {cell.hexdigest()[:16]}")  # first: bench/side_by_side.sh shows it
    if fidelity is not None:
        print(f"digest fidelity {hashlib.sha256(json.dumps(fidelity, sort_keys=True).encode()).hexdigest()[:16]}")


def print_figures(result) -> None:
    print(f"trace events {result.events:,}, virtual {result.sim_time_s:,.0f} s, wall {result.wall_time_s:.1f} s")
    print(f"jobs submitted {result.jobs_submitted:,}, unscheduled at end {result.jobs_unscheduled:,}, "
          f"tasks ended {result.cell['tasks_ended']:,}")
    if result.config["initial_state"] == "recorded":
        not_placed = result.cell["initial_not_placed"]
        print(f"recorded t = 0 tasks written {result.cell['initial_placed']:,}, left pending "
              f"{sum(not_placed.values()):,}: {not_placed}")
    for s in result.schedulers:
        print(f"  {s.name:8s} busyness {s.busyness:.3f}  conflict fraction {s.conflict_fraction:.4f}  "
              f"attempts {s.attempts:,}  tasks placed {s.tasks_placed:,}  decide wall {s.decide_wall_s:.1f} s")
    w1, w2 = result.wait_to_first_attempt, result.wait_to_placed
    print(f"wait to first attempt: mean {w1.mean:.2f} s p90 {w1.p90:.2f} p99 {w1.p99:.2f}; "
          f"to placed: mean {w2.mean:.2f} p90 {w2.p90:.2f} p99 {w2.p99:.2f} ({w2.jobs:,} jobs)")
    last = result.utilization[-1]
    print(f"utilization at end: cpu {last.cpu:.3f} memory {last.memory:.3f} load cv {last.load_cv:.3f}")


if __name__ == "__main__":
    sys.exit(main())
