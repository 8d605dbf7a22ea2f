"""Import Google clusterdata-2011 task_events + job_events part files into an omega trace.

Two streaming passes over the task events. The survey (pass 1) collects what an event
needs before its time: the machine ids, task run times
and the job kills. Pass 2 emits the events (rules in docs/TRACE_FORMAT.md):

- time: ``t = max(0, timestamp_us / 1e6 - 600)`` (the window opens at 600 s; 0 = initial state);
- every machine id seen → ``machine_add`` at t = 0, capacity from the capacity model;
- the SUBMIT rows of one Google job that the real scheduler had pending together form one
  ``job_submit`` ("batch", importer revision 4): consecutive SUBMIT rows of the job with no
  SCHEDULE of that job in between (the scheduler had acted on the job) and no other row of a
  task already in the batch (it ended or changed), with the same priority, requests and
  different-machine flag (revision 5: the batch's ``different_machine`` is its rows' own flag)
  (a row that differs starts a new batch: nothing is inflated) and no task twice; after t = 0 a
  batch is submitted at its last row's time (the real cell scheduled none of its tasks before
  it: a SCHEDULE would have closed the group); at t = 0 (the recorded state) SCHEDULE rows do
  not close a group, and t = 0 rows never join a later batch. Ids ``g{job}`` then ``g{job}.1``,
  ``g{job}.2``… in the order the batches open; its tasks are the batch's task indices in
  ascending order; kind = service when priority >= 9 (production band) else batch;
- FINISH → ``task_end finished``; EVICT, FAIL, KILL, LOST → ``task_end failed`` (a task the
  trace resubmits later is a new batch); a job KILL → ``job_kill`` of every batch of that job
  with live tasks, emitted at the first task KILL of the job within 1 s before it;
- a SCHEDULE row at t = 0 (the task runs when the window opens) → ``task_placed`` at t = 0 on
  ``m{machine}`` (revision 5: with the SCHEDULE row's request, which its SUBMIT row may not carry:
  ``requests_at_open``), emitted once t = 0 is over for the tasks still live then (a replay may start
  from this recorded state); later SCHEDULE and UPDATE_* rows carry no event (the replayed
  schedulers decide placement).

The cell (``tools.trace.google2011_cell``): machine capacities from the seeded capacity model or,
with ``machine_events``, the trace's own table (machines added and removed after t = 0 become
``machine_add`` / ``machine_remove``); the cell model ``plain`` (every task against capacity) or
``overcommit`` (Borg's reclamation: production against physical capacity, every task against a
schedulable capacity with a reclaimable share; production requests carry ``prod_cpu`` /
``prod_memory``). Both are stated in the header's ``capacity_model``.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import heapq
import math
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime

from cellstate.model import Job, JobKind, Machine
from cellstate.resources import Resources
from tools.trace.events import JobKill, JobSubmit, MachineAdd, MachineRemove, TaskEnd, TaskEndStatus, TaskPlaced
from tools.trace.format import TraceHeader, TraceWriter
from tools.trace.google2011_cell import (
    ADD, PROD_CPU, PROD_MEMORY, CellModel, MachineEvents, Overcommit, overcommit_cell, read_machine_events,
)
from tools.trace.progress import progress
from tools.trace.truth import GroundTruth, Occupancy, sample_steps

WINDOW_START_US = 600_000_000
CPU_SCALE = 64_000  # millicores per normalized 1.0 (the largest machine)
MEMORY_SCALE = 262_144  # MiB per normalized 1.0
DISK_SCALE = 1_048_576  # MiB per normalized 1.0; every machine gets 1.0 (the trace has no disk capacities)
PRODUCTION_PRIORITY = 9
IMPORTER_REVISION = 5
"""Bumped when the same rows import differently (2: a job with no run time known in the window
gets no modelled end; it was given the rest of the window; 3: the same events, and the ground
truth: ``tools.trace.truth``, format version 3; 4: a batch is the rows of a job pending together,
not the rows of one timestamp, and rows with different requests are never one batch). In each
trace's header notes."""
KILL_COALESCE_US = 1_000_000
SUBMIT, SCHEDULE, EVICT, FAIL, FINISH, KILL, LOST = range(7)
_ENDS = {EVICT, FAIL, FINISH, KILL, LOST}
# task_events columns
TS, MISSING, JOB, TASK, MACHINE, TYPE, USER, CLASS, PRIORITY, CPU, MEMORY, DISK, DIFFERENT = range(13)

