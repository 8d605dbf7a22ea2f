"""``omega import google2011|swf|openb …`` (published traces → omega trace) and ``omega trace info``."""

from __future__ import annotations

import argparse
import errno
import sys
import time
from collections import Counter
from pathlib import Path


def register(sub) -> None:
    imp = sub.add_parser("import", help="convert a published workload trace into an omega trace")
    imp_sub = imp.add_subparsers(dest="import_format", required=True, metavar="FORMAT")
    google = imp_sub.add_parser("google2011", help="Google clusterdata-2011 task_events + job_events parts")
    google.add_argument("--task-events", required=True, nargs="+", metavar="FILE",
                        help="task_events part file(s) (.csv.gz); several consecutive parts, in time order, "
                             "make one trace (a part other than 0 opens with the state its rows show)")
    google.add_argument("--job-events", required=True, nargs="+", metavar="FILE",
                        help="job_events part file(s) (.csv.gz) of the same parts")
    google.add_argument("--out", required=True, help="output trace (.omt, or .omt.gz to compress)")
    google.add_argument("--capacity-model", choices=("mix", "uniform"), default="mix",
                        help="physical capacities of machines the machine_events table does not give "
                             "(default mix: the published 2011 mix, drawn per machine by --seed)")
    google.add_argument("--cell-model", choices=("plain", "overcommit"), default="overcommit",
                        help="overcommit (default): Borg's resource reclamation, production (priority >= 9) "
                             "against physical capacity, every task against physical x (1 + reclaim), machines "
                             "raised to hold the recorded t = 0 state; plain: every task against capacity "
                             "(docs/TRACE_FORMAT.md)")
    google.add_argument("--reclaim", default="auto", help="overcommit: the reclaimable share, 'auto' (default: "
                        "the trace's own t = 0 overcommit) or a number >= 0")
    google.add_argument("--machine-events", default=None, metavar="FILE",
                        help="the trace's machine_events part file: real capacities, machines added and removed")
    google.add_argument("--keep-unscheduled-at-open", action="store_true",
                        help="keep the tasks pending when the window opens that no row schedules (by default "
                             "they are left out, and counted: the real cell held them for reasons the tables "
                             "read here do not carry)")
    google.add_argument("--seed", type=int, default=0, help="seed of the capacity draw (default 0)")
    google.add_argument("--limit", type=_positive_int, default=None, metavar="N",
                        help="read only the first N task event rows (N >= 1)")
    google.set_defaults(func=run_import_google)
    swf = imp_sub.add_parser("swf", help="Standard Workload Format v2.2 log (.swf or .swf.gz)")
    swf.add_argument("file")
    swf.add_argument("--out", required=True, help="output trace (.omt, or .omt.gz to compress)")
    swf.add_argument("--skip-bad", action="store_true", help="skip and count bad job lines")
    swf.add_argument("--nodes", type=int, default=None,
                     help="machines (default: header MaxNodes, else MaxProcs; processors a machine: "
                          "MaxProcs / MaxNodes when whole)")
    swf.add_argument("--node-memory-mib", type=int, default=None, help="memory per machine (default 1024 a processor)")
    swf.set_defaults(func=run_import_swf)

    openb = imp_sub.add_parser("openb", help="Alibaba cluster-trace-gpu-v2023 (openb) node list + pod list")
    openb.add_argument("--nodes", required=True, metavar="FILE", help="openb node list (.csv or .csv.gz)")
    openb.add_argument("--pods", required=True, metavar="FILE", help="openb pod list with creation/deletion times")
    openb.add_argument("--out", required=True, help="output trace (.omt, or .omt.gz to compress)")
    openb.set_defaults(func=run_import_openb)

    trace = sub.add_parser("trace", help="inspect omega trace files")
    trace_sub = trace.add_subparsers(dest="trace_command", required=True, metavar="ACTION")
    info = trace_sub.add_parser("info", help="header, event counts by type and time span")
    info.add_argument("file")
    info.set_defaults(func=run_info)


