"""Progress of long runs: a rich bar when stderr is a terminal (``progress``); plain lines with
the percent done and an ETA on stderr for a run whose output goes to a file or pipe
(``TextProgress``)."""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager


@contextmanager
def progress(description: str, total: int | None = None, enabled: bool | None = None):
    """Yield ``advance(n)``; it drives a rich progress bar when ``enabled`` (default: stderr is
    a terminal); by default, when stdout is not a terminal either, ``TextProgress`` lines on
    stderr; otherwise it does nothing."""
    auto = enabled is None
    if auto:
        enabled = sys.stderr.isatty()
    if not enabled:
        if auto and not sys.stdout.isatty():  # a file or pipe: percent (of ``total``) and ETA lines
            text, done = TextProgress(description, "rows"), [0]

            def advance(n: int = 1) -> None:
                done[0] += n
                text(done[0], total)
            yield advance
        else:
            yield lambda n=1: None
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n=1: bar.advance(task, n)


class TextProgress:
    """``update(done, total)``: a line ``WHAT: 42.0 % (done of total UNIT), ETA 1m05s`` on
    ``stream`` at most every ``every`` wall seconds (none in the first ``every`` s, so a short run
    prints nothing); without a total, ``done`` alone. The ETA assumes the rate so far."""

    def __init__(self, what: str, unit: str = "", stream=None, every: float = 10.0, clock=time.monotonic):
        self.what, self.unit, self.every, self.clock = what, unit, every, clock
        self.stream = stream if stream is not None else sys.stderr
        self.started = clock()
        self._last = self.started

    def __call__(self, done: float, total: float | None = None) -> None:
        now = self.clock()
        if now - self._last < self.every:
            return
        self._last = now
        unit = f" {self.unit}" if self.unit else ""
        if total and total > 0:
            fraction = min(1.0, done / total)
            left = (now - self.started) * (1 - fraction) / fraction if fraction > 0 else None
            eta = "?" if left is None else _duration(left)
            line = f"{self.what}: {100 * fraction:.1f} % ({done:,.0f} of {total:,.0f}{unit}), ETA {eta}"
        else:
            line = f"{self.what}: {done:,.0f}{unit} ({_duration(now - self.started)} elapsed)"
        print(line, file=self.stream, flush=True)


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"
