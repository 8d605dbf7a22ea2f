"""One EASY pass over a queue (Lifka 1995; Mu'alem & Feitelson 2001), on a cell view at a time.

Jobs are taken first come, first served (submission time, then id). While they fit now they
start. The first that does not fit is the *head*: it gets a reservation at the *shadow time*,
the earliest time the running jobs free enough room for it, each running task ending at its
start plus its job's estimate (``estimate_s``, the run time asked for; ``duration_s`` when the
job gives none; never when it gives neither), or now when that is past. A later job starts now
only if it fits now and either ends (by its estimate) by the shadow time or leaves the head
room at the shadow time (it uses only the *extra* room the head will not need). No other job
is reserved for.

Room is counted per machine and resource (``Resources``: cpu, memory, disk, extra): a job of
``n`` pending tasks fits when its tasks fit the machines' free amounts, several to a machine,
machines taken in id order (first fit). Only up machines count. A job with placement rules
(constraints, package, different_machine, max_per_machine) is left out of the queue: the pass
does not evaluate them, and the scheduler says so in the job's reason.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Iterable

from cellstate.model import Job, MachineState
from cellstate.plan import JobEntry
from omega.protocols import CellView

NEVER = math.inf


def estimate_of(job: Job) -> float:
    """The run time EASY plans with: ``estimate_s``, else ``duration_s``, else never ending."""
    if job.estimate_s is not None:
        return job.estimate_s
    if job.duration_s is not None:
        return job.duration_s
    return NEVER


def has_rules(job: Job) -> bool:
    """True when the job has placement rules the pass does not evaluate."""
    return bool(job.constraints or job.package or job.different_machine or job.max_per_machine)


@dataclass
class EasyPlan:
    """The outcome of a pass: the jobs that start now (id → (task, machine id) of each pending
    task), the head and its shadow time (None, ``NEVER`` when the running jobs never free
    enough room), and why each other job waits (id → reason)."""

    now: float
    start: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    head: str | None = None
    shadow: float | None = None
    waits: dict[str, str] = field(default_factory=dict)


def queue_order(entries: Iterable[JobEntry]) -> list[JobEntry]:
    """First come, first served: submission time, then job id."""
    return sorted(entries, key=lambda e: (e.record.submitted_at, e.record.job.id))


def easy_pass(view: CellView, now: float, queue: list[JobEntry], stop_at: str | None = None) -> EasyPlan:
    """The EASY pass (module docstring) over ``queue`` (in ``queue_order``) on ``view`` at
    ``now``; with ``stop_at``, the pass ends once that job is settled."""
    machines, free, index = _up_machines(view)
    plan = EasyPlan(now)
    releases: list[tuple[float, int, tuple[int, ...]]] = []  # (expected end, machine index, amount)
    estimates: dict[str, float] = {}
    for i, machine_id in enumerate(machines):
        for alloc in view.allocs_on(machine_id):
            est = estimates.get(alloc.job_id)
            if est is None:
                entry = view.job(alloc.job_id)
                est = estimates[alloc.job_id] = NEVER if entry is None else estimate_of(entry.record.job)
            releases.append((max(alloc.placed_at + est, now), i, _vector(alloc.resources, index)))
    totals = [sum(column) for column in zip(*free)] if free else []
    at_shadow: list[list[int]] | None = None
    head_request: tuple[int, ...] = ()
    head_need = 0
    for entry in queue:
        job = entry.record.job
        if has_rules(job):
            plan.waits[job.id] = "easy: placement rules (constraints, package, different_machine, " \
                                 "max_per_machine) are not evaluated by this scheduler"
            if job.id == stop_at:
                break
            continue
        tasks = entry.record.pending_tasks()
        request = _vector(job.request, index)
        picks = _take(free, totals, request, len(tasks)) if request is not None else None
        if plan.head is None:
            if picks is not None:
                _claim(free, totals, picks, request)
                end = now + estimate_of(job)
                releases.extend((end, m, tuple(r * n for r in request)) for m, n in picks)
                plan.start[job.id] = _claims(tasks, picks, machines)
            else:
                plan.head, head_request, head_need = job.id, request, len(tasks)
                plan.shadow, at_shadow = _shadow(free, releases, request, len(tasks))
                plan.waits[job.id] = ("easy: head of the queue, waits for room" +
                                      (f" (reserved at {plan.shadow:.3f})" if plan.shadow != NEVER else
                                       " (the running jobs never free enough)"))
        elif picks is None:
            plan.waits[job.id] = f"easy: behind the head {plan.head}, no room now"
        else:
            ends = now + estimate_of(job)
            ok = ends <= plan.shadow
            if not ok and at_shadow is not None:
                trial = [row[:] for row in at_shadow]
                for m, n in picks:
                    trial[m] = [f - r * n for f, r in zip(trial[m], request)]
                if _slots(trial, head_request) >= head_need:
                    ok, at_shadow = True, trial
            if ok:
                _claim(free, totals, picks, request)
                plan.start[job.id] = _claims(tasks, picks, machines)
            else:
                plan.waits[job.id] = (f"easy: would delay the head {plan.head} (reserved at {plan.shadow:.3f}): "
                                      f"ends at {ends:.3f} and needs room the head needs then")
        if job.id == stop_at:
            break
    return plan


def _up_machines(view: CellView) -> tuple[list[str], list[list[int]], tuple[str, ...]]:
    """Up machines' ids (sorted), their free amounts as vectors, and the vectors' extra names."""
    entries = sorted((e.machine for e in view.machines() if e.machine.state is MachineState.UP),
                     key=lambda m: m.id)
    extra = tuple(sorted({name for m in entries for name, _ in m.capacity.extra}))
    free = [list(_vector(m.free, extra, allow_unknown=True)) for m in entries]
    return [m.id for m in entries], free, extra


def _vector(resources, extra: tuple[str, ...], allow_unknown: bool = False) -> tuple[int, ...] | None:
    """(cpu, memory, disk, *extra amounts); None when it asks for an extra resource no machine
    has (it fits nowhere)."""
    amounts = dict(resources.extra)
    if not allow_unknown and any(name not in extra and n > 0 for name, n in amounts.items()):
        return None
    return (resources.cpu, resources.memory, resources.disk, *(amounts.get(name, 0) for name in extra))


def _fits_count(free: list[int], request: tuple[int, ...]) -> int:
    """How many tasks of ``request`` fit in ``free`` (a large number when it asks for nothing)."""
    most = 1 << 62
    for f, r in zip(free, request):
        if r > 0:
            most = min(most, f // r) if f > 0 else 0
    return most


def _slots(free: list[list[int]], request: tuple[int, ...]) -> int:
    return sum(_fits_count(row, request) for row in free)


def _take(free: list[list[int]], totals: list[int], request: tuple[int, ...], n: int) -> list[tuple[int, int]] | None:
    """First fit of ``n`` tasks: [(machine index, tasks there)], or None when they do not fit."""
    if n == 0:
        return []
    if any(t < r * n for t, r in zip(totals, request)):
        return None  # not even the cell's sums hold them
    picks, left = [], n
    for m, row in enumerate(free):
        k = min(_fits_count(row, request), left)
        if k > 0:
            picks.append((m, k))
            left -= k
            if not left:
                return picks
    return None


def _claim(free: list[list[int]], totals: list[int], picks, request) -> None:
    for m, n in picks:
        row = free[m]
        for i, r in enumerate(request):
            row[i] -= r * n
            totals[i] -= r * n


def _claims(tasks: list[int], picks, machines: list[str]) -> list[tuple[int, str]]:
    out, t = [], iter(tasks)
    for m, n in picks:
        out.extend((next(t), machines[m]) for _ in range(n))
    return out


def _shadow(free: list[list[int]], releases, request: tuple[int, ...] | None, need: int
            ) -> tuple[float, list[list[int]] | None]:
    """The head's shadow time and the free amounts then (before the head takes its room), or
    (``NEVER``, None) when the releases never make room for it."""
    if request is None:
        return NEVER, None
    at = [row[:] for row in free]
    count = _slots(at, request)
    heap = list(releases)
    heapq.heapify(heap)
    while heap and heap[0][0] != NEVER:
        end = heap[0][0]
        while heap and heap[0][0] == end:  # everything released at that time
            _, m, amount = heapq.heappop(heap)
            before = _fits_count(at[m], request)
            at[m] = [f + a for f, a in zip(at[m], amount)]
            count += _fits_count(at[m], request) - before
        if count >= need:
            return end, at
    return NEVER, None