# Published 2011 mix of normalized (cpu, memory) capacities and the percentage of machines (Reiss et al. 2012).
GOOGLE_2011_MIX = (
    ((0.5, 0.5), 53.47), ((0.5, 0.25), 30.74), ((0.5, 0.75), 7.95), ((1.0, 1.0), 6.32),
    ((0.25, 0.25), 0.99), ((0.5, 0.12), 0.43), ((0.5, 0.03), 0.04), ((0.5, 0.97), 0.03),
    ((1.0, 0.5), 0.02), ((0.5, 0.06), 0.01),
)
UNIFORM_CLASS = (0.5, 0.5)


class GoogleTraceError(ValueError):
    """A malformed row in a Google trace file (names the file and line)."""


def trace_time(ts_us: int, window_us: int = WINDOW_START_US) -> float:
    """Seconds since the window opened (at ``window_us``); 0 for the initial state and anything
    before the window."""
    return 0.0 if ts_us <= window_us else (ts_us - window_us) / 1e6


def scaled_request(cpu: float, memory: float, disk: float) -> Resources:
    """Integer request of normalized amounts, rounded up; cpu and memory at least 1 unit."""
    return Resources(max(1, math.ceil(cpu * CPU_SCALE)), max(1, math.ceil(memory * MEMORY_SCALE)),
                     math.ceil(disk * DISK_SCALE))


@dataclass(frozen=True)
class CapacityModel:
    """How machine capacities are chosen: ``mix`` draws each machine's (cpu, memory) class
    from GOOGLE_2011_MIX by a hash of (seed, machine id), so the draw does not depend on the
    order machines are seen; ``uniform`` gives every machine UNIFORM_CLASS."""

    name: str = "mix"
    seed: int = 0

    def __post_init__(self):
        if self.name not in ("mix", "uniform"):
            raise ValueError(f"unknown capacity model {self.name!r} (expected mix or uniform)")

    def normalized(self, machine_id: str) -> tuple[float, float]:
        if self.name == "uniform":
            return UNIFORM_CLASS
        digest = hashlib.blake2b(f"{self.seed}:{machine_id}".encode(), digest_size=8).digest()
        point = int.from_bytes(digest) / 2**64 * 100.0
        for cls, share in GOOGLE_2011_MIX:
            point -= share
            if point < 0:
                return cls
        return GOOGLE_2011_MIX[0][0]

    def capacity(self, machine_id: str) -> Resources:
        cpu, memory = self.normalized(machine_id)
        return Resources(round(cpu * CPU_SCALE), round(memory * MEMORY_SCALE), DISK_SCALE)

    def describe(self) -> str:
        classes = ("published 2011 mix " + ", ".join(f"{c}:{s}%" for c, s in GOOGLE_2011_MIX)
                   + f" drawn per machine id by blake2b(seed={self.seed}:id)"
                   if self.name == "mix" else f"uniform: every machine {UNIFORM_CLASS}")
        return (f"google2011-{self.name}: normalized (cpu, memory) {classes}; 1.0 cpu = {CPU_SCALE} "
                f"millicores, 1.0 memory = {MEMORY_SCALE} MiB, disk {DISK_SCALE} MiB per machine; task "
                "requests scaled alike, rounded up, cpu/memory at least 1")


@dataclass
class Survey:
    """What pass 1 learns: facts an event needs before its own time."""

    machine_ids: list[str] = field(default_factory=list)
    window_us: int = WINDOW_START_US
    """When the window opens: 600 s for a trace that starts at 0 (part 0: its t = 0 rows are the
    state the trace opens with), else the first row's timestamp (a later part)."""
    carried: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    """Tasks live before a later part opens, inferred from their first row in it (counts by kind)."""
    run_times: dict[tuple[str, str, int], float] = field(default_factory=dict)  # (job, task, attempt) → s
    job_kills: list[tuple[int, str]] = field(default_factory=list)  # (timestamp_us, job), sorted
    rows: int = 0
    last_us: int = 0
    dropped_job_rows: int = 0  # job_events rows without 8 columns
    # ground truth: each batch's submit timestamp (its last row's) and (task, attempt, own SUBMIT timestamp)
    batches: dict[str, tuple[int, list[tuple[int, int, int]]]] = field(default_factory=dict)
    batch_of: dict[int, str] = field(default_factory=dict)  # SUBMIT row number → its batch id
    batch_last: dict[str, int] = field(default_factory=dict)  # batch id → the row number of its last row
    grouping: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # what the grouping inferred
    first_scheduled: dict[tuple[str, str, int], int] = field(default_factory=dict)  # (job, task, attempt) → ts
    occupancy: list[tuple[float, int, int, int]] = field(default_factory=list)  # (t, d cpu, d memory, d tasks)
    source: TaskRows | None = None  # the rows pass 2 reads again (with the inferred opening rows)
    left_out_rows: frozenset[int] = frozenset()  # the SUBMIT rows of ``held_at_open`` pass 2 leaves out
    held_at_open: dict[tuple[str, str], int] = field(default_factory=dict)
    """Tasks pending when the window opens that no row of the import shows scheduled: (job, task)
    → their opening SUBMIT row (left out unless ``keep_unscheduled_at_open``)."""


