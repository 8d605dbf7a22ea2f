"""Reading the task_events part files: their rows in order, numbered across the parts, each
checked (``parse_row``); the rows a later part opens with (``opening_rows``) and part 0's t = 0
requests (``requests_at_open``)."""

from __future__ import annotations

import csv
import gzip
import os
import re
import zlib

from tools.trace.google2011.schema import (
    CPU, DISK, JOB, MACHINE, MEMORY, PRIORITY, SCHEDULE, SUBMIT, TASK, TS, TYPE, UPDATE_RUNNING, ENDS,
    GoogleTraceError,
)


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
        self.part_ends: list[tuple[str, int]] = []
        """(path, last timestamp_us) of each part the last full iteration read (``part_spans``)."""

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
        ends = self.part_ends = []
        for path in self.paths:
            self._starts.append((number + 1, path))
            first, last_row = True, None
            for _, row in read_rows(path):
                number += 1
                if self.limit is not None and number > self.limit:
                    if last_row and last_row[0].isdecimal():
                        ends.append((path, int(last_row[0])))
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
                ends.append((path, last_ts))


def part_number(path: str, index: int) -> int:
    """The part number a file name states (``part-00003-of-00500…`` → 3), else ``index``."""
    m = _PART.search(os.path.basename(path))
    return int(m.group(1)) if m else index


_PART = re.compile(r"part-(\d+)-of-")


def parse_row(rows: TaskRows, number: int, row: list[str]) -> tuple[int, int]:
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
        parse_row(rows, number, row)
        first.setdefault((row[JOB], row[TASK]), row)
    submits, schedules = [], []
    for _key, row in sorted(first.items(), key=lambda item: (item[0][0].zfill(20), item[0][1].zfill(20))):
        kind = int(row[TYPE])
        if kind == SUBMIT:
            continue
        submit = list(row)
        submit[TS], submit[TYPE], submit[MACHINE] = str(window_us), str(SUBMIT), ""
        submits.append(submit)
        if row[MACHINE] and (kind in ENDS or kind == UPDATE_RUNNING):
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
        ts, kind = parse_row(rows, number, row)
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

