"""The ``omega`` command line. Each command group lives in its own ``tools/cmd_*.py``
module exposing ``register(subparsers)``; this module only assembles them."""

from __future__ import annotations

import argparse
import importlib
import logging
import signal
import sys
import threading

from cellstate.codec_fields import CodecError

# Command modules, in the order they appear in --help.
COMMAND_MODULES = [
    "tools.cmd_etcd",
    "tools.cmd_jobs",
    "tools.cmd_cell",
    "tools.cmd_cellup",
    "tools.cmd_monitor",
    "tools.cmd_trace",
    "tools.cmd_record",
    "tools.cmd_agents",
    "tools.cmd_replay",
    "tools.cmd_report",
    "tools.cmd_scheduler",
    "tools.cmd_demo",
    "tools.cmd_explain",
    "tools.cmd_experiment",
]


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived before a command installed its own graceful-stop handling."""


def _terminate(signum, frame) -> None:
    raise Terminated()


class UsageError(Exception):
    """A user mistake: printed as ``omega: error: …`` with exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="omega", description="Omega-style shared-state cluster scheduling.")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv: debug)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit status (2: usage error, 130: interrupted)."""
    previous = _install_sigterm()  # first: importing the commands takes a while
    try:
        return _run_command(argv)
    except Terminated:
        return 0  # asked to stop before the command took over graceful stopping
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _run_command(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = [logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)]
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        return int(args.func(args) or 0)
    except UsageError as exc:
        parser.exit(2, f"omega: error: {exc}\n")
    except CodecError as exc:
        # A stored value this version cannot read (an unknown schema version…) that the command
        # did not skip and count itself: one line naming the key and field, not a traceback.
        logging.getLogger(__name__).debug("undecodable value", exc_info=True)
        parser.exit(2, f"omega: error: {args.command}: cannot read {exc}\n")
    except Terminated:
        raise
    except KeyboardInterrupt:
        return 130


def _install_sigterm():
    """Make SIGTERM a clean stop from the first instant (commands may take it over later);
    returns the previous handler, or None off the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, _terminate)


def run() -> None:
    """Process entry point (the ``omega`` script): run ``main`` and exit with its status. A
    SIGTERM arriving while the interpreter tears down (gRPC threads, atexit) changes nothing:
    the command has already stopped cleanly."""
    code = main()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.exit(code)


if __name__ == "__main__":
    # Run as ``python -m tools.cli``: use the importable module so commands and main share
    # one UsageError class.
    from tools.cli import run as _run

    _run()