@dataclass
class ImportStats:
    rows: int = 0
    events: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    skipped: dict[str, int] = field(default_factory=lambda: defaultdict(int))


def read_rows(path: str, limit: int | None = None):
    """(line number, row) of a gzip CSV part file, at most ``limit`` rows; GoogleTraceError naming the
    file for a cut or corrupt gzip stream or bytes that are not text (not a traceback)."""
    number = 0
    try:
        with gzip.open(path, "rt", newline="") as f:
            for number, row in enumerate(csv.reader(f), 1):
                if limit is not None and number > limit:
                    return
                yield number, row
    except (EOFError, gzip.BadGzipFile, zlib.error, UnicodeDecodeError) as exc:
        raise GoogleTraceError(f"{path}: cut or corrupt after {number:,} rows ({exc})") from None


class TaskRows:
    """The task_events rows of one or several consecutive part files, read in order, numbered
    from 1 across them, with the rows inferred for a later part's opening state first (numbered
    below 0). ``where(number)`` names a row's file and line for messages."""

    def __init__(self, paths, limit: int | None = None):
        self.paths = [paths] if isinstance(paths, (str, bytes)) or not hasattr(paths, "__iter__") else list(paths)
        if not self.paths:
            raise GoogleTraceError("no task_events part file given")
        self.paths = [str(p) for p in self.paths]
        self.limit = limit
        self.opening: list[list[str]] = []  # inferred rows, at the window's opening
        # SUBMIT row number → the request of its task's t = 0 SCHEDULE row (``requests_at_open``)
        self.requests_at_open: dict[int, tuple[str, str, str]] = {}
        self._starts: list[tuple[int, str]] = []  # (first number, path) of each part read so far

    def __str__(self) -> str:
        return ",".join(self.paths)

    def where(self, number: int) -> str:
        if number < 0:
            return f"{self}: inferred row {-number}"
        path, first = self.paths[0], 1
        for start, name in self._starts:
            if start <= number:
                path, first = name, start
        return f"{path}: line {number - first + 1}"

    def __iter__(self):
        for n, row in enumerate(self.opening, 1):
            yield -n, row
        number, last_ts = 0, None
        self._starts = []
        for path in self.paths:
            self._starts.append((number + 1, path))
            first, last_row = True, None
            for _, row in read_rows(path):
                number += 1
                if self.limit is not None and number > self.limit:
                    return
                if first and last_ts is not None and row and row[0].isdecimal() and int(row[0]) < last_ts:
                    raise GoogleTraceError(f"{self.where(number)}: timestamp {row[0]} is before the previous "
                                           f"part's last ({last_ts}); give the parts in time order")
                first, last_row = False, row
                request = self.requests_at_open.get(number)
                if request is not None:
                    row = list(row)
                    row[CPU], row[MEMORY], row[DISK] = request
                yield number, row
            if last_row and last_row[0].isdecimal():
                last_ts = int(last_row[0])


