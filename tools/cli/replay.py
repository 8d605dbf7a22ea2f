"""``omega replay FILE``: run the fauxmaster — replay an omega trace against the real
schedulers on virtual time, print the figures, optionally write JSON and an HTML report; on a
terminal a progress bar of virtual time (``rich_progress``) is drawn on stderr meanwhile.

``--schedulers`` takes a JSON list of scheduler configs (or ``@file.json``), or a comma list
of ``NAME:KIND[:CONFLICT_MODE[:COMMIT_MODE]]`` items, e.g. ``b1:batch,b2:batch:sequence,s:service``.
``--order`` sets the queue order of every scheduler whose config names none, ``--drf-weight``
the owners' weights of every drf scheduler whose config names none.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from contextlib import contextmanager
from typing import Callable, Iterator

from cellstate.store import StoreError
from tools.cli.common import DEFAULT_ENDPOINTS, add_auth_args, add_output_arg, output_json
from tools.cli.plugin_args import add_plugin_arg, load_plugin_args
from tools.fauxmaster.scheduler_mix import parse_schedulers

DEFAULT_SPEC = "batch:batch,service:service"


def register(sub) -> None:
    p = sub.add_parser("replay", help="replay a trace against the real schedulers on virtual time (fauxmaster)")
    p.add_argument("file", help="omega trace (.omt or .omt.gz)")
    p.add_argument("--store", choices=("memory", "etcd"), default="memory", help="cell store (default memory)")
    p.add_argument("--endpoints", default=os.environ.get("OMEGA_ENDPOINTS", DEFAULT_ENDPOINTS),
                   help=f"etcd host:port list for --store etcd (default: $OMEGA_ENDPOINTS or {DEFAULT_ENDPOINTS})")
    p.add_argument("--cell", default="fauxmaster", help="cell name (must be empty in etcd)")
    add_auth_args(p)  # --store etcd over TLS, with a client certificate or a login
    p.add_argument("--max-txn-ops", type=int, default=128, metavar="N",
                   help="operations per txn (default 128, etcd's default; a gang of more than (N - 1) / 2 "
                        "tasks cannot be placed; with --store etcd, the etcd's own limit)")
    p.add_argument("--schedulers", default=DEFAULT_SPEC, metavar="SPEC",
                   help=f"JSON list, @file.json, or NAME:KIND[:CONFLICT[:COMMIT]],… (default {DEFAULT_SPEC})")
    p.add_argument("--decision-time", choices=("modelled", "measured"), default="modelled")
    p.add_argument("--decision-commits", choices=("as-decided", "at-end"), default="as-decided",
                   help="a modelled decision's txns go out as-decided (default: each once its tasks' "
                        "share of the decision time has passed) or at-end (Omega's simulator)")
    p.add_argument("--unplaced-charge", choices=("every", "once"), default="every",
                   help="modelled t_task for the tasks a decision leaves unplaced: every one (default, "
                        "the paper's model) or once per decision (Borg's equivalence classes)")
    p.add_argument("--time-scale", type=float, default=1.0, metavar="X",
                   help="measured decision time multiplier (default 1)")
    p.add_argument("--t-job", type=float, default=None, metavar="S", help="modelled seconds per job (default 0.1)")
    p.add_argument("--t-task", type=float, default=None, metavar="S",
                   help="modelled seconds per task (default 0.005)")
    p.add_argument("--submit-latency", type=float, default=None, metavar="S",
                   help="seconds from a job's submission (after t = 0) to the schedulers seeing it; its "
                        "wait counts from the submission (default: the trace's, 0 unless its importer states "
                        "one: Google-2011 0.62, calibrated on part 0, docs/EXPERIMENTS.md)")
    p.add_argument("--seed", type=int, default=0, help="base seed: scheduler i gets seed + i (default 0)")
    p.add_argument("--order", default=None, metavar="ORDER",
                   help="queue order of schedulers whose config names none: fair (default) | drf")
    p.add_argument("--drf-weight", action="append", default=[], metavar="OWNER=W",
                   help="owner weight under --order drf (default 1; repeatable)")
    p.add_argument("--until", type=float, default=None, metavar="S",
                   help="stop at this virtual time, s (default: the trace's end)")
    p.add_argument("--initial-state", choices=("recorded", "scheduled"), default="recorded",
                   help="recorded (default): start from the trace's t = 0 task_placed events where they "
                        "fit; scheduled: the schedulers place every task submitted at t = 0")
    p.add_argument("--sample-every", type=float, default=60.0, metavar="S", help="utilization sample period (virtual s, default 60); it grows with the span so that a "
                        "replay holds at most 4,000 samples (tools.fauxmaster.replay.MAX_SAMPLES)")
    p.add_argument("--no-check", action="store_true", help="skip the invariant check of the final cell")
    p.add_argument("--json-out", metavar="FILE", dest="json", help="also write the result as JSON to FILE")
    p.add_argument("--json", metavar="FILE", dest="json", help=argparse.SUPPRESS)  # deprecated: --json-out
    add_output_arg(p, json_alias=False)
    p.add_argument("--html", metavar="DIR", help="write an HTML report with plots (needs matplotlib)")
    p.add_argument("--jobs-out", metavar="FILE", help="write per-job records to FILE.csv or FILE.parquet (needs "
                   "pyarrow): submit, first attempt, placed, end, wait, kind, priority, owner, scheduler, machines")
    p.add_argument("--seeds", type=int, default=1, metavar="N",
                   help="run N seeds (run k: base seed --seed + k x the number of schedulers) and print the mean "
                        "and 95 %% t-interval of the headline figures (default 1); --json-out, --jobs-out and "
                        "--html then hold every run")
    add_plugin_arg(p)
    p.set_defaults(func=run_replay)


def run_replay(args) -> int:
    from omega.drf import parse_weight_flags
    from tools.cli import InputError, UsageError
    from tools.cli.common import (
        endpoints_of, output_file_errors, replay_errors, require_optional, store_auth, store_failure,
    )
    from tools.fauxmaster.replay import ReplayConfig, replay
    from tools.fauxmaster.report.page import write_html
    from tools.fauxmaster.report.result import write_json

    load_plugin_args(args)
    from_file = args.schedulers.strip().startswith("@")
    if args.seeds < 1:
        raise UsageError(f"--seeds: expected a number of runs >= 1, got {args.seeds}")
    if args.jobs_out:
        from tools.fauxmaster.job_records import format_of
        try:
            if format_of(args.jobs_out) == ".parquet":
                require_optional("pyarrow", "replay --jobs-out FILE.parquet")
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    try:
        schedulers = parse_schedulers(args.schedulers, args.seed, args.t_job, args.t_task, args.order,
                                      parse_weight_flags(args.drf_weight))
    except OSError as exc:
        raise UsageError(f"--schedulers {args.schedulers}: {exc.strerror or exc}") from None
    except ValueError as exc:  # from --schedulers @FILE: an invalid input file (65); else a bad flag (2)
        why = f"not valid JSON: {exc}" if isinstance(exc, json.JSONDecodeError) else str(exc)
        if from_file:
            raise InputError(f"{args.schedulers.strip()[1:]}: {why}") from None
        raise UsageError(f"--schedulers: {why}" if isinstance(exc, json.JSONDecodeError) else why) from None
    if any(c.get("kind") == "solver" for c in schedulers):  # before building them
        require_optional("ortools", "replay of a solver scheduler")
    try:
        config = ReplayConfig(
            schedulers=schedulers, store=args.store,
            endpoints=endpoints_of(args.endpoints) if args.store == "etcd" else [], cell=args.cell,
            store_auth=store_auth(args) if args.store == "etcd" else {},
            decision_time=args.decision_time, decision_commits=args.decision_commits,
            unplaced_charge=args.unplaced_charge, time_scale=args.time_scale, until=args.until,
            sample_every_s=args.sample_every, check=not args.no_check, initial_state=args.initial_state,
            max_txn_ops=args.max_txn_ops, submit_latency_s=args.submit_latency, job_records=bool(args.jobs_out))
    except ValueError as exc:  # a flag, or a scheduler config naming an unknown kind or mode
        raise UsageError(str(exc)) from None
    _check_before_replay(args)  # a bad input or output path fails now, not after the replay
    if args.html:
        require_optional("matplotlib", "replay --html")
    if args.seeds > 1:
        return _run_seeds(args, config)
    try:
        with replay_errors(), run_progress() as progress:
            result = replay(args.file, config, progress)
    except StoreError as exc:  # --store etcd: unreachable, refused, …
        print(f"omega: replay: {store_failure(exc, args)}", file=sys.stderr)
        return 1
    if output_json(args):
        print(result.to_json())
    else:
        _print_summary(result)
    if args.jobs_out:
        from tools.fauxmaster.job_records import write_job_rows
        with output_file_errors("replay", "--jobs-out", args.jobs_out):
            write_job_rows(result.jobs, args.jobs_out)
    if args.json:
        with output_file_errors("replay", "--json-out", args.json):
            write_json(result, args.json)
    if args.html:
        with output_file_errors("replay", "--html", args.html):
            index = write_html(result, args.html)
        print(f"report: {index}", file=sys.stderr if output_json(args) else sys.stdout)
    return 0 if result.check is None or result.check["ok"] else 1


def _run_seeds(args, config) -> int:
    """``--seeds N``: the replay N times, run k with every scheduler's seed + k x the number of
    schedulers (so no scheduler seed repeats; run k's base seed is ``--seed`` + k x that number), then the headline figures' mean and 95 %
    t-interval (``tools.fauxmaster.seeds``). ``--json-out``: {seeds, summary, runs};
    ``--jobs-out``: every run's rows with a ``seed`` column first; ``--html``: the runs side by side."""
    from dataclasses import replace

    from tools.cli.common import output_file_errors, replay_errors, store_failure
    from tools.fauxmaster import seeds as seeding
    from tools.fauxmaster.replay import replay

    width = len(config.schedulers)
    bases = [args.seed + k * width for k in range(args.seeds)]
    results = []
    for k, base in enumerate(bases):
        run = replace(config, schedulers=[replace(s, seed=s.seed + k * width) for s in config.schedulers])
        try:
            with replay_errors(), run_progress(f"replay seed {base} ({k + 1} of {len(bases)})") as progress:
                results.append(replay(args.file, run, progress))
        except StoreError as exc:
            print(f"omega: replay: {store_failure(exc, args)}", file=sys.stderr)
            return 1
    summary = seeding.summarize([seeding.headline(r) for r in results])
    data = {"seeds": bases, "summary": summary, "runs": [r.to_dict() for r in results]}
    if output_json(args):
        print(json.dumps(data, indent=2, default=str))
    else:
        for base, result in zip(bases, results):
            print(f"seed {base}: {result.sim_time_s:,.1f} virtual s in {result.wall_time_s:,.2f} s, wait to placed "
                  f"mean {result.wait_to_placed.mean:.2f} s")
        print("\n".join(seeding.lines(bases, summary)))
    if args.json:
        from tools.fauxmaster.report.result import write_whole
        with output_file_errors("replay", "--json-out", args.json):
            write_whole(args.json, json.dumps(data, indent=2, default=str))
    if args.jobs_out:
        from tools.fauxmaster.job_records import write_job_rows
        rows = [{"seed": base, **row} for base, r in zip(bases, results) for row in r.jobs]
        with output_file_errors("replay", "--jobs-out", args.jobs_out):
            write_job_rows(rows, args.jobs_out)
    if args.html:
        from pathlib import Path

        from tools.fauxmaster.report.page import write_report
        from tools.fauxmaster.report.result import run_of, write_json
        out = Path(args.html)
        with output_file_errors("replay", "--html", args.html):
            out.mkdir(parents=True, exist_ok=True)
            for base, r in zip(bases, results):
                write_json(r, out / f"result-seed{base}.json")
            index = write_report([run_of(r, f"seed {base}") for base, r in zip(bases, results)], out,
                                 links={f"seed {b}": f"result-seed{b}.json" for b in bases},
                                 preface=seeding.lines(bases, summary))
        print(f"report: {index}", file=sys.stderr if output_json(args) else sys.stdout)
    ok = all(r.check is None or r.check["ok"] for r in results)
    return 0 if ok else 1


def _check_before_replay(args) -> None:
    """UsageError (one line naming the file) for a trace that is missing, unreadable or truncated
    (``tools.trace.format.check_complete``), or a ``--json-out`` / ``--html`` / ``--jobs-out`` path that cannot be
    written: checked before the replay, whose result would otherwise be lost."""
    from tools.cli import InputError, UsageError
    from tools.trace.format import TraceError, check_complete

    try:
        check_complete(args.file)
    except OSError as exc:
        raise UsageError(f"trace {args.file}: {exc.strerror or exc}") from None
    except TraceError as exc:
        raise InputError(str(exc)) from None
    for flag, path, directory in (("--json-out", args.json, False), ("--html", args.html, True),
                                  ("--jobs-out", args.jobs_out, False)):
        if path:
            why = unwritable(path, directory)
            if why:
                raise UsageError(f"{flag} {path}: {why}")


def unwritable(path: str, directory: bool) -> str | None:
    """Why ``path`` (a file, or a directory to create or fill) cannot be written, or None."""
    if os.path.exists(path):
        if os.path.isdir(path) != directory:
            return "is a directory" if not directory else "exists and is not a directory"
        return None if os.access(path, os.W_OK) else "permission denied"
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        return f"{parent} is not a directory"
    return None if os.access(parent, os.W_OK | os.X_OK) else f"cannot create it in {parent} (permission denied)"


def first_submission(path) -> float | None:
    """The time of the first job submission in the trace at ``path`` (None: it has none). A log
    cleaned of its first days (SWF's KTH SP2 starts at 599,850 s) leaves a short replay empty."""
    from tools.trace.events import JobSubmit
    from tools.trace.reader import read_trace

    _, events = read_trace(path)
    with events:
        return next((e.t for e in events if isinstance(e, JobSubmit)), None)


def _print_summary(result) -> None:
    from tools.fauxmaster.replay import decision_model
    from tools.fauxmaster.report.summary import utilization_means

    print(f"{result.trace}: {result.sim_time_s:,.1f} virtual s in {result.wall_time_s:,.2f} s "
          f"({result.speedup:,.0f}x), {result.events:,} events, {result.jobs_submitted:,} jobs, "
          f"{result.jobs_unscheduled:,} unscheduled at the end")
    if not result.jobs_submitted:
        first = first_submission(result.trace)
        print(f"  NOTE: no job submitted by the stop at {result.sim_time_s:,.0f} virtual s: "
              + (f"the trace's first submission is at {first:,.0f} s (--until beyond it replays some)"
                 if first is not None else "the trace submits none"))
    if result.capacity_model:
        print(f"  cell (trace header): {result.capacity_model}")
    print(f"  decision time: {decision_model(result.config)}")
    not_placed = result.cell.get("initial_not_placed") or {}
    if result.cell.get("initial_placed") or not_placed:
        print(f"  recorded t = 0 state: {result.cell['initial_placed']:,} tasks on their recorded machines, "
              f"{sum(not_placed.values()):,} left pending ({', '.join(f'{k}: {v:,}' for k, v in not_placed.items())})")
    for s in result.schedulers:
        print(f"  {s.name} ({s.kind}): busyness {s.busyness:.3f}, conflict fraction {s.conflict_fraction:.4f}, "
              f"{s.attempts:,} attempts, {s.tasks_placed:,} tasks placed")
    w1, w2 = result.wait_to_first_attempt, result.wait_to_placed
    print(f"  wait to first attempt mean {w1.mean:,.2f} s (p90 {w1.p90:,.2f} s, p99 {w1.p99:,.2f} s); "
          f"to placed mean {w2.mean:,.2f} s (p90 {w2.p90:,.2f} s, p99 {w2.p99:,.2f} s)")
    if result.wait_cdf:
        cdf = result.wait_cdf
        print(f"  of {cdf['jobs']:,} jobs to place: {cdf['to_first_attempt']['never']:,} never attempted, "
              f"{cdf['to_placed']['never']:,} never fully placed ({cdf['to_placed']['pending_at_end']:,} pending "
              f"at the end, {cdf['to_placed']['ended_unplaced']:,} ended or killed before)")
    if result.slowdown:
        from tools.fauxmaster.report.summary import slowdown_text
        print(f"  {slowdown_text(result.slowdown)}")
    print(f"  utilization: {len(result.utilization):,} samples, every {result.utilization_interval_s:,.0f} virtual s "
          f"(at least --sample-every; grows with the span to bound the samples)")
    if result.utilization:
        means = utilization_means([u.to_dict() for u in result.utilization])
        print("  utilization means over the samples: " + ", ".join(f"{name} {v:.3f}" for name, v in means.items()))
    if result.losses:
        print("  losses: " + ", ".join(f"{name.replace('_', ' ')} {n:,}" for name, n in result.losses.items()))
    if result.check is not None:
        state = "ok" if result.check["ok"] else f"{len(result.check['violations'])} VIOLATIONS"
        print(f"  invariants: {state}")
    if result.fidelity is not None:
        print("\n".join(result.fidelity.lines(cell=not result.capacity_model)))  # else printed above


@contextmanager
def run_progress(what: str = "replay") -> Iterator[Callable[[float, float | None], None] | None]:
    """A ``progress(now, until)`` callback: a rich bar when stderr is a terminal; percent and ETA
    lines on stderr (``TextProgress``, every 10 s) when stdout is not a terminal; else None."""
    if sys.stderr.isatty():
        with rich_progress(True) as progress:
            yield progress
    elif not sys.stdout.isatty():
        from tools.trace.progress import TextProgress

        yield TextProgress(what, "virtual s")
    else:
        yield None


@contextmanager
def rich_progress(enabled: bool) -> Iterator[Callable[[float, float | None], None] | None]:
    """A ``progress(now, until)`` callback drawing a rich bar of virtual time (None if disabled)."""
    if not enabled:
        yield None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("replay"), BarColumn(), TextColumn("{task.fields[now]:,.0f} virtual s"),
               TimeElapsedColumn())
    with Progress(*columns, transient=True) as bar:
        task = bar.add_task("replay", total=None, now=0.0)

        def update(now: float, until: float | None) -> None:
            bar.update(task, completed=now, total=until, now=now)

        yield update
