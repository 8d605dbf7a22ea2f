"""The ``omega`` command line. Each command group lives in its own ``tools/cli/*.py``
module exposing ``register(subparsers)``; this module only assembles them."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
import threading

from cellstate.codec.fields import CodecError

# Command modules, in the order they appear in --help.
COMMAND_MODULES = [
    "tools.cli.etcd",
    "tools.cli.jobs",
    "tools.cli.cell",
    "tools.cli.cellup",
    "tools.cli.monitor",
    "tools.cli.trace",
    "tools.cli.record",
    "tools.cli.agents",
    "tools.cli.replay",
    "tools.cli.report",
    "tools.cli.scheduler",
    "tools.cli.demo",
    "tools.cli.explain",
    "tools.cli.experiment",
    "tools.cli.sweep",
    "tools.cli.completion",
]


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived before a command installed its own graceful-stop handling."""


def _terminate(signum, frame) -> None:
    raise Terminated()


# Exit statuses (docs/CLI.md): every command uses these.
EXIT_OK = 0
EXIT_FAILURE = 1      # a runtime error: the store unreachable or refusing, a check that found violations
EXIT_USAGE = 2        # bad flags or arguments
EXIT_DATA = 65        # an input file that does not parse or validate (sysexits EX_DATAERR)
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # stdout's reader closed it (`| head`): 128 + SIGPIPE, as a shell tool


class UsageError(Exception):
    """A user mistake in flags or arguments: printed as ``omega: error: …`` with exit status 2."""


class InputError(Exception):
    """An input file (job file, cell spec, chain config, trace) that does not parse or
    validate: printed as ``omega: error: …`` with exit status 65 (EX_DATAERR)."""


class CommandError(Exception):
    """A runtime failure the command explains in one line (an unreachable etcd, an unknown
    cell), its message starting with the command's name: printed as ``omega: COMMAND: …``
    with exit status 1."""


def version() -> str:
    """The installed distribution's version, else the one pyproject.toml names (a checkout)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("omega-scheduler")
    except PackageNotFoundError:
        import tomllib
        from pathlib import Path

        with open(Path(__file__).resolve().parents[1] / "pyproject.toml", "rb") as f:
            return tomllib.load(f)["project"]["version"]


class _VersionAction(argparse.Action):
    """``--version``: print ``omega VERSION`` and exit 0 (the version is looked up only then)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"omega {version()}")
        parser.exit(EXIT_OK)


EPILOG = """exit status: 0 ok, 1 runtime error (etcd unreachable or refusing, no such cell or job, a check
that found violations), 2 usage error, 65 invalid input file (job file, cell spec, config,
trace), 130 interrupted, 141 stdout closed by its reader (| head). Environment: OMEGA_ENDPOINTS, OMEGA_CELL, OMEGA_CA_CERT,
OMEGA_CREDENTIALS, OMEGA_AS. Shell completion: source <(omega completion bash). docs/CLI.md"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="omega", description="Omega-style shared-state cluster scheduling.",
                                     epilog=EPILOG)
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv: debug)")
    parser.add_argument("--version", action=_VersionAction, help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    _verbose_everywhere(parser)
    return parser


def _verbose_everywhere(parser: argparse.ArgumentParser) -> None:
    """Accept ``-v`` after the command too (``omega agents run … -v``), adding to any before it."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                if "-v" not in child._option_string_actions:
                    child.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                                       help="more logging (-vv: debug)")
                _verbose_everywhere(child)


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
        parser.exit(EXIT_USAGE, f"omega: error: {exc}\n")
    except InputError as exc:
        parser.exit(EXIT_DATA, f"omega: error: {exc}\n")
    except CommandError as exc:
        print(f"omega: {exc}", file=sys.stderr)  # returned, like a command's own failure
        return EXIT_FAILURE
    except CodecError as exc:
        # A stored value this version cannot read (an unknown schema version…) that the command
        # did not skip and count itself: one line naming the key and field, not a traceback.
        logging.getLogger(__name__).debug("undecodable value", exc_info=True)
        parser.exit(EXIT_DATA, f"omega: error: {args.command}: cannot read {exc}\n")
    except Terminated:
        raise
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


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
    from tools.cli.common import exit_once_stopped, own_process

    own_process()
    try:
        code = main()
        sys.stdout.flush()  # here, not in the interpreter's teardown, where a closed pipe is a traceback
    except BrokenPipeError:
        # the reader of stdout went away (`omega job list | head -1`): stop quietly, with the
        # status of a shell tool killed by SIGPIPE, and keep the interpreter's final flush of
        # stdout from raising again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = EXIT_BROKEN_PIPE
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    exit_once_stopped(code)  # the interpreter's teardown (gRPC, atexit) must not hang the process
    sys.exit(code)