def _parse(rows: TaskRows, number: int, row: list[str]) -> tuple[int, int]:
    """(timestamp_us, event_type) of a task_events row after checking every column the import
    reads (task index, machine id, priority, requests); GoogleTraceError (naming the file and
    line) if malformed."""
    if len(row) != 13:
        raise GoogleTraceError(f"{rows.where(number)}: expected 13 columns, got {len(row)}")
    try:
        ts, kind = int(row[TS]), int(row[TYPE])
    except ValueError:
        raise GoogleTraceError(f"{rows.where(number)}: bad timestamp or event type {row[:6]!r}") from None
    for column, name, optional in ((TASK, "task index", False), (MACHINE, "machine id", True),
                                   (PRIORITY, "priority", False)):
        if not (row[column].isdecimal() or (optional and not row[column])):
            raise GoogleTraceError(f"{rows.where(number)}: bad {name} {row[column]!r}")
    for column, name in ((CPU, "cpu request"), (MEMORY, "memory request"), (DISK, "disk request")):
        if row[column] and not _amount(row[column]):
            raise GoogleTraceError(f"{rows.where(number)}: bad {name} {row[column]!r} "
                                   "(expected a normalized amount 0..1)")
    return ts, kind


def _amount(text: str) -> bool:
    """True when ``text`` is a number in 0..1 (amounts are normalized to the largest machine)."""
    try:
        return 0.0 <= float(text) <= 1.0
    except ValueError:
        return False


UPDATE_PENDING, UPDATE_RUNNING = 7, 8
HELD_AT_OPEN = ("left out: tasks pending when the window opens that no row of the trace "
                "schedules, left out (held by what the task_events and job_events tables do not carry: "
                "constraints, quota…)")


def opening_rows(rows: TaskRows, window_us: int, carried: dict[str, int]) -> list[list[str]]:
    """The state a later part opens with, as rows at ``window_us``: a task whose first row in
    the part is not a SUBMIT was submitted before it opened. It was running, on the machine its
    row names, when that row is an end (EVICT, FAIL, FINISH, KILL, LOST) or UPDATE_RUNNING with a
    machine: a SUBMIT and a SCHEDULE row are inferred for it; otherwise (a SCHEDULE, an
    UPDATE_PENDING, an end without a machine) it was pending: a SUBMIT row. The inferred rows copy
    the task's first row (user, priority, requests, constraints); SUBMITs first, then
    SCHEDULEs, each by job and task. A task running or pending at the opening that shows no row
    in the part cannot be seen (``carried`` counts what was inferred)."""
    first: dict[tuple[str, str], list[str]] = {}
    for number, row in rows:
        _parse(rows, number, row)
        first.setdefault((row[JOB], row[TASK]), row)
    submits, schedules = [], []
    for (job, task), row in sorted(first.items(), key=lambda item: (item[0][0].zfill(20), item[0][1].zfill(20))):
        kind = int(row[TYPE])
        if kind == SUBMIT:
            continue
        submit = list(row)
        submit[TS], submit[TYPE], submit[MACHINE] = str(window_us), str(SUBMIT), ""
        submits.append(submit)
        if row[MACHINE] and (kind in _ENDS or kind == UPDATE_RUNNING):
            schedule = list(row)
            schedule[TS], schedule[TYPE] = str(window_us), str(SCHEDULE)
            schedules.append(schedule)
            carried["running when the part opens (a later row names its machine)"] += 1
        else:
            carried["pending when the part opens (scheduled, updated or ended without a machine later)"] += 1
    return submits + schedules


def requests_at_open(rows: TaskRows, window_us: int, counts: dict[str, int]) -> dict[int, tuple[str, str, str]]:
    """Part 0's recorded state: a task running when the window opens has a SUBMIT and a SCHEDULE
    row at t = 0, and the two may carry different requests (the SCHEDULE row's is what the task
    holds on its machine, as the truth's occupancy counts it; after t = 0 the two always agree
    in part 0). The request of each such task's last SUBMIT row before its t = 0 SCHEDULE row is
    replaced by the SCHEDULE row's (by row number, for both passes; ``counts`` says how many)."""
    last_submit: dict[tuple[str, str], tuple[int, list[str]]] = {}
    replaced: dict[int, tuple[str, str, str]] = {}
    for number, row in rows:
        ts, kind = _parse(rows, number, row)
        if ts > window_us:
            break
        if kind == SUBMIT:
            last_submit[row[JOB], row[TASK]] = (number, row)
        elif kind == SCHEDULE and row[CPU] and row[MEMORY] and row[DISK]:
            submit = last_submit.get((row[JOB], row[TASK]))
            request = (row[CPU], row[MEMORY], row[DISK])
            if submit is not None and (submit[1][CPU], submit[1][MEMORY], submit[1][DISK]) != request:
                replaced[submit[0]] = request
    counts["t = 0 SUBMIT rows given their t = 0 SCHEDULE row's request (it differed)"] = len(replaced)
    return replaced


