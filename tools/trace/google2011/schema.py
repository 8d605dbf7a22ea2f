"""The Google 2011 task_events table (its columns and event types) and how its rows map to
omega's units: the normalized amounts' scales, the window's opening, the importer revision;
``GoogleTraceError`` for a malformed row."""

from __future__ import annotations

import math

from cellstate.resources import Resources

WINDOW_START_US = 600_000_000
CPU_SCALE = 64_000  # millicores per normalized 1.0 (the largest machine)
MEMORY_SCALE = 262_144  # MiB per normalized 1.0
DISK_SCALE = 1_048_576  # MiB per normalized 1.0; every machine gets 1.0 (the trace has no disk capacities)
PRODUCTION_PRIORITY = 9
IMPORTER_REVISION = 6
"""Bumped when the same rows import differently (2: a job with no run time known in the window
gets no modelled end; it was given the rest of the window; 3: the same events, and the ground
truth: ``tools.trace.truth``, format version 3; 4: a batch is the rows of a job pending together,
not the rows of one timestamp, and rows with different requests are never one batch; 6: the
header states the cell's submission latency, ``SUBMIT_LATENCY_S``). In each trace's header notes."""
SUBMIT_LATENCY_S = 0.62
"""Seconds from a job's submission to Borg's scheduler seeing it: calibrated on part 0 alone by
``bench/calibrate_submit_latency.py`` and validated on parts 1-4 (docs/EXPERIMENTS.md); the
header states it, and a replay applies it unless given ``--submit-latency``."""
KILL_COALESCE_US = 1_000_000
SUBMIT, SCHEDULE, EVICT, FAIL, FINISH, KILL, LOST = range(7)
ENDS = {EVICT, FAIL, FINISH, KILL, LOST}
# task_events columns
TS, MISSING, JOB, TASK, MACHINE, TYPE, USER, CLASS, PRIORITY, CPU, MEMORY, DISK, DIFFERENT = range(13)
UPDATE_PENDING, UPDATE_RUNNING = 7, 8


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
