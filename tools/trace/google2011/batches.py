"""Pass 2: the survey's batches as omega jobs, and the trace's events in time order (jobs
submitted, tasks ended, jobs killed, the tasks placed when the window opens)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from cellstate.model import Job, JobKind
from cellstate.resources import Resources
from tools.trace.events import JobKill, JobSubmit, TaskEnd, TaskEndStatus, TaskPlaced
from tools.trace.google2011.cell import PROD_CPU, PROD_MEMORY
from tools.trace.google2011.rows import parse_row
from tools.trace.google2011.schema import (
    CPU, DIFFERENT, DISK, FINISH, JOB, KILL, KILL_COALESCE_US, MACHINE, MEMORY, PRIORITY, PRODUCTION_PRIORITY,
    ENDS, SCHEDULE, SUBMIT, TASK, USER, scaled_request, trace_time,
)
from tools.trace.google2011.survey import Survey
from tools.trace.progress import progress

HELD_AT_OPEN = ("left out: tasks pending when the window opens that no row of the trace "
                "schedules, left out (held by what the task_events and job_events tables do not carry: "
                "constraints, quota…)")


@dataclass
class ImportStats:
    """The counts of an import: rows read, events written (by type), what was left out or inferred."""

    rows: int = 0
    events: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    skipped: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    warnings: list[str] = field(default_factory=list)
    """What the import cannot know, in words (printed as warnings)."""


class _Batches:
    """Pass 2 state: which batch (our job) and index each live Google task maps to."""

    def __init__(self, s: Survey, stats: ImportStats, prod_extra: bool = False):
        self.survey, self.stats = s, stats
        self.prod_extra = prod_extra  # overcommit: production requests carry prod_cpu / prod_memory
        self.attempts: dict[tuple[str, str], int] = defaultdict(int)
        self.task_of: dict[tuple[str, str], tuple[str, int]] = {}  # (job, task) → (batch id, index)
        self.live: dict[str, int] = {}  # batch id → tasks not yet ended
        self.batches: dict[str, list[str]] = defaultdict(list)  # Google job → its batch ids
        self.members: dict[str, list[tuple[str, str]]] = {}  # batch id → its (job, task) keys
        self.last_request: dict[str, Resources] = {}
        self.killed: set[str] = set()
        self.pending: dict[str, list[list[str]]] = defaultdict(list)  # open batch id → its SUBMIT rows so far
        self.running_at_open: dict[tuple[str, str], str] = {}  # (job, task) → machine of its t = 0 SCHEDULE
        self.held_rows: frozenset[int] = s.left_out_rows  # SUBMIT rows left out (``held_at_open``)

    def submit_row(self, number: int, row: list[str], t: float):
        """Buffer a SUBMIT row in its batch (the survey's grouping); the batch's job_submit at its
        last row. A row of ``held_rows`` (a task pending at the opening that the trace never
        schedules) is left out of its batch, and counted."""
        self.attempts[row[JOB], row[TASK]] += 1
        batch_id = self.survey.batch_of[number]
        if number in self.held_rows:
            self.stats.skipped[HELD_AT_OPEN] += 1
        else:
            self.pending[batch_id].append(row)
        if self.survey.batch_last[batch_id] == number:
            rows = self.pending.pop(batch_id, None)
            if rows:
                yield JobSubmit(t, self._batch(row[JOB], batch_id, sorted(rows, key=lambda r: int(r[TASK])), t))

    def _batch(self, job: str, batch_id: str, rows: list[list[str]], t: float) -> Job:
        self.batches[job].append(batch_id)
        request = self._request(job, rows)
        priority = max(int(r[PRIORITY]) for r in rows)
        runs = [self.survey.run_times.get((job, r[TASK], self.attempts[job, r[TASK]])) for r in rows]
        known = [x for x in runs if x is not None]
        service = priority >= PRODUCTION_PRIORITY
        if service and self.prod_extra:
            request = Resources(request.cpu, request.memory, request.disk,
                                ((PROD_CPU, request.cpu), (PROD_MEMORY, request.memory)))
        duration = max(known) if known else None  # none ended in the window: no modelled end (censored)
        for index, r in enumerate(rows):
            self.task_of[job, r[TASK]] = (batch_id, index)
        self.live[batch_id] = len(rows)
        self.members[batch_id] = [(job, r[TASK]) for r in rows]
        return Job(id=batch_id, kind=JobKind.SERVICE if service else JobKind.BATCH, tasks=len(rows),
                   request=request, priority=priority, owner=rows[0][USER], duration_s=duration,
                   different_machine=any(r[DIFFERENT] == "1" for r in rows))

    def _request(self, job: str, rows: list[list[str]]) -> Resources:
        """Per-resource maximum of the rows' requests; rows missing them (missing_info) use the
        job's last known request, or the minimum."""
        known = [r for r in rows if r[CPU] and r[MEMORY] and r[DISK]]
        if not known:
            self.stats.skipped["requests missing (used last known)"] += len(rows)
            return self.last_request.get(job, scaled_request(0.0, 0.0, 0.0))
        request = scaled_request(max(float(r[CPU]) for r in known), max(float(r[MEMORY]) for r in known),
                                 max(float(r[DISK]) for r in known))
        self.last_request[job] = request
        return request

    def end(self, t: float, job: str, task: str, kind: int):
        """task_end for a live task (none for a task the window never submitted)."""
        mapped = self.task_of.pop((job, task), None)
        self.running_at_open.pop((job, task), None)
        if mapped is None:
            held = self.held_rows and self.survey.held_at_open.get((job, task)) in self.held_rows
            self.stats.skipped["end of a task left out at the opening (never scheduled)" if held
                               else "end of a task not live in the window"] += 1
            return
        batch_id, index = mapped
        self.live[batch_id] -= 1
        yield TaskEnd(t, batch_id, index, TaskEndStatus.FINISHED if kind == FINISH else TaskEndStatus.FAILED)

    def schedule_row(self, row: list[str]) -> None:
        """A SCHEDULE row at t = 0: remember the machine (the last one wins)."""
        if row[MACHINE]:
            self.running_at_open[row[JOB], row[TASK]] = row[MACHINE]
        else:
            self.stats.skipped["t = 0 schedule without a machine"] += 1

    def initial_placements(self):
        """task_placed at t = 0 for every task that runs when the window opens and is still
        live (not ended or killed during t = 0), in (batch, index) order."""
        placed = []
        for key, machine in self.running_at_open.items():
            mapped = self.task_of.get(key)
            if mapped is None:
                self.stats.skipped["t = 0 schedule of a task not live at the end of t = 0"] += 1
                continue
            placed.append((mapped, f"m{machine}"))
        self.running_at_open = {}
        for (batch_id, index), machine_id in sorted(placed):
            yield TaskPlaced(0.0, batch_id, index, machine_id)

    def kill(self, t: float, job: str):
        """job_kill for every batch of ``job`` with live tasks; its tasks are no longer live."""
        self.killed.add(job)
        for batch_id in self.batches.get(job, ()):
            if self.live[batch_id] > 0:
                self.live[batch_id] = 0
                yield JobKill(t, batch_id)
            for key in self.members[batch_id]:
                if self.task_of.get(key, ("",))[0] == batch_id:
                    del self.task_of[key]


def job_and_task_events(s: Survey, stats: ImportStats, prod_extra: bool = False):
    """Pass 2 without the machines: the jobs' and tasks' events in time order."""
    state = _Batches(s, stats, prod_extra)
    kills = list(s.job_kills)
    kill_at = {job: ts for ts, job in kills}
    current, window, rows = 0, s.window_us, s.source
    opening = True  # still inside t = 0 (the recorded initial state)
    with progress("import", s.rows) as advance:
        for number, row in rows:
            ts, kind = parse_row(rows, number, row)
            if ts != current:
                if opening and ts > window:
                    opening = False
                    yield from state.initial_placements()
                while kills and kills[0][0] < ts:
                    k_ts, job = kills.pop(0)
                    if job not in state.killed:
                        yield from state.kill(trace_time(k_ts, window), job)
                current = ts
            t, job = trace_time(ts, window), row[JOB]
            if kind == SUBMIT:
                yield from state.submit_row(number, row, t)
            elif kind == KILL and 0 <= kill_at.get(job, -1) - ts <= KILL_COALESCE_US:
                if job not in state.killed:
                    yield from state.kill(t, job)
            elif kind in ENDS:
                yield from state.end(t, job, row[TASK], kind)
            elif kind == SCHEDULE and opening:
                state.schedule_row(row)
            stats.rows = number
            if number % 20_000 == 0:
                advance(20_000)
        if opening:
            yield from state.initial_placements()
        for k_ts, job in kills:
            if job not in state.killed:
                yield from state.kill(trace_time(k_ts, window), job)

