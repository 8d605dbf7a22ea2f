"""Pure decisions of the machine agents: which machines are theirs, which tasks to start, when a
batch task ends, what a draining or failed machine still needs, when the next random failure is.

Nothing here reads a store or a clock; times are passed in (seconds, the clock of ``placed_at``).
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass
from enum import Enum
from typing import Callable, Iterable

from cellstate.model import Alloc, JobKind, MachineState, TaskState
from cellstate.plan import JobEntry, MachineEntry

JobLookup = Callable[[str], "JobEntry | None"]
_PLACED = TaskState.PLACED.value


@dataclass(frozen=True, slots=True)
class MachineSelector:
    """The machines one agents process simulates: every machine (``all``), the ids starting with
    a prefix, or an explicit comma-separated list (``m001,m002``)."""

    prefix: str | None = None
    ids: frozenset[str] = frozenset()

    @staticmethod
    def parse(text: str) -> MachineSelector:
        """``all``, ``PREFIX`` or ``ID,ID,…``; ValueError on an empty selection."""
        text = text.strip()
        if not text:
            raise ValueError('--machines: give "all", an id prefix or a comma-separated list of ids')
        if text == "all":
            return MachineSelector(prefix="")
        if "," in text:
            ids = frozenset(part.strip() for part in text.split(",") if part.strip())
            if not ids:
                raise ValueError(f"--machines: no machine ids in {text!r}")
            return MachineSelector(ids=ids)
        return MachineSelector(prefix=text)

    def matches(self, machine_id: str) -> bool:
        if self.prefix is not None:
            return machine_id.startswith(self.prefix)
        return machine_id in self.ids


# ------------------------------------------------------------------------------- tasks


def end_time(alloc: Alloc, job: JobEntry | None, time_scale: float, first_seen: float) -> float | None:
    """When a batch task ends: ``placed_at + duration_s / time_scale`` (``first_seen`` stands in
    for a missing placed_at). None for service tasks, tasks without a duration, unknown jobs."""
    if job is None or job.record.job.kind is not JobKind.BATCH or job.record.job.duration_s is None:
        return None
    start = alloc.placed_at if alloc.placed_at > 0 else first_seen
    return start + job.record.job.duration_s / time_scale


def startable(allocs: Iterable[Alloc], job_of: JobLookup) -> dict[str, list[Alloc]]:
    """Allocs to mark running, by job: not running yet, task still 'a', job not killed."""
    by_job: dict[str, list[Alloc]] = {}
    for alloc in allocs:
        if alloc.running:
            continue
        entry = job_of(alloc.job_id)
        if entry is None or entry.record.killed:
            continue
        tasks = entry.record.tasks
        if alloc.task_index < len(tasks) and tasks[alloc.task_index] == _PLACED:
            by_job.setdefault(alloc.job_id, []).append(alloc)
    return by_job


def service_allocs(allocs: Iterable[Alloc], job_of: JobLookup) -> list[Alloc]:
    """Allocs of service jobs (moved off a draining machine); allocs of unknown jobs count too,
    since nothing would ever end them."""
    out = []
    for alloc in allocs:
        entry = job_of(alloc.job_id)
        if entry is None or entry.record.job.kind is JobKind.SERVICE:
            out.append(alloc)
    return out


class MachineNeed(Enum):
    NOTHING = "nothing"
    EVICT_ALL = "evict-all"            # down but allocs left (a failure split over txns, or a race)
    MOVE_SERVICES = "move-services"    # draining with service tasks still on it


def machine_need(entry: MachineEntry, allocs: list[Alloc], job_of: JobLookup) -> MachineNeed:
    """What a machine's state asks of its allocs."""
    state = entry.machine.state
    if state is MachineState.DOWN and allocs:
        return MachineNeed.EVICT_ALL
    if state is MachineState.DRAINING and service_allocs(allocs, job_of):
        return MachineNeed.MOVE_SERVICES
    return MachineNeed.NOTHING


# ---------------------------------------------------------------------------- schedule


@dataclass(frozen=True, slots=True, order=True)
class DueEnd:
    """A batch task due to end at ``at``; ``machine_id`` and ``placed_at`` identify the placement
    (a task re-placed elsewhere is a different placement)."""

    at: float
    job_id: str
    task_index: int
    machine_id: str
    placed_at: float


class EndSchedule:
    """Batch task ends ordered by time; a task is scheduled at most once per placement."""

    def __init__(self):
        self._heap: list[DueEnd] = []
        self._placements: dict[tuple[str, int], DueEnd] = {}

    def __len__(self) -> int:
        return len(self._placements)

    def add(self, end: DueEnd) -> bool:
        """Schedule ``end`` unless this placement is already scheduled; True when added."""
        key = (end.job_id, end.task_index)
        current = self._placements.get(key)
        if current is not None and (current.machine_id, current.placed_at) == (end.machine_id, end.placed_at):
            return False
        self._placements[key] = end
        heapq.heappush(self._heap, end)
        return True

    def next_at(self) -> float:
        """Time of the earliest live end (inf when none)."""
        self._drop_stale()
        return self._heap[0].at if self._heap else math.inf

    def pop_due(self, now: float) -> list[DueEnd]:
        """Every live end at or before ``now``, earliest first (removed from the schedule)."""
        due = []
        while self._heap and self.next_at() <= now:
            end = heapq.heappop(self._heap)
            del self._placements[(end.job_id, end.task_index)]
            due.append(end)
        return due

    def forget(self, job_id: str, task_index: int) -> None:
        """Drop a task's scheduled end (its alloc is gone)."""
        self._placements.pop((job_id, task_index), None)

    def _drop_stale(self) -> None:
        heap = self._heap
        while heap and self._placements.get((heap[0].job_id, heap[0].task_index)) is not heap[0]:
            heapq.heappop(heap)


# ---------------------------------------------------------------------------- failures


def failure_delay(rng: random.Random, rate_per_hour: float, machines: int, time_scale: float) -> float:
    """Seconds until the next random failure among ``machines`` machines, each failing at
    ``rate_per_hour`` (of simulated time, which runs ``time_scale`` times faster): exponential;
    inf when the rate or the machine count is 0."""
    if rate_per_hour < 0 or time_scale <= 0:
        raise ValueError(f"need rate_per_hour >= 0 and time_scale > 0, got {rate_per_hour}, {time_scale}")
    total = rate_per_hour * machines * time_scale / 3600.0
    return rng.expovariate(total) if total > 0 else math.inf


def backoff(attempt: int, rng: random.Random, base: float = 0.01, cap: float = 0.5) -> float:
    """Full-jitter exponential backoff before retry ``attempt`` (0-based)."""
    return rng.uniform(0, min(cap, base * 2 ** attempt))