def _positive_int(text: str) -> int:
    """An argparse type: an int >= 1 (``--limit 0`` or ``-3`` would import nothing, silently)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value}")
    return value


def run_import_google(args) -> int:
    from tools.cli import InputError, UsageError
    from tools.trace.format import TraceError
    from tools.trace.google2011.cell import CapacityModel, CellModel, MachineEventsError, parse_reclaim
    from tools.trace.google2011.importer import import_google2011
    from tools.trace.google2011.schema import GoogleTraceError

    started = time.perf_counter()
    try:
        reclaim = parse_reclaim(args.reclaim)
        cell_model = CellModel(args.cell_model, reclaim)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        stats = import_google2011(args.task_events, args.job_events, args.out,
                                  CapacityModel(args.capacity_model, args.seed), limit=args.limit,
                                  cell_model=cell_model, machine_events=args.machine_events,
                                  keep_unscheduled_at_open=args.keep_unscheduled_at_open)
    except OSError as exc:
        raise _import_os_error(exc, args.out) from None
    except (GoogleTraceError, TraceError, MachineEventsError) as exc:
        raise InputError(str(exc)) from None
    counts = ", ".join(f"{name} {n}" for name, n in stats.events.items())
    print(f"{args.out}: {stats.rows} rows → {counts} in {time.perf_counter() - started:.1f} s")
    print(f"  cell model {cell_model.name}" + (f", reclaim {args.reclaim}" if cell_model.name == "overcommit" else "")
          + (f", machine_events {args.machine_events}" if args.machine_events else "")
          + " (the header's capacity_model states it in full: omega trace info)")
    for why, n in stats.skipped.items():
        print(f"  {why}: {n}")
    for warning in stats.warnings:
        print(f"warning: {args.out}: {warning}", file=sys.stderr)
    return 0


def run_import_swf(args) -> int:
    from tools.cli import InputError, UsageError
    from tools.trace.format import TraceError
    from tools.trace.swf import MAX_NODES, SWFError, SWFNotText, import_swf

    if args.nodes is not None and not 1 <= args.nodes <= MAX_NODES:
        raise UsageError(f"--nodes must be between 1 and {MAX_NODES:,} machines, got {args.nodes}")
    if args.node_memory_mib is not None and not 0 <= args.node_memory_mib <= 2**53:
        raise UsageError(f"--node-memory-mib must be between 0 and 2**53, got {args.node_memory_mib}")
    started = time.perf_counter()
    try:
        stats = import_swf(args.file, args.out, skip_bad=args.skip_bad, nodes=args.nodes,
                           node_memory_mib=args.node_memory_mib)
    except SWFError as exc:
        skippable = " line " in str(exc) and not isinstance(exc, SWFNotText)
        hint = " (--skip-bad skips and counts such lines)" if skippable and not args.skip_bad else ""
        raise InputError(f"{exc}{hint}; nothing written to {args.out}") from None
    except OSError as exc:
        raise _import_os_error(exc, args.out) from None
    except TraceError as exc:
        raise InputError(str(exc)) from None
    print(f"{args.out}: {stats.machines} machines, {stats.jobs} jobs in {time.perf_counter() - started:.1f} s")
    print(f"  {stats.summary()}")
    if stats.bad_lines:
        print(f"  skipped {len(stats.bad_lines)} bad line(s), first: {stats.bad_lines[0][1]}")
    if stats.unusable:
        print(f"  skipped {len(stats.unusable)} unusable line(s), first: {stats.unusable[0][1]}")
    if stats.jobs and not stats.logged_waits:
        print("  no ground truth: no job has a logged wait (wait_s -1 on every line), so a replay has no fidelity "
              "to report")
    for line in stats.warnings(args.file):
        print(f"warning: {line}", file=sys.stderr)
    assumed = {name: n for name, n in stats.assumed.items() if n}
    if assumed or stats.unusable:
        from tools.trace.swf import ASSUMPTIONS
        what = "; ".join(f"{name} {n:,}x ({ASSUMPTIONS[name]})" for name, n in assumed.items())
        print(f"warning: {args.file}: " + (f"assumed for unknown (-1) fields: {what}" if what else "")
              + ("; " if what and stats.unusable else "")
              + (f"{len(stats.unusable):,} row(s) unusable and skipped" if stats.unusable else ""), file=sys.stderr)
    return 0


def run_import_openb(args) -> int:
    from tools.cli import InputError, UsageError
    from tools.trace.format import TraceError
    from tools.trace.openb.importer import import_openb
    from tools.trace.openb.lists import OpenbError

    for path in (args.nodes, args.pods):  # a missing list is a usage error, as in `experiment gpu-frag`
        if not Path(path).is_file():
            raise UsageError(f"{path}: no such file")
    started = time.perf_counter()
    try:
        stats = import_openb(args.nodes, args.pods, args.out)
    except OpenbError as exc:
        raise InputError(f"{exc}; nothing written to {args.out}") from None
    except OSError as exc:
        raise _import_os_error(exc, args.out) from None
    except TraceError as exc:
        raise InputError(str(exc)) from None
    print(f"{args.out}: {stats.machines} machines ({stats.gpus} GPUs), {stats.jobs} jobs "
          f"in {time.perf_counter() - started:.1f} s")
    print(f"  {stats.summary()}")
    if stats.no_creation_time or stats.gpu_spec_no_node_has or stats.no_node_fits or stats.unknown_qos:
        print(f"warning: {args.pods}: {stats.no_creation_time} pod(s) skipped (no creation_time), "
              f"{stats.gpu_spec_no_node_has} ask a GPU model no node has and {stats.no_node_fits} more than any "
              f"node (of their models) holds (they can never be placed), "
              f"{sum(stats.unknown_qos.values())} with an unknown qos", file=sys.stderr)
    return 0


def run_info(args) -> int:
    from tools.cli import InputError, UsageError
    from tools.trace.format import TraceError, read_trace

    counts: Counter[str] = Counter()
    first = last = first_submit = None
    try:
        header, events = read_trace(args.file)
        with events:
            for event in events:
                counts[type(event).__name__] += 1
                first = event.t if first is None else first
                last = event.t
                if first_submit is None and type(event).__name__ == "JobSubmit":
                    first_submit = event.t
    except OSError as exc:
        raise UsageError(_os_error(exc)) from None
    except TraceError as exc:
        raise InputError(str(exc)) from None
    for name in ("source", "created_at", "cell", "capacity_model", "notes"):
        print(f"{name}: {getattr(header, name)}")
    truth = events.truth
    if truth is not None:
        scheduled = sum(d is not None for v in truth.delays.values() for d in v)
        occupancy = "" if truth.occupancy is None else f", occupancy at {len(truth.occupancy.t)} times"
        print(f"ground_truth: per {truth.unit}, {len(truth.delays):,} jobs, {truth.tasks():,} {truth.unit}s "
              f"({scheduled:,} scheduled by {truth.horizon:,.1f} s){occupancy}; {truth.notes}")
    for name, n in sorted(counts.items()):
        print(f"{name}: {n}")
    span = "no events" if first is None else f"{first:.3f} .. {last:.3f} s ({last - first:.3f} s)"
    print(f"events: {sum(counts.values())}, time span: {span}"
          + ("" if first_submit is None else f", first job submitted at {first_submit:.3f} s"))
    return 0


WRITE_FAILURES = (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG)
"""Errors of writing, not of naming a file: a full disk (``--out /dev/full``), a quota, a device."""


def _import_os_error(exc: OSError, out: str) -> Exception:
    """An importer's OSError: a failed write of ``--out`` is a runtime error (exit 1) naming the flag;
    anything else (a missing input, a directory as ``--out``) a usage error naming the file (exit 2)."""
    from tools.cli import CommandError, UsageError

    if exc.errno in WRITE_FAILURES:
        return CommandError(f"import: --out {out}: cannot write it: {exc.strerror or exc}; nothing written")
    return UsageError(_os_error(exc))


def _os_error(exc: OSError) -> str:
    """One line naming the file: ``FILE: No such file or directory``."""
    return f"{exc.filename}: {exc.strerror}" if exc.filename and exc.strerror else str(exc)
