"""``TraceFeed``: streams a trace's events into a ``SimCell`` at their virtual times.

The machines that open the trace (``machine_add`` at t = 0) are written before the
schedulers start, so their replicas list them. Afterwards the feed runs as one action per
distinct event time: the events of that time in file order, consecutive job submissions in
one ``submit`` call (as one client would), consecutive ``task_placed`` events (read as
(job, task, machine) triples, ``TraceReader.read_placements``) in one bulk write
(``initial_state="recorded"`` and t = 0 only: see ``tools.fauxmaster.initial_state``;
otherwise they are counted as skipped). An action that would be the next to run at the
following event time goes on there itself (``EventCore.advance``: the same order as
scheduling it, without the heap's round trip). When the trace ends the replay stops there,
unless an ``until`` time was given.
"""

from __future__ import annotations

from tools.fauxmaster.cell import SimCell
from tools.fauxmaster.clock import EventCore
from tools.fauxmaster.initial_state import INITIAL_STATES, place_recorded
from tools.trace.events import JobKill, JobSubmit, MachineAdd, MachineFail, MachineRemove, TaskEnd, TaskPlaced
from tools.trace.format import read_trace


class TraceFeed:
    """Feeds the trace at ``path`` to ``cell`` on ``core`` (a context manager closing the file)."""

    def __init__(self, path, cell: SimCell, core: EventCore, until: float | None = None,
                 initial_state: str = "recorded"):
        if initial_state not in INITIAL_STATES:
            raise ValueError(f"initial_state must be one of {INITIAL_STATES}, got {initial_state!r}")
        self.initial_state = initial_state
        self.header, self._reader = read_trace(path)
        self.cell = cell
        self.core = core
        self.until = until
        self.events = 0
        self.last_t = 0.0
        self._next = self._read()

    def _read(self):
        event = next(self._reader, None)
        if event is not None:
            self.events += 1
            self.last_t = event.t
        return event

    def write_initial_machines(self) -> None:
        """Write the machine_add events at t = 0 that open the trace."""
        machines = []
        while isinstance(self._next, MachineAdd) and self._next.t == 0:
            machines.append(self._next.machine)
            self._next = self._read()
        self.cell.add_machines(machines)

    def start(self) -> None:
        """Schedule the first event time (or the end, for a trace of machines only)."""
        self._schedule_next()

    def _schedule_next(self) -> None:
        event = self._next
        if event is None:
            if self.until is None:
                self.core.at(max(self.core.now, self.last_t), self.core.stop)
            return
        if self.until is not None and event.t > self.until:
            return
        self.core.at(event.t, self._feed)

    def _feed(self) -> None:
        """Apply every event of the current time; then go on at the next time while this action
        would be the next to run there (``EventCore.advance``), else schedule it."""
        until, advance = self.until, self.core.advance
        while True:
            self._feed_now()
            event = self._next
            if event is None or (until is not None and event.t > until) or not advance(event.t):
                break
        self._schedule_next()

    def _feed_now(self) -> None:
        """Apply every event of the current time.

        A hot loop (one pass per trace event): the reader is called directly, not via ``_read``,
        a task end goes straight to the cell, and a run of ``task_placed`` records is read as
        (job, task, machine) triples."""
        now = self.core.now
        reader, trace_task_end = self._reader, self.cell.trace_task_end
        read_next = reader.__next__  # called in Python, not through next()'s iterator slot
        run: list = []  # the jobs of consecutive JobSubmit events, or the triples of TaskPlaced ones
        run_type = None
        event = self._next
        read = 0  # events read past ``event``
        while event is not None and event.t == now:
            kind = type(event)
            if run and kind is not run_type:
                self._apply_run(run_type, run)
                run = []
            if kind is TaskEnd:  # the most frequent first
                trace_task_end(event.job_id, event.task)
            elif kind is JobSubmit:
                run_type = kind
                run.append(event.job)
            elif kind is TaskPlaced:
                run_type = kind
                run.append((event.job_id, event.task, event.machine_id))
                count = len(run)
                self._next = event = reader.read_placements(run)
                read += len(run) - count + (event is not None)
                continue
            else:
                self._apply(event)
            try:
                self._next = event = read_next()
            except StopIteration:
                self._next = event = None
                break
            read += 1
        if event is not None:  # as _read
            self.last_t = event.t
        self.events += read
        if run:
            self._apply_run(run_type, run)

    def _apply_run(self, run_type: type, run: list) -> None:
        if run_type is JobSubmit:
            self.cell.submit(run)
        elif self.initial_state == "recorded" and self.core.now == 0:
            place_recorded(self.cell, run)
        else:
            why = ("task_placed (initial_state=scheduled)" if self.initial_state == "scheduled"
                   else "task_placed after t = 0 (the schedulers place tasks)")
            skipped = self.cell.counters.skipped
            skipped[why] = skipped.get(why, 0) + len(run)

    def _apply(self, event) -> None:
        cell = self.cell
        if isinstance(event, JobKill):
            cell.kill(event.job_id)
        elif isinstance(event, MachineAdd):
            cell.add_machines([event.machine])
        elif isinstance(event, (MachineFail, MachineRemove)):
            cell.fail_machine(event.machine_id)
        else:
            raise TypeError(f"unknown trace event {event!r}")

    def close(self) -> None:
        self._reader.close()

    def __enter__(self) -> TraceFeed:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
