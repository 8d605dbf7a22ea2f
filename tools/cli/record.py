"""``omega record --out FILE [--duration S]``: record a live cell as an omega trace.

Stops on Ctrl-C (SIGINT), SIGTERM or after ``--duration`` seconds, writing a complete trace
(end record included). Exit status: 0 recorded; 1 store unreachable or lost for too long
(what was recorded until then is kept, complete); 2 bad flags.
"""

from __future__ import annotations

import math
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Iterator

from cellstate.store import StoreError
from tools.cli.common import add_store_args, cell_keys, connect, store_failure


def register(sub) -> None:
    rec = sub.add_parser("record", help="record a live cell's machines, jobs and task ends as a trace")
    rec.add_argument("--out", required=True, metavar="FILE", help="output trace (.omt, or .omt.gz to compress)")
    rec.add_argument("--duration", type=float, default=None, metavar="S",
                     help="stop after S seconds (default: until Ctrl-C or SIGTERM)")
    add_store_args(rec)
    rec.set_defaults(func=run_record)


@contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """Set ``stop`` on SIGINT/SIGTERM while inside (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_record(args) -> int:
    from tools.cli import UsageError
    from tools.recorder import record

    if args.duration is not None and not (0 <= args.duration < math.inf):
        raise UsageError(f"--duration must be a finite number of seconds >= 0, got {args.duration:g}")
    keys = cell_keys(args)
    stop = threading.Event()
    with connect(args) as store, stop_on_signals(stop):
        try:
            stats = record(store, keys, args.out, f"etcd {args.endpoints}", stop, args.duration)
        except StoreError as exc:
            print(f"omega: record: {store_failure(exc, args)}", file=sys.stderr)
            return 1
        except OSError as exc:
            raise UsageError(f"--out {args.out}: {exc.strerror or exc}") from None
    counts = ", ".join(f"{name} {n}" for name, n in sorted(stats.events.items())) or "no events"
    print(f"{args.out}: cell {keys.cell!r} revisions {stats.start_revision}..{stats.revision}: {counts}")
    if stats.bad_values:
        print(f"  ignored {stats.bad_values} value(s) that did not decode (see the log)")
    return 0