def survey(task_events, job_events, limit: int | None = None) -> Survey:
    """Pass 1 over the task events (and the job events for kills). ``task_events`` and
    ``job_events``: a part file or consecutive part files, in time order. A trace that does not
    start at 0 (a later part) opens at its first row, with the state inferred from the rows
    (``opening_rows``); part 0 opens at 600 s with the state its t = 0 rows record."""
    s = Survey()
    rows = TaskRows(task_events, limit)
    first = next(iter(rows), None)
    if first is not None and first[1] and first[1][0].isdecimal() and int(first[1][0]) > 0:
        s.window_us = int(first[1][0])
        rows.opening = opening_rows(rows, s.window_us, s.carried)
    else:
        rows.requests_at_open = requests_at_open(rows, s.window_us, s.grouping)
    s.source = rows
    window = s.window_us
    machines: set[str] = set()
    attempts: dict[tuple[str, str], int] = defaultdict(int)
    started: dict[tuple[str, str, int], int] = {}
    batch_count: dict[str, int] = defaultdict(int)
    # Google job → its open batch: (id, (at t = 0, priority, cpu, memory, disk), task ids)
    open_batch: dict[str, tuple[str, tuple, set[str]]] = {}
    grouping = s.grouping
    running: dict[tuple[str, str], tuple[int, int]] = {}  # (job, task) → its (cpu, memory) while scheduled
    requests: dict[str, tuple[int, int]] = {}  # Google job → its last known (cpu, memory)
    occupancy = s.occupancy
    held = s.held_at_open
    with progress("survey", None) as advance:
        for number, row in rows:
            ts, kind = _parse(rows, number, row)
            job, task = row[JOB], row[TASK]
            if row[MACHINE]:
                machines.add(row[MACHINE])
            if row[CPU] and row[MEMORY]:
                requests[job] = (max(1, math.ceil(float(row[CPU]) * CPU_SCALE)),
                                 max(1, math.ceil(float(row[MEMORY]) * MEMORY_SCALE)))
            if kind != SUBMIT and job in open_batch and (
                    ts > window if kind == SCHEDULE else task in open_batch[job][2]):
                # a SCHEDULE of the job after t = 0 (the scheduler acted on it), or any row of a task
                # in the open batch (it ended or changed): the batch is closed
                del open_batch[job]
            if kind == SUBMIT and ts <= window:
                held[job, task] = number  # pending at the opening, unless a row below says otherwise
            elif kind == SCHEDULE or row[MACHINE] or (kind in _ENDS and ts <= window):
                held.pop((job, task), None)  # scheduled, seen on a machine, or not live at the opening
            if kind == SUBMIT:
                attempts[job, task] += 1
                key = (ts <= window, row[PRIORITY], row[CPU], row[MEMORY], row[DISK], row[DIFFERENT] == "1")
                current = open_batch.get(job)
                if current is None or current[1] != key or task in current[2]:
                    if current is not None:  # the job's rows go on, but this one cannot join
                        grouping["batches split: priority, request or different-machine flag differs"
                                 if current[1][1:] != key[1:]
                                 else "batches split: t = 0 rows and later rows" if current[1] != key
                                 else "batches split: a task submitted twice"] += 1
                    n = batch_count[job]
                    batch_count[job] = n + 1
                    current = open_batch[job] = (f"g{job}" if n == 0 else f"g{job}.{n}", key, set())
                    s.batches[current[0]] = (ts, [])
                batch_id, _, tasks = current
                tasks.add(task)
                s.batches[batch_id][1].append((int(task), attempts[job, task], ts))
                s.batches[batch_id] = (ts, s.batches[batch_id][1])  # submitted at its last row
                s.batch_of[number] = batch_id
                s.batch_last[batch_id] = number
            elif kind == SCHEDULE:
                key = (job, task, attempts[job, task])
                started[key] = ts
                s.first_scheduled.setdefault(key, ts)
                request = requests.get(job, (1, 1))
                old = running.get((job, task))
                running[job, task] = request
                if old is None:
                    occupancy.append((trace_time(ts, window), request[0], request[1], 1))
                else:  # scheduled again without an end: the new request replaces the old
                    occupancy.append((trace_time(ts, window), request[0] - old[0], request[1] - old[1], 0))
            elif kind in _ENDS:
                old = running.pop((job, task), None)
                if old is not None:
                    occupancy.append((trace_time(ts, window), -old[0], -old[1], -1))
                if kind == FINISH and (job, task, attempts[job, task]) in started:
                    key = (job, task, attempts[job, task])
                    s.run_times[key] = trace_time(ts, window) - trace_time(started[key], window)
            s.rows, s.last_us = number, ts
            if number % 20_000 == 0:
                advance(20_000)
    s.machine_ids = sorted(machines, key=int)
    sizes = [len(members) for _, members in s.batches.values()]
    grouping["SUBMIT rows"] = sum(sizes)
    grouping["batches (replayed jobs)"] = len(sizes)
    grouping["SUBMIT rows in batches of 2+ rows"] = sum(n for n in sizes if n > 1)
    spans = sorted(ts - members[0][2] for ts, members in s.batches.values() if ts > window)
    if spans:  # how far a batch's submission lags its first row (after t = 0)
        grouping["batch span p99 ms (first to last row, t > 0)"] = spans[int(0.99 * (len(spans) - 1))] // 1000
        grouping["batch span max ms"] = spans[-1] // 1000
    for path in ([job_events] if isinstance(job_events, str) else job_events):
        _job_kills(s, str(path))
    s.job_kills.sort()
    return s


