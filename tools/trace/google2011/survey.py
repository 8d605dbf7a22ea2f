"""Pass 1, the survey: what an event needs before its own time (machine ids, run times, job
kills, the batches the SUBMIT rows form) and, from it, the ground truth of what the real cell did."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from cellstate.resources import Resources
from tools.trace.google2011.cell import CapacityModel
from tools.trace.google2011.rows import (
    TaskRows, opening_rows, parse_row, part_number, read_rows, requests_at_open,
)
from tools.trace.google2011.schema import (
    CPU, CPU_SCALE, DIFFERENT, DISK, FINISH, IMPORTER_REVISION, JOB, KILL, MACHINE, MEMORY, MEMORY_SCALE,
    PRIORITY, SCHEDULE, SUBMIT, TASK, WINDOW_START_US, ENDS, GoogleTraceError, trace_time,
)
from tools.trace.progress import progress
from tools.trace.truth import GroundTruth, Occupancy, Window, sample_steps


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
    part_ends: list[tuple[str, int]] = field(default_factory=list)  # (path, last timestamp_us) per part
    held_at_open: dict[tuple[str, str], int] = field(default_factory=dict)
    """Tasks pending when the window opens that no row of the import shows scheduled: (job, task)
    → their opening SUBMIT row (left out unless ``keep_unscheduled_at_open``)."""


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
            ts, kind = parse_row(rows, number, row)
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
            elif kind == SCHEDULE or row[MACHINE] or (kind in ENDS and ts <= window):
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
            elif kind in ENDS:
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
    s.part_ends = list(rows.part_ends)  # before pass 2 reads the rows again
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
    lower = window != WINDOW_START_US
    if lower:
        notes += ("; the trace opens after the source's start (a later part alone): tasks running throughout "
                  "that show no row in the parts read are not seen, so the occupancy is a lower bound")
    return GroundTruth("task", horizon, submitted, delays, occupancy, notes, part_windows(s), lower)


def part_windows(s: Survey) -> tuple[Window, ...]:
    """One window per part read: from the previous part's last row (0 for the first) to its own
    last row, in trace seconds; the last window ends at the horizon."""
    out, start = [], 0.0
    for i, (path, last_us) in enumerate(s.part_ends):
        end = max(start, trace_time(last_us, s.window_us))
        out.append(Window(part_number(path, i), start, end))
        start = end
    return tuple(out)

