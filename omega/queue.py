"""The pending queue of one scheduler: deterministic fair order, work sharing
among schedulers of one kind, and per-job backoff for jobs that did not fit.

Order: priority descending; within a priority, owners take turns (each owner's
oldest job first, owners ordered by their oldest submission); ties by job id.
Sharing: each job belongs to one live peer by rendezvous hashing; a job pending
longer than ``steal_after_s`` may be taken by any peer (a dead peer's share is
not stranded while its lease runs out). Races stay safe: the commit compares
the job's revision, so a task is never placed twice.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict, deque
from dataclasses import dataclass, field

from omega.protocols import JobEntry


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


def rendezvous_owner(job_id: str, peers: list[str]) -> str:
    """The peer with the highest hash of (peer, job): stable as peers come and go."""
    def weight(peer: str) -> bytes:
        return hashlib.blake2b(f"{peer}\0{job_id}".encode(), digest_size=8).digest()

    return max(peers, key=weight)


@dataclass
class JobQueue:
    """Chooses the next jobs for scheduler ``me`` among ``peers`` of its kind."""

    me: str
    steal_after_s: float = 2.0
    backoff_min_s: float = 0.2
    backoff_max_s: float = 5.0
    _not_before: dict[str, float] = field(default_factory=dict)
    _backoff: dict[str, float] = field(default_factory=dict)

    def select(self, pending: list[JobEntry], peers: list[str], now: float, limit: int) -> list[JobEntry]:
        """Up to ``limit`` jobs this scheduler should try now, in fair order."""
        crew = sorted(set(peers) | {self.me})
        chosen = []
        for entry in fair_order(pending):
            if self._not_before.get(entry.id, 0.0) > now:
                continue
            mine = len(crew) == 1 or rendezvous_owner(entry.id, crew) == self.me
            if mine or now - entry.record.submitted_at >= self.steal_after_s:
                chosen.append(entry)
                if len(chosen) >= limit:
                    break
        return chosen

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