def _job_kills(s: Survey, job_events: str) -> None:
    """The job KILL rows of one job_events part file (up to the task events' last row)."""
    for number, row in read_rows(job_events):
        if len(row) != 8:  # job_events has 8 columns: a row of another shape is dropped, and counted
            s.dropped_job_rows += 1
            continue
        if row[3] == str(KILL):
            if not row[0].isdecimal():
                raise GoogleTraceError(f"{job_events}: line {number}: bad timestamp {row[0]!r}")
            if int(row[0]) <= s.last_us:
                s.job_kills.append((int(row[0]), row[2]))


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


def google2011_events(s: Survey, capacity: CapacityModel, stats: ImportStats):
    """Pass 2: the trace's events in time order (the plain cell of the capacity model)."""
    for machine_id in s.machine_ids:
        yield MachineAdd(0.0, Machine(id=f"m{machine_id}", capacity=capacity.capacity(machine_id)))
    yield from _task_events(s, stats)


def _task_events(s: Survey, stats: ImportStats, prod_extra: bool = False):
    """Pass 2 without the machines: the jobs' and tasks' events in time order."""
    state = _Batches(s, stats, prod_extra)
    kills = list(s.job_kills)
    kill_at = {job: ts for ts, job in kills}
    current, window, rows = 0, s.window_us, s.source
    opening = True  # still inside t = 0 (the recorded initial state)
    with progress("import", s.rows) as advance:
        for number, row in rows:
            ts, kind = _parse(rows, number, row)
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
            elif kind in _ENDS:
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


def ground_truth(s: Survey, capacity: CapacityModel | list[Resources]) -> GroundTruth:
    """What the real cell did, from the survey: for each batch submitted after the window opened
    (t > 0), each task's own SUBMIT → first SCHEDULE delay of that attempt (None: not scheduled by
    the last row), and the cell's occupancy (the requests of the tasks between their SCHEDULE and
    their end) sampled every max(60 s, span / 1000) against the machines' capacity."""
    window = s.window_us
    horizon = trace_time(s.last_us, window)
    submitted, delays = {}, {}
    first = s.first_scheduled
    for batch_id, (ts, members) in s.batches.items():
        if ts <= window:
            continue
        t = trace_time(ts, window)
        job = batch_id[1:].split(".")[0]
        row = []
        for task, attempt, own in sorted(members, key=lambda m: m[0]):  # pass 2's task order
            at = first.get((job, str(task), attempt))  # from the task's own SUBMIT, as before revision 4
            row.append(None if at is None else max(0.0, trace_time(at, window) - trace_time(own, window)))
        submitted[batch_id], delays[batch_id] = t, row
    caps = capacity if isinstance(capacity, list) else [capacity.capacity(m) for m in s.machine_ids]
    times, (cpu, memory, tasks) = sample_steps(0.0, horizon, s.occupancy)
    occupancy = Occupancy(times, cpu, memory, tasks, sum(c.cpu for c in caps), sum(c.memory for c in caps))
    notes = (f"google2011 ground truth (importer revision {IMPORTER_REVISION}): per task of each batch submitted "
             "at t > 0 (at its last SUBMIT row), the task's own SUBMIT -> first SCHEDULE of that attempt in seconds (nil: not scheduled by the last row); "
             "occupancy: requests (the row's own, scaled as the tasks') of tasks between SCHEDULE and "
             "EVICT/FAIL/FINISH/KILL/LOST, sampled every max(60 s, span / 1000), against the sum of the "
             "machines' capacities at t = 0 under the capacity model (overcommit: the schedulable capacity)")
    return GroundTruth("task", horizon, submitted, delays, occupancy, notes)


