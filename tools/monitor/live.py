"""Run the monitor: a ``ReplicaThread`` keeps a replica current from the cell's watch (etcd
is never polled) and the frame is rebuilt and redrawn ``refresh_hz`` times a second."""

from __future__ import annotations

import json as jsonlib
import sys
import time
from typing import Callable, TextIO

from rich.console import Console
from rich.live import Live

from cellstate.keys import CellKeys
from cellstate.replica.watched import Replica
from cellstate.replica.thread import ReplicaThread
from cellstate.store import Store
from tools.monitor.keys import KeyReader
from tools.monitor.model import ConflictHistory, MonitorFrame, build_frame, to_dict
from tools.monitor.render import render_frame

MIN_HZ, MAX_HZ = 2.0, 60.0


def run_monitor(store: Store, keys: CellKeys, once: bool = False, json: bool = False, refresh_hz: float = 4,
                follow: bool = False, duration: float | None = None, console: Console | None = None,
                out: TextIO | None = None, clock: Callable[[], float] = time.time,
                key_reader: KeyReader | None = None) -> int:
    """Show the cell's schedulers, utilization, queues and conflicts.

    ``once``: list the cell, print one frame, return. ``json``: print the frame as one JSON
    object instead (and return, as with ``once``), or with ``follow`` one JSON line per
    refresh. Otherwise a rich Live screen fitted to the terminal (``render.Screen``), redrawn
    ``refresh_hz`` (2..60) times a second, until ``q`` is pressed (read by ``key_reader``, default: a
    ``KeyReader`` of stdin when it is a terminal). Runs until interrupted, or ``duration`` seconds.
    Following frames (live screen, JSON lines) carry windowed conflict fractions from the
    stats samples seen since the monitor started; a single frame has none. Returns the exit
    status."""
    if not MIN_HZ <= refresh_hz <= MAX_HZ:
        raise ValueError(f"refresh_hz must be between {MIN_HZ:g} and {MAX_HZ:g}, got {refresh_hz!r}")
    if duration is not None and duration < 0:
        raise ValueError(f"duration must be >= 0 seconds, got {duration!r}")
    console = console or Console()
    out = out or sys.stdout
    replica = Replica(store, keys)
    if once or (json and not follow):
        replica.sync()
        replica.close()
        frame = build_frame(replica, clock())
        if json:
            emit_json(frame, out)
        else:
            console.print(render_frame(frame))
        return 0
    history = ConflictHistory()
    with ReplicaThread(replica) as thread:
        if json:
            _follow_json(thread, out, refresh_hz, duration, clock, history)
        else:
            _live(thread, console, refresh_hz, duration, clock, history, key_reader)
    return 0


def emit_json(frame: MonitorFrame, out: TextIO) -> None:
    """One line of JSON for ``frame``."""
    out.write(jsonlib.dumps(to_dict(frame), ensure_ascii=False) + "\n")
    out.flush()


def snapshot(thread: ReplicaThread, clock: Callable[[], float], history: ConflictHistory | None = None) -> MonitorFrame:
    """The current frame, read under the replica lock; a store outage shows as an error."""
    error = thread.error
    with thread.locked() as replica:
        return build_frame(replica, clock(), store_error=str(error) if error else "", history=history)


def _ticks(refresh_hz: float, duration: float | None, keys: KeyReader | None = None):
    """Yield once per refresh period until ``duration`` seconds have passed (None: forever) or,
    with ``keys``, until ``q`` is pressed (``keys.quit`` is then set)."""
    period = 1.0 / refresh_hz
    start = time.monotonic()
    next_at = start
    while duration is None or time.monotonic() - start < duration:
        yield
        next_at += period
        if keys is None:
            time.sleep(max(0.0, next_at - time.monotonic()))
        elif keys.wait(next_at - time.monotonic()):
            keys.quit = True
            return


def _follow_json(thread: ReplicaThread, out: TextIO, refresh_hz: float, duration: float | None, clock,
                 history: ConflictHistory) -> None:
    for _ in _ticks(refresh_hz, duration):
        emit_json(snapshot(thread, clock, history), out)


def _live(thread: ReplicaThread, console: Console, refresh_hz: float, duration: float | None, clock,
          history: ConflictHistory, keys: KeyReader | None = None) -> str:
    """Redraw until ``duration`` ends ("duration") or ``q`` is read from ``keys`` ("quit")."""
    keys = keys or KeyReader()
    with keys, Live(render_frame(snapshot(thread, clock, history), fit_height=True), console=console,
                    auto_refresh=False, redirect_stdout=False, redirect_stderr=False) as live:
        for _ in _ticks(refresh_hz, duration, keys):
            live.update(render_frame(snapshot(thread, clock, history), fit_height=True), refresh=True)
    return "quit" if keys.quit else "duration"
