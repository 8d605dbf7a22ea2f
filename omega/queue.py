"""The pending queue of one scheduler: deterministic fair order, work sharing
among schedulers of one kind, and per-job backoff for jobs that did not fit.

Order: priority descending; within a priority, owners take turns (each owner's
oldest job first, owners ordered by their oldest submission); ties by job id.
Sharing: each job belongs to one live peer by rendezvous hashing over the peers the
caller names (the live runtime: the schedulers of the job's class whose leased stats key
exists), so a peer takes another's job only when that peer is gone (its lease expired).
With ``steal_after_s`` set (None: never), a job pending that long may also be taken by
any peer: a scheduler takes its own share first and steals only to fill the rest of a
round, preferring the jobs it is next in line for (its rendezvous rank). Stealing makes
peers race over jobs (their commits fail on the job's revision, with no machine
contended); the fauxmaster's replays keep it at 2 s (their peers never die). Races stay safe: the commit compares the job's revision, so a task is never
placed twice.

The order is pluggable (``make_order``): "fair" (above, the default) or "drf" (``omega.drf``:
priority, then the owners' weighted dominant shares with progressive filling). Either way
jobs that are backing off are left out before ordering, so they take no turn.

Two ways in: ``select(pending, …)`` orders the jobs it is given, and
``track``/``untrack`` + ``select_tracked`` keep the set of candidates between rounds, fed
with the jobs that changed (the scheduling loop, ``omega.cycle``): the fair order is then kept
incrementally (``omega.fair_index.FairIndex``) and a round walks only the head of it.
Both choose the same jobs from the same candidates (tests/omega/test_queue_tracked.py).
A tracked job may belong to a group (``track(entry, group)``): ``set_group_asleep`` leaves a
whole group out of the candidates at once, and puts it back, without a call per job.
"""

from __future__ import annotations

import hashlib
import heapq
from collections import defaultdict, deque
from dataclasses import dataclass, field
from itertools import islice
from typing import Hashable, Iterable, Iterator, Mapping, Protocol

from omega.drf import DrfOrder, parse_weights
from omega.fair_index import FairIndex
from cellstate.plan import JobEntry
from omega.protocols import CellView


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

    def index(self) -> FairIndex | None:
        """An empty incremental holder of jobs in this order (``put``/``discard``/iteration in
        the order) that ``JobQueue.track`` keeps across rounds; None: the tracked jobs are
        arranged anew per round (``ArrangedJobs``)."""
        ...


class FairOrder:
    """``fair_order``: priority, owners round-robin, oldest first."""

    name = "fair"

    def arrange(self, jobs: list[JobEntry]) -> Iterable[JobEntry]:
        return fair_order(jobs)

    @staticmethod
    def index() -> FairIndex:
        """An empty incremental holder of jobs in this order (``JobQueue.track``)."""
        return FairIndex()


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