def import_google2011(task_events, job_events, out, capacity: CapacityModel | None = None,
                      limit: int | None = None, cell: str = "google-2011", cell_model: CellModel | None = None,
                      machine_events: str | None = None, keep_unscheduled_at_open: bool = False) -> ImportStats:
    """Write the omega trace of task_events/job_events parts to ``out``; the counts. On an
    error nothing is written at ``out``. ``task_events``/``job_events``: a part file, or
    consecutive part files in time order (one trace); a trace that does not start at 0 opens at
    its first row with the state inferred from its rows (``opening_rows``). ``cell_model``: overcommit (default) or plain;
    ``machine_events``: the trace's machine_events part file (real capacities, machines added
    and removed), else the capacity model's seeded draw (``tools.trace.google2011_cell``)."""
    capacity = capacity or CapacityModel()
    cell_model = cell_model or CellModel()
    s = survey(task_events, job_events, limit)
    if not keep_unscheduled_at_open:
        s.left_out_rows = frozenset(s.held_at_open.values())
    stats = ImportStats()
    if s.dropped_job_rows:
        stats.skipped["job_events rows dropped (not 8 columns)"] = s.dropped_job_rows
    for what, n in s.grouping.items():  # printed with the import summary
        stats.skipped[f"inferred grouping: {what}"] = n
    for what, n in s.carried.items():
        stats.skipped[f"inferred opening state: tasks {what}"] = n
    if s.window_us != WINDOW_START_US and machine_events is None:
        stats.skipped["inferred cell: machines named by the parts' task rows (--machine-events gives them all)"] = \
            len(s.machine_ids)
    if cell_model.name == "plain" and machine_events is None:  # the cell of importer revision 3, unchanged
        machines = [Machine(id=f"m{m}", capacity=capacity.capacity(m)) for m in s.machine_ids]
        text, events = capacity.describe(), _task_events(s, stats)
    else:
        machines, text, events = _cell(s, capacity, cell_model, machine_events, stats)
    header = TraceHeader(
        source=f"google clusterdata-2011-2 task_events={s.source} job_events={_names(job_events)}"
               + (f" machine_events={machine_events}" if machine_events else "")
               + (f" limit={limit} rows" if limit is not None else ""),
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        capacity_model=text, cell=cell,
        notes=f"importer revision {IMPORTER_REVISION}; t = max(0, (timestamp_us - {s.window_us})/1e6) (the window "
              f"opens at {s.window_us} us" + ("" if not s.carried else "; the opening state inferred from the part's "
                                              "rows: " + ", ".join(f"{n} tasks {what}" for what, n in s.carried.items()))
              + ("" if keep_unscheduled_at_open else
                 f"; {len(s.left_out_rows)} tasks pending at the opening that no row schedules left out (held by "
                 "what the imported tables do not carry; --keep-unscheduled-at-open keeps them)")
              + "); a batch = the "
              "consecutive SUBMIT rows of a job with no SCHEDULE of the job (after t = 0) nor other row of a "
              "task of the batch between them, equal priority, requests and different-machine flag, no task twice; submitted at its last row; "
              "inferred: " + ", ".join(f"{what} {n}" for what, n in s.grouping.items())
              + "; see docs/TRACE_FORMAT.md")
    truth = ground_truth(s, [m.capacity for m in machines])
    with TraceWriter(out, header, atomic=True, truth=truth) as writer:
        for machine in machines:
            writer.write(MachineAdd(0.0, machine))
        stats.events["MachineAdd"] += len(machines)
        for event in events:
            writer.write(event)
            stats.events[type(event).__name__] += 1
    return stats


def _names(paths) -> str:
    return str(paths) if isinstance(paths, str) else ",".join(map(str, paths))


