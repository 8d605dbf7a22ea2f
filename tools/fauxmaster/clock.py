"""A small SimPy-like event core on virtual time, so the real scheduler code runs unchanged.

``EventCore`` keeps a heap of ``(time, seq, action)``; ``seq`` is a counter, so events at one
time run in the order they were scheduled (deterministic tie-break). ``Process`` runs a
function in a greenlet: when it holds (``hold``) or parks (``park``) it switches back to the
core, which resumes it at the right virtual time. ``VirtualClock`` is omega's ``Clock`` on top:
``now()`` is the core's time and ``sleep(s)``, called from inside a process (the optimistic
placer's backoff), holds that process ``s`` virtual seconds and books them as busy time.
"""

from __future__ import annotations

import heapq
import itertools
import math
from typing import Callable

from greenlet import getcurrent, greenlet


class SimulationError(RuntimeError):
    """Misuse of the event core (time going backwards, sleeping outside a process…)."""


class EventCore:
    """Virtual time and the event heap. ``run(until)`` executes actions in (time, seq) order."""

    def __init__(self, start: float = 0.0):
        self.now = float(start)
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._current: Process | None = None
        self._stopped = False
        self._limit = math.inf  # the running ``run``'s ``until``
        self.events_run = 0

    def at(self, t: float, action: Callable[[], None]) -> None:
        """Run ``action()`` at virtual time ``t`` (>= now), after every action already due then."""
        if t < self.now:
            raise SimulationError(f"cannot schedule at t={t!r}: the clock is at {self.now!r}")
        heapq.heappush(self._heap, (t, next(self._seq), action))

    def after(self, delay: float, action: Callable[[], None]) -> None:
        """Run ``action()`` ``delay`` (>= 0) virtual seconds from now."""
        if delay < 0:
            raise SimulationError(f"negative delay {delay!r}")
        heapq.heappush(self._heap, (self.now + delay, next(self._seq), action))  # at(now + delay): not before now

    def next_time(self) -> float | None:
        """Time of the next due action, None when nothing is scheduled."""
        return self._heap[0][0] if self._heap else None

    def advance(self, t: float) -> bool:
        """Move the clock to ``t`` (>= now) for the running action, when an action scheduled
        now at ``t`` would be the next to run: nothing is due at or before ``t``, which is
        within ``run``'s ``until``, and the core is not stopping. The action then goes on at
        ``t`` itself, as that action would have (without the heap's round trip or an
        ``on_step``). False, and the clock unchanged, otherwise."""
        if t < self.now:
            raise SimulationError(f"cannot advance to t={t!r}: the clock is at {self.now!r}")
        heap = self._heap
        if (heap and heap[0][0] <= t) or t > self._limit or self._stopped:
            return False
        self.now = t
        return True

    def run(self, until: float | None = None, on_step: Callable[[float], None] | None = None) -> float:
        """Run actions until none is left or the next is later than ``until`` (the clock then
        stops at ``until``); ``on_step(now)`` after each action. Returns the clock.

        The hot loop of a replay (one pass per action, millions): ``events_run`` is counted
        locally and added when the loop ends (also by an exception)."""
        heap = self._heap
        pop = heapq.heappop
        limit = self._limit = math.inf if until is None else until
        self._stopped = False
        ran = 0
        try:
            while heap and not self._stopped:
                t = heap[0][0]
                if t > limit:
                    break
                action = pop(heap)[2]
                self.now = t
                action()
                ran += 1
                if on_step is not None:
                    on_step(t)
        finally:
            self.events_run += ran
            self._limit = math.inf
        if until is not None and until > self.now and not self._stopped:
            self.now = until
        return self.now

    def stop(self) -> None:
        """Make ``run`` return after the current action."""
        self._stopped = True

    @property
    def current(self) -> Process | None:
        """The process running now (None in the core's own actions)."""
        return self._current


class Process:
    """``body()`` run as a simulated process, started at the current virtual time.
    ``held`` sums the virtual seconds it held, by label ("decide", "backoff", …)."""

    def __init__(self, core: EventCore, name: str, body: Callable[[], None]):
        self.core = core
        self.name = name
        self.held: dict[str, float] = {}
        self._hold_ends = 0.0  # when the latest hold ends (only it can still be running)
        self.finished = False
        self._wait_token = 0
        self._parked = False
        self._body = body
        self._glet = greenlet(self._main)
        core.at(core.now, self._resume_token(self._wait_token))

    def _main(self) -> None:
        self._body()
        self.finished = True

    def _resume_token(self, token: int) -> Callable[[], None]:
        def resume() -> None:
            if token != self._wait_token or self.finished:
                return  # a stale wake-up (the process was resumed another way meanwhile)
            self._wait_token += 1
            self._parked = False
            previous, self.core._current = self.core._current, self
            self._glet.parent = getcurrent()  # back to whoever runs the core when it waits
            try:
                self._glet.switch()
            finally:
                self.core._current = previous
        return resume

    def _yield(self) -> None:
        if getcurrent() is not self._glet:
            raise SimulationError(f"process {self.name!r} can only wait from inside itself")
        self._glet.parent.switch()

    def hold(self, seconds: float, label: str = "busy") -> None:
        """Let ``seconds`` of virtual time pass for this process, booked under ``label``."""
        if seconds < 0:
            raise SimulationError(f"process {self.name!r}: negative hold {seconds!r}")
        self.held[label] = self.held.get(label, 0.0) + seconds
        self._hold_ends = self.core.now + seconds
        self.core.after(seconds, self._resume_token(self._wait_token))
        self._yield()

    def held_until(self, t: float) -> float:
        """Virtual seconds held up to time ``t`` (>= the start of the latest hold): a hold
        still running at ``t`` counts only up to ``t``."""
        return sum(self.held.values()) - max(0.0, self._hold_ends - t)

    def park(self, timeout: float | None = None) -> None:
        """Wait until ``wake()`` (or ``timeout`` virtual seconds, if given)."""
        self._parked = True
        if timeout is not None:
            self.core.after(max(0.0, timeout), self._resume_token(self._wait_token))
        self._yield()

    @property
    def parked(self) -> bool:
        return self._parked

    def wake(self) -> None:
        """Resume a parked process at the current time (after actions already due now)."""
        if self._parked:
            self._parked = False
            self.core.at(self.core.now, self._resume_token(self._wait_token))


def spawn(core: EventCore, name: str, body: Callable[[], None]) -> Process:
    """A process running ``body`` from the current virtual time."""
    return Process(core, name, body)


class VirtualClock:
    """omega's ``Clock`` on an ``EventCore``: ``sleep`` holds the calling process (booked as
    "backoff"); outside a process it is an error, since time only moves by the core."""

    def __init__(self, core: EventCore):
        self.core = core

    def now(self) -> float:
        return self.core.now

    def sleep(self, seconds: float) -> None:
        process = self.core.current
        if process is None:
            raise SimulationError("VirtualClock.sleep outside a simulated process")
        process.hold(seconds, "backoff")