def _minus_priority(entry: JobEntry) -> int:
    return -entry.record.job.priority


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
    steal_after_s: float | None = 2.0
    backoff_min_s: float = 0.2
    backoff_max_s: float = 5.0
    order: QueueOrder = field(default_factory=FairOrder)
    _not_before: dict[str, float] = field(default_factory=dict)
    _backoff: dict[str, float] = field(default_factory=dict)
    _tracked: _Tracked | None = field(default=None, repr=False)
    _due: list[tuple[float, str]] = field(default_factory=list, repr=False)  # lazy heap of _not_before

    def tracked_jobs(self) -> int:
        """How many jobs the queue tracks (``select_tracked``: its class's pending jobs, ready or
        backing off); 0 before the first round. Safe to call from another thread."""
        tracked = self._tracked
        return 0 if tracked is None else len(tracked.jobs)

    def select(self, pending: list[JobEntry], peers: list[str], now: float, limit: int) -> list[JobEntry]:
        """Up to ``limit`` jobs this scheduler should try now: by priority (high first); within
        a priority its own share in the queue's order, then jobs pending for ``steal_after_s``
        (those it is next in line for first, then in the queue's order). Jobs backing off
        are left out before ordering."""
        not_before = self._not_before
        if not_before:
            pending = [entry for entry in pending if not_before.get(entry.id, 0.0) <= now]
        return self._choose(self.order.arrange(pending), peers, now, limit)

    def select_tracked(self, peers: list[str], now: float, limit: int) -> list[JobEntry]:
        """``select`` over the jobs held by ``track`` (same choice as ``select`` given those
        jobs), without ordering them all again: the order is kept across calls."""
        tracked = self._tracking()
        tracked.now = max(tracked.now, now)
        self._release_due(now)
        return self._choose(iter(tracked.ready), peers, now, limit)

    def _choose(self, ordered: Iterable[JobEntry], peers: list[str], now: float, limit: int) -> list[JobEntry]:
        """Own share first, then stealable jobs by rendezvous rank, from ``ordered``."""
        crew = sorted(set(peers) | {self.me})
        if len(crew) == 1:  # every job is its own: the first ``limit``, by priority (stable)
            return sorted(islice(ordered, max(limit, 0)), key=_minus_priority)
        candidates: list[tuple[int, int, int, JobEntry]] = []  # (-priority, rank, position, job)
        own, steal_after = 0, self.steal_after_s
        for position, entry in enumerate(ordered):
            rank = rendezvous_rank(entry.id, crew, self.me)
            if rank == 0:
                candidates.append((-entry.record.job.priority, 0, position, entry))
                own += 1
                if own >= limit:
                    break  # later jobs rank below these
            elif steal_after is not None and now - entry.record.submitted_at >= steal_after:
                candidates.append((-entry.record.job.priority, rank, position, entry))
        candidates.sort(key=lambda c: c[:3])
        return [c[3] for c in candidates[:limit]]

    # -- tracked jobs (``select_tracked``) --------------------------------------------------------

    def _tracking(self) -> _Tracked:
        if self._tracked is None:
            index = self.order.index()  # an incremental order's holder (FairOrder), if any
            self._tracked = _Tracked(index if index is not None else ArrangedJobs(self.order))
        return self._tracked

    def track(self, entry: JobEntry, group: Hashable = None) -> None:
        """Hold (or update) a pending job for ``select_tracked``, in ``group`` (None: none)."""
        tracked = self._tracking()
        job_id = entry.record.job.id
        held = tracked.jobs.get(job_id)
        tracked.jobs[job_id] = entry
        if group is None:
            tracked.groups.pop(job_id, None)
        else:
            tracked.groups[job_id] = group
        if self.steal_after_s is not None and (held is None or held.record.submitted_at != entry.record.submitted_at):
            steal_at = entry.record.submitted_at + self.steal_after_s
            if steal_at > tracked.now:  # else next_steal_at would only drop it: time moves on
                heapq.heappush(tracked.steal_at, (steal_at, job_id))
        due = self._not_before.get(job_id)
        if due is None:
            tracked.ready.put(entry, group)
        else:  # backing off: ready again when due (``_release_due``)
            tracked.ready.hide(job_id)
            heapq.heappush(tracked.due, (due, job_id))

    def set_group_asleep(self, group: Hashable, asleep: bool) -> None:
        """Leave every tracked job of ``group`` out of the candidates (also for stealing), or
        put them back (as if each were tracked again)."""
        tracked = self._tracking()
        if asleep == tracked.ready.asleep(group):
            return
        tracked.ready.set_asleep(group, asleep)
        if asleep:
            return
        parked = tracked.parked_steals.pop(group, None)
        if parked:
            for steal_at, job_id in parked:
                entry = tracked.jobs.get(job_id)
                if steal_at > tracked.now and entry is not None and tracked.groups.get(job_id) == group:
                    heapq.heappush(tracked.steal_at, (steal_at, job_id))

    def untrack(self, job_id: str, coming_back: bool = False) -> None:
        """Stop holding a job: no longer pending, or (``coming_back``) not a candidate for now
        (the order may then keep its place cheaply until it is tracked again)."""
        tracked = self._tracked or self._tracking()
        if tracked.jobs.pop(job_id, None) is not None:
            tracked.groups.pop(job_id, None)
        if coming_back:
            tracked.ready.hide(job_id)
        else:  # also a job hidden earlier: nothing of it stays in the order
            tracked.ready.discard(job_id)

    def tracked(self) -> Mapping[str, JobEntry]:
        """The jobs held by ``track`` (backing off or not), by id (a live view)."""
        return self._tracking().jobs

    def next_steal_at(self, now: float) -> float | None:
        """Earliest time after ``now`` when a tracked job becomes stealable (``steal_after_s``
        after its submission); None if none will."""
        tracked = self._tracking()
        tracked.now = max(tracked.now, now)
        if self.steal_after_s is None:
            return None
        heap, jobs, steal, groups = tracked.steal_at, tracked.jobs, self.steal_after_s, tracked.groups
        while heap:
            t, job_id = heap[0]
            entry = jobs.get(job_id)
            if t > now and entry is not None and entry.record.submitted_at + steal == t:
                group = groups.get(job_id)
                if group is None or not tracked.ready.asleep(group):
                    return t
                tracked.parked_steals.setdefault(group, []).append((t, job_id))  # back when it wakes
            heapq.heappop(heap)  # past (time only moves on), or no longer tracked (re-pushed if it comes back)
        return None

    def _release_due(self, now: float) -> None:
        tracked = self._tracked
        if tracked is None:  # (nothing tracked yet: nothing is due)
            return
        heap, not_before = tracked.due, self._not_before
        while heap and heap[0][0] <= now:
            due, job_id = heapq.heappop(heap)
            entry = tracked.jobs.get(job_id)
            if entry is not None and not_before.get(job_id) == due:
                tracked.ready.put(entry, tracked.groups.get(job_id))

    def defer(self, job_id: str, now: float) -> float:
        """Back off a job that could not be (fully) placed; returns the delay chosen."""
        delay = min(self.backoff_max_s, max(self.backoff_min_s, 2 * self._backoff.get(job_id, 0.0)))
        self._backoff[job_id] = delay
        self._not_before[job_id] = due = now + delay
        heapq.heappush(self._due, (due, job_id))
        tracked = self._tracked
        if tracked is not None and job_id in tracked.jobs:
            tracked.ready.hide(job_id)
            heapq.heappush(tracked.due, (due, job_id))
        return delay

    def reset(self, job_id: str | None = None) -> None:
        """Forget backoff for one job, or for all (the cell freed resources)."""
        tracked = self._tracked
        if job_id is None:
            if tracked is not None:
                for held in self._not_before:
                    entry = tracked.jobs.get(held)
                    if entry is not None:
                        tracked.ready.put(entry, tracked.groups.get(held))
                tracked.due.clear()
            self._due.clear()
            self._not_before.clear()
            self._backoff.clear()
        else:
            if self._not_before.pop(job_id, None) is not None and tracked is not None:
                entry = tracked.jobs.get(job_id)
                if entry is not None:
                    tracked.ready.put(entry, tracked.groups.get(job_id))
            self._backoff.pop(job_id, None)

    def has_deferred(self) -> bool:
        """True if some job was deferred since the last full ``reset`` (due or not)."""
        return bool(self._not_before)

    def next_ready_at(self) -> float | None:
        """Earliest time a deferred job becomes eligible again (it may be past: a deferred job
        stays deferred until ``reset``)."""
        heap, not_before = self._due, self._not_before
        while heap and not_before.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)  # reset or deferred again since
        return heap[0][0] if heap else None