def _physical(s: Survey, capacity: CapacityModel, machine_events: str | None,
              stats: ImportStats) -> tuple[list[str], dict[str, Resources], MachineEvents | None, str]:
    """The machine ids up at t = 0, their physical capacities, the machine_events table and the
    capacities in words."""
    if machine_events is None:
        return (list(s.machine_ids), {m: capacity.capacity(m) for m in s.machine_ids}, None,
                "physical capacities: " + capacity.describe())
    table = read_machine_events(machine_events, s.window_us, s.last_us)
    ids = sorted(set(s.machine_ids) | set(table.at_open), key=int)
    physical = {}
    for m in ids:
        physical[m] = _capacity_of(m, table.at_open.get(m, (None, None)), capacity, stats,
                                   "machine not up in machine_events at t = 0" if m not in table.at_open else "")
    if table.updates_ignored:
        stats.skipped["machine_events UPDATE rows after t = 0 (not applied: no capacity-change event)"] = \
            table.updates_ignored
    return ids, physical, table, (
        f"physical capacities: machine_events={machine_events} (normalized CPUs and memory scaled as the "
        f"tasks'; each machine's last ADD/UPDATE at or before the window opens; ADD/REMOVE after it -> "
        f"machine_add/machine_remove; blank amounts and machines it lacks: " + capacity.describe() + ")")


def _capacity_of(machine_id: str, amounts: tuple[float | None, float | None], capacity: CapacityModel,
                 stats: ImportStats, missing: str = "") -> Resources:
    """Physical capacity of a machine from machine_events amounts (blanks: the capacity model's draw)."""
    cpu, memory = amounts
    if cpu is None or memory is None:
        stats.skipped[missing or "machine_events capacity blank (drawn from the capacity model)"] += 1
        drawn = capacity.normalized(machine_id)
        cpu = drawn[0] if cpu is None else cpu
        memory = drawn[1] if memory is None else memory
    return Resources(round(cpu * CPU_SCALE), round(memory * MEMORY_SCALE), DISK_SCALE)


def _cell(s: Survey, capacity: CapacityModel, cell_model: CellModel, machine_events: str | None,
          stats: ImportStats):
    """(the machines at t = 0, the capacity model in words, the other events in time order) of
    the cell model and capacities (``tools.trace.google2011_cell``). The overcommit model reads
    pass 2's t = 0 events first (its capacities hold the recorded t = 0 state), then hands them on."""
    ids, physical, table, text = _physical(s, capacity, machine_events, stats)
    overcommit = cell_model.name == "overcommit"
    events = _task_events(s, stats, prod_extra=overcommit)
    oc: Overcommit | None = None
    if overcommit:
        prefix, jobs, placed = [], {}, []
        for event in events:
            prefix.append(event)
            if event.t > 0:
                break
            if isinstance(event, JobSubmit):
                jobs[event.job.id] = event.job
            elif isinstance(event, TaskPlaced) and event.job_id in jobs:
                job = jobs[event.job_id]
                placed.append((event.machine_id[1:], job.request, job.priority >= PRODUCTION_PRIORITY))
        oc = overcommit_cell(physical, placed, cell_model.reclaim, CPU_SCALE, MEMORY_SCALE)
        events = _chain(prefix, events)
        text = oc.describe(CPU_SCALE, MEMORY_SCALE) + "; " + text
        machines = [Machine(id=f"m{m}", capacity=oc.capacity(m)) for m in ids]
    else:
        text = "cell model plain (every task against capacity); " + text
        machines = [Machine(id=f"m{m}", capacity=physical[m]) for m in ids]
    if table is not None and table.later:
        events = heapq.merge(events, _machine_changes(table, capacity, oc, stats, s.window_us), key=_T)
    return machines, text, events


def _T(event) -> float:
    return event.t


def _chain(prefix: list, rest):
    yield from prefix
    yield from rest


def _machine_changes(table: MachineEvents, capacity: CapacityModel, oc: Overcommit | None, stats: ImportStats,
                     window_us: int):
    """machine_add / machine_remove of the machine_events rows after t = 0, in time order."""
    for ts, machine_id, kind, cpu, memory in table.later:
        t = trace_time(ts, window_us)
        if kind == ADD:
            phys = _capacity_of(machine_id, (cpu, memory), capacity, stats)
            cap = phys if oc is None else oc.later(phys.cpu, phys.memory, phys.disk)
            yield MachineAdd(t, Machine(id=f"m{machine_id}", capacity=cap))
        else:
            yield MachineRemove(t, f"m{machine_id}")
