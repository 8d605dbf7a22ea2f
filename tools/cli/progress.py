"""Progress lines of the long-running commands (``scheduler run``, ``agents run``, ``etcd
up``): ``--progress-every SECONDS`` (default 10; 0: none) adds one line on stderr that often,
saying what the process has done so far, and each prints a one-line summary when it stops
(SIGINT/SIGTERM or its ``--duration``). docs/CLI.md, "Long-running commands"."""

from __future__ import annotations

import sys
import threading
import time
from typing import Callable

DEFAULT_PROGRESS_EVERY_S = 10.0


def add_progress_arg(parser) -> None:
    parser.add_argument("--progress-every", type=float, default=DEFAULT_PROGRESS_EVERY_S, metavar="SECONDS",
                        help=f"print a progress line on stderr this often (default {DEFAULT_PROGRESS_EVERY_S:g}; "
                             "0: none)")


def progress_every(args) -> float:
    """``--progress-every`` checked: a finite number >= 0; UsageError otherwise."""
    from tools.cli import UsageError

    every = getattr(args, "progress_every", 0.0)
    if not 0 <= every < float("inf"):
        raise UsageError(f"--progress-every must be a finite number of seconds >= 0, got {every:g}")
    return every


class Progress:
    """A daemon thread printing ``line()`` on stderr every ``every_s`` seconds (none when 0)
    until ``stop()``; a ``line`` that raises is reported in the line instead of ending it."""

    def __init__(self, label: str, every_s: float, line: Callable[[], str], out=None):
        self.label, self.every_s, self.line = label, every_s, line
        self.out = out
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"progress-{label}", daemon=True)

    def __enter__(self) -> Progress:
        if self.every_s > 0:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()

    def elapsed(self) -> str:
        """Time since the start, for people: ``42s``, ``3m12s``, ``2h05m``."""
        return format_elapsed(time.monotonic() - self.started)

    def print(self, text: str) -> None:
        print(f"{self.label}: {text}", file=self.out or sys.stderr, flush=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                text = self.line()
            except Exception as exc:  # a progress line must never stop the process
                text = f"(no progress line: {type(exc).__name__}: {exc})"
            self.print(f"{text} after {self.elapsed()}")


def format_elapsed(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
