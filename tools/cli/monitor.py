"""``omega monitor``: live view of a cell's schedulers, utilization, queues and conflicts."""

from __future__ import annotations

import sys

from cellstate.store import StoreError
from tools.cli.common import add_output_arg, add_store_args, cell_keys, connect, output_json


def register(sub) -> None:
    monitor = sub.add_parser("monitor", help="live conflict monitor of a cell, fitted to the terminal "
                                             "(docs/MONITOR.md)")
    add_store_args(monitor)
    monitor.add_argument("--once", action="store_true", help="print one frame after the initial sync and exit")
    add_output_arg(monitor)  # -o json: the frame as JSON and exit (with --follow: one JSON line per refresh)
    monitor.add_argument("--follow", action="store_true", help="with -o json: keep printing, one line per refresh")
    monitor.add_argument("--refresh-hz", type=float, default=4.0, help="redraws per second, 2..60 (default 4)")
    monitor.add_argument("--duration", type=float, default=None,
                         help="stop after this many seconds (default: run until Ctrl-C)")
    monitor.set_defaults(func=run)


def run(args) -> int:
    from tools.cli import UsageError
    from tools.monitor.live import MAX_HZ, MIN_HZ, run_monitor

    args.json = output_json(args)
    if args.follow and not args.json:
        raise UsageError("--follow needs --json (-o json)")
    if args.follow and args.once:
        raise UsageError("--follow and --once exclude each other")
    if not MIN_HZ <= args.refresh_hz <= MAX_HZ:
        raise UsageError(f"--refresh-hz must be between {MIN_HZ:g} and {MAX_HZ:g}, got {args.refresh_hz:g}")
    if args.duration is not None and args.duration < 0:
        raise UsageError(f"--duration must be >= 0 seconds, got {args.duration:g}")
    keys = cell_keys(args)
    with connect(args) as store:
        try:
            return run_monitor(store, keys, once=args.once, json=args.json, refresh_hz=args.refresh_hz,
                               follow=args.follow, duration=args.duration)
        except StoreError as exc:
            print(f"omega: monitor: {exc}", file=sys.stderr)
            return 1
