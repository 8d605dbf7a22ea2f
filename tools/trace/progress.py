"""A progress bar for long imports: rich when stderr is a terminal, silent otherwise."""

from __future__ import annotations

import sys
from contextlib import contextmanager


@contextmanager
def progress(description: str, total: int | None = None, enabled: bool | None = None):
    """Yield ``advance(n)``; it drives a rich progress bar only when ``enabled`` (default:
    stderr is a terminal), and does nothing otherwise."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        yield lambda n=1: None
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n=1: bar.advance(task, n)
