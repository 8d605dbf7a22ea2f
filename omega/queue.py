"""The pending queue of one scheduler: deterministic fair order, work sharing
among schedulers of one kind, and per-job backoff for jobs that did not fit.

Order: priority descending; within a priority, owners take turns (each owner's
oldest job first, owners ordered by their oldest submission); ties by job id.
Sharing: each job belongs to one live peer by rendezvous hashing; a job pending
longer than ``steal_after_s`` may be taken by any peer (a dead peer's share is
not stranded while its lease runs out). A scheduler takes its own share first and
steals only to fill the rest of a round, preferring the jobs it is next in line for
(its rendezvous rank): with a backlog older than ``steal_after_s``, peers taking the
same oldest jobs would only make each other's commits fail on the job's revision.
Races stay safe: the commit compares the job's revision, so a task is never placed twice.

The order is pluggable (``make_order``): "fair" (above, the default) or "drf" (``omega.drf``:
priority, then the owners' weighted dominant shares with progressive filling). Either way
jobs that are backing off are left out before ordering, so they take no turn.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Protocol

from omega.drf import DrfOrder, parse_weights
from omega.protocols import CellView, JobEntry


def fair_order(jobs: list[JobEntry]) -> list[JobEntry]:
    """Jobs by priority (high first), owners round-robin, oldest first."""
    by_priority: dict[int, list[JobEntry]] = defaultdict(list)
    for entry in jobs:
        by_priority[entry.record.job.priority].append(entry)
    ordered: list[JobEntry] = []
    for priority in sorted(by_priority, reverse=True):
        ordered.extend(_round_robin(by_priority[priority]))
    return ordered


def _round_robin(jobs: list[JobEntry]) -> list[JobEntry]:
    queues: dict[str, list[JobEntry]] = defaultdict(list)
    for entry in sorted(jobs, key=lambda e: (e.record.submitted_at, e.id)):
        queues[entry.record.job.owner].append(entry)
    turn = deque(sorted(queues, key=lambda o: (queues[o][0].record.submitted_at, o)))
    cursors = {owner: 0 for owner in queues}
    out: list[JobEntry] = []
    while turn:
        owner = turn.popleft()
        out.append(queues[owner][cursors[owner]])
        cursors[owner] += 1
        if cursors[owner] < len(queues[owner]):
            turn.append(owner)
    return out


class QueueOrder(Protocol):
    """How a queue orders its pending jobs (all of them, whoever's share they are)."""

    name: str

    def arrange(self, jobs: list[JobEntry]) -> Iterable[JobEntry]: ...


class FairOrder:
    """``fair_order``: priority, owners round-robin, oldest first."""

    name = "fair"

    def arrange(self, jobs: list[JobEntry]) -> Iterable[JobEntry]:
        return fair_order(jobs)


ORDER_NAMES = ("fair", "drf")


def check_order(name: str, weights: Mapping[str, float] | None = None) -> dict[str, float]:
    """Validate a queue order's name and DRF weights (ValueError naming what is wrong);
    the weights, parsed."""
    if name not in ORDER_NAMES:
        raise ValueError(f"unknown queue order {name!r}; known: {', '.join(ORDER_NAMES)}")
    parsed = parse_weights(weights)
    if parsed and name != "drf":
        raise ValueError(f"DRF weights {sorted(parsed)} given, but the queue order is {name!r} (use 'drf')")
    return parsed


def make_order(name: str = "fair", view: CellView | None = None,
               weights: Mapping[str, float] | None = None) -> QueueOrder:
    """The queue order called ``name``; "drf" reads owners' usage from ``view``."""
    parsed = check_order(name, weights)
    if name == "fair":
        return FairOrder()
    if view is None:
        raise ValueError("the drf queue order needs the cell view (owners' usage)")
    return DrfOrder(view, parsed)


def _weight(peer: str, job_id: str) -> bytes:
    return hashlib.blake2b(f"{peer}\0{job_id}".encode(), digest_size=8).digest()


def rendezvous_owner(job_id: str, peers: list[str]) -> str:
    """The peer with the highest hash of (peer, job): stable as peers come and go."""
    return max(peers, key=lambda peer: _weight(peer, job_id))


def rendezvous_rank(job_id: str, peers: list[str], peer: str) -> int:
    """``peer``'s place in line for ``job_id`` (0: its owner, 1: next if the owner is gone…)."""
    mine = _weight(peer, job_id)
    return sum(1 for other in peers if other != peer and _weight(other, job_id) > mine)


@dataclass
class JobQueue:
    """Chooses the next jobs for scheduler ``me`` among ``peers`` of its kind, in ``order``."""

    me: str
    steal_after_s: float = 2.0
    backoff_min_s: float = 0.2
    backoff_max_s: float = 5.0
    order: QueueOrder = field(default_factory=FairOrder)
    _not_before: dict[str, float] = field(default_factory=dict)
    _backoff: dict[str, float] = field(default_factory=dict)

    def select(self, pending: list[JobEntry], peers: list[str], now: float, limit: int) -> list[JobEntry]:
        """Up to ``limit`` jobs this scheduler should try now: by priority (high first); within
        a priority its own share in the queue's order, then jobs pending for ``steal_after_s``
        (those it is next in line for first, then in the queue's order). Jobs backing off
        are left out before ordering."""
        crew = sorted(set(peers) | {self.me})
        not_before = self._not_before
        if not_before:
            pending = [entry for entry in pending if not_before.get(entry.id, 0.0) <= now]
        candidates: list[tuple[int, int, int, JobEntry]] = []  # (-priority, rank, position, job)
        own = 0
        for position, entry in enumerate(self.order.arrange(pending)):
            rank = 0 if len(crew) == 1 else rendezvous_rank(entry.id, crew, self.me)
            if rank == 0:
                candidates.append((-entry.record.job.priority, 0, position, entry))
                own += 1
                if own >= limit:
                    break  # later jobs rank below these
            elif now - entry.record.submitted_at >= self.steal_after_s:
                candidates.append((-entry.record.job.priority, rank, position, entry))
        candidates.sort(key=lambda c: c[:3])
        return [c[3] for c in candidates[:limit]]

    def defer(self, job_id: str, now: float) -> float:
        """Back off a job that could not be (fully) placed; returns the delay chosen."""
        delay = min(self.backoff_max_s, max(self.backoff_min_s, 2 * self._backoff.get(job_id, 0.0)))
        self._backoff[job_id] = delay
        self._not_before[job_id] = now + delay
        return delay

    def reset(self, job_id: str | None = None) -> None:
        """Forget backoff for one job, or for all (the cell freed resources)."""
        if job_id is None:
            self._not_before.clear()
            self._backoff.clear()
        else:
            self._not_before.pop(job_id, None)
            self._backoff.pop(job_id, None)

    def next_ready_at(self) -> float | None:
        """Earliest time a deferred job becomes eligible again."""
        return min(self._not_before.values(), default=None)