class ArrangedJobs:
    """A job set ordered by a non-incremental ``QueueOrder``: ``arrange`` over all of them per
    iteration (the DRF order's shares move with every commit anyway); groups as ``FairIndex``."""

    def __init__(self, order: QueueOrder):
        self.order = order
        self._entries: dict[str, JobEntry] = {}
        self._groups: dict[str, Hashable] = {}
        self._asleep: set[Hashable] = set()

    def __len__(self) -> int:
        return sum(1 for job_id in self._entries if job_id in self)

    def __contains__(self, job_id: str) -> bool:
        return job_id in self._entries and self._groups.get(job_id) not in self._asleep

    def put(self, entry: JobEntry, group: Hashable = None) -> None:
        job_id = entry.record.job.id
        self._entries[job_id] = entry
        if group is None:
            self._groups.pop(job_id, None)
        else:
            self._groups[job_id] = group

    def discard(self, job_id: str) -> None:
        self._entries.pop(job_id, None)
        self._groups.pop(job_id, None)

    hide = discard

    def asleep(self, group: Hashable) -> bool:
        return group in self._asleep

    def set_asleep(self, group: Hashable, asleep: bool) -> None:
        if group is None:
            raise ValueError("only a named group can sleep (None is the jobs without one)")
        (self._asleep.add if asleep else self._asleep.discard)(group)

    def __iter__(self) -> Iterator[JobEntry]:
        return iter(self.order.arrange([e for job_id, e in self._entries.items() if job_id in self]))


@dataclass
class _Tracked:
    """``JobQueue``'s tracked jobs: all of them, the ready ones in order, due times of those
    backing off, steal times (both heaps lazy: stale items are skipped when popped)."""

    ready: FairIndex | ArrangedJobs
    jobs: dict[str, JobEntry] = field(default_factory=dict)
    due: list[tuple[float, str]] = field(default_factory=list)
    steal_at: list[tuple[float, str]] = field(default_factory=list)
    now: float = float("-inf")  # the latest time ``select_tracked`` was called with
    groups: dict[str, Hashable] = field(default_factory=dict)  # job id → its group (None: not held)
    parked_steals: dict[Hashable, list[tuple[float, str]]] = field(default_factory=dict)  # of asleep groups
