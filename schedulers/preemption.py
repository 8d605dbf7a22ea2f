"""Choosing preemption victims: when a task fits nowhere, evict allocations of strictly
lower priority from one machine — as few as possible, then of the lowest priorities.

``cost`` orders victim sets: (count, priorities highest first). ``choose_victims`` is exact
(every subset, smallest first) for up to ``EXACT_LIMIT`` candidates on the machine and
greedy beyond (two greedy orders — lowest priority first and largest first — each pruned
of victims the task does not need; the cheaper wins).
"""

from __future__ import annotations

from itertools import combinations
from typing import Iterable, Sequence

from cellstate.model import Alloc
from cellstate.resources import Resources

EXACT_LIMIT = 10


def cost(victims: Sequence[Alloc]) -> tuple[int, tuple[int, ...]]:
    """Fewer victims first, then lower priorities (compared highest first)."""
    return len(victims), tuple(sorted((a.priority for a in victims), reverse=True))


def preemptible(allocs: Iterable[Alloc], priority: int, job_id: str,
                evicted: set[tuple[str, int]]) -> list[Alloc]:
    """Allocations a task of priority ``priority`` may evict: strictly lower priority, not of
    its own job, not already evicted in this decision; in a deterministic order."""
    out = [a for a in allocs if a.priority < priority and a.job_id != job_id
           and (a.job_id, a.task_index) not in evicted]
    out.sort(key=lambda a: (a.priority, a.job_id, a.task_index))
    return out


def choose_victims(request: Resources, free: Resources, candidates: Sequence[Alloc]) -> list[Alloc] | None:
    """The cheapest set of ``candidates`` whose eviction makes ``request`` fit in ``free``;
    [] when it fits already, None when even evicting all of them is not enough."""
    if request.fits_in(free):
        return []
    total = free
    for a in candidates:
        total = total + a.resources
    if not request.fits_in(total):
        return None
    if len(candidates) <= EXACT_LIMIT:
        return _exact(request, free, candidates)
    by_priority = sorted(candidates, key=lambda a: (a.priority, -_share(a.resources, request, free)))
    by_size = sorted(candidates, key=lambda a: (-_share(a.resources, request, free), a.priority))
    options = [_pruned(request, free, _greedy(request, free, order)) for order in (by_priority, by_size)]
    return min(options, key=cost)


def _exact(request: Resources, free: Resources, candidates: Sequence[Alloc]) -> list[Alloc]:
    for count in range(1, len(candidates) + 1):
        best = None
        for subset in combinations(candidates, count):
            if _fits_after(request, free, subset) and (best is None or cost(subset) < cost(best)):
                best = subset
        if best is not None:
            return list(best)
    raise AssertionError("evicting every candidate fits, so some subset does")


def _fits_after(request: Resources, free: Resources, victims: Iterable[Alloc]) -> bool:
    for a in victims:
        free = free + a.resources
    return request.fits_in(free)


def _share(resources: Resources, request: Resources, free: Resources) -> float:
    """How much of the task's shortfall an allocation covers (sum over short resources)."""
    out = 0.0
    for name in request.names():
        short = request.get(name) - free.get(name)
        if short > 0:
            out += min(resources.get(name), short) / short
    return out


def _greedy(request: Resources, free: Resources, order: Sequence[Alloc]) -> list[Alloc]:
    chosen = []
    for a in order:
        chosen.append(a)
        free = free + a.resources
        if request.fits_in(free):
            break
    return chosen


def _pruned(request: Resources, free: Resources, victims: list[Alloc]) -> list[Alloc]:
    """``victims`` without those the task does not need, trying the highest priority first."""
    kept = list(victims)
    for a in sorted(victims, key=lambda v: -v.priority):
        rest = [v for v in kept if v is not a]
        if _fits_after(request, free, rest):
            kept = rest
    return kept
