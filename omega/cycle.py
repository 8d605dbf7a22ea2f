"""``SchedulingCycle``: the one scheduling loop — select → decide → plan → commit → outcome.

The live scheduler process (``omega.runtime.SchedulerProcess``, a thread on the wall clock and
a store's watch) and the fauxmaster (``tools.fauxmaster.scheduler_process.SimScheduler``, a
simulated process on a virtual clock and the memory store) both drive this class; they differ
only in what the cycle asks of its ``CycleHost``: how the view is brought up to date, who the
live peers are, how a decision's time passes, and what to record.

A round:

  1. the host brings the view up to date; if machines freed resources, every job's backoff
     is forgotten;
  2. the candidates are refreshed from the jobs whose record changed since the last round
     (``take_changed_jobs``; every pending job the first time): a job is a candidate when it
     is pending, not killed, of a scheduler class this cycle serves (``Job.scheduler_class``),
     not held by a refusal and not set aside by the nothing-fits memo (when there is one);
  3. the live peers are asked for (and handed to the scheduler's ``share_machines`` when they
     changed); up to ``batch_jobs`` candidates are chosen in the queue's order, shared with the live
     peers by rendezvous (``JobQueue.select_tracked``);
  4. each is placed by the ``OptimisticPlacer`` (decide on the view, commit as one txn, resolve
     conflicts; with a ``refresh`` the resource-fit rebase pumps the view before each retry):
     a job left with pending tasks is deferred (exponential backoff), a placed one forgotten,
     a refused one (``PlanTooLarge``) left out until it changes, a rejected plan
     (``PlanRejected``) deferred; between jobs the view is brought up to date again, and a
     round ends early when machines freed resources while jobs were backing off.

``next_wake`` tells the host when to look again with nothing to do (a deferred job due, a job
becoming stealable).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Collection, Hashable, Iterable, Protocol

from omega.attempts import PlacementResult
from omega.occ import OptimisticPlacer
from cellstate.plan import JobEntry, PlanRejected, PlanTooLarge
from omega.protocols import CellView, Clock, Decision, FeedView, Refreshable
from omega.queue import JobQueue
from omega.refusals import RefusedJobs

log = logging.getLogger(__name__)

PendingLookup = Callable[[str], "JobEntry | None"]


class CycleView(FeedView, Refreshable, Protocol):
    """What the cycle reads of its view (``cellstate.replica.view.ReplicaView``): the cell, its
    change feed (``omega.protocols.ChangeFeed``), the commits' outcomes it takes in (the
    placer's) and the pending jobs by scheduler class."""

    def pending_of_classes(self, classes: Collection[str]) -> PendingLookup: ...


class CandidateChanges(Protocol):
    """What a ``CandidateFilter.refresh`` changed: request groups that fell asleep (True) or
    woke (False), and the jobs whose candidacy may have changed one by one."""

    groups: dict[Hashable, bool]
    touched: set[str]


class CandidateFilter(Protocol):
    """Sets jobs aside from the candidates: the nothing-fits memo
    (``schedulers.fit_memo.NothingFitsMemo``: until room may have appeared for them) or a
    scheduler's own holds (``schedulers.easy.scheduler.EasyHolds``). A scheduler offers it to
    its host (``omega.host.Attachment``)."""

    def refresh(self, changed: Iterable[str], pending: PendingLookup) -> CandidateChanges: ...

    def solo(self, job_id: str) -> bool: ...

    def group_of(self, job_id: str) -> Hashable: ...

    def note(self, job_id: str, result: PlacementResult) -> None: ...


class CycleHost(Protocol):
    """What differs between a live process and a replayed one."""

    def catch_up(self) -> None:
        """Bring the view up to date (apply what the store has committed)."""

    def peers(self) -> list[str]:
        """The live schedulers sharing this one's class (itself included or not)."""

    def decide(self, entry: JobEntry, tasks: list[int], view: CellView) -> Decision:
        """The scheduler's decision (a replay also lets the decision time pass here)."""

    def taken(self, entry: JobEntry) -> None:
        """A job is about to be placed."""

    def placed(self, entry: JobEntry, result: PlacementResult | None) -> None:
        """A placement ended (None: refused or rejected)."""

    def stopping(self) -> bool:
        """True when the loop should end after the current placement."""


@dataclass(slots=True)
class CycleTally:
    """Outcomes of the cycle's placements (the attempts themselves go to ``on_attempt``)."""

    jobs_taken: int = 0
    gave_up: int = 0
    refused: int = 0
    rejected: int = 0


class SchedulingCycle:
    """The loop of one scheduler (see the module docstring). ``classes``: the scheduler
    classes it serves; ``memo``: an optional ``CandidateFilter``; ``share_machines``: the
    scheduler's, if it has one, called with the live peers whenever they change (the batch
    scheduler then prefers machines apart from theirs); ``refused``: the refusals it keeps
    (a new ``RefusedJobs`` if not given). ``omega.host.assemble`` builds it for both hosts."""

    def __init__(self, name: str, classes: Collection[str], view: CycleView, placer: OptimisticPlacer,
                 queue: JobQueue, host: CycleHost, clock: Clock, *, batch_jobs: int = 16,
                 memo: CandidateFilter | None = None,
                 share_machines: Callable[[list[str]], None] | None = None,
                 refused: RefusedJobs | None = None):
        if type(batch_jobs) is not int or batch_jobs < 1:
            raise ValueError(f"batch_jobs must be an int >= 1, got {batch_jobs!r}")
        if not classes:
            raise ValueError(f"scheduler {name!r} serves no scheduler class")
        self.name = name
        self.classes = frozenset(classes)
        self.view = view
        self.placer = placer
        self.queue = queue
        self.host = host
        self.clock = clock
        self.batch_jobs = batch_jobs
        self.memo = memo
        self.share_machines = share_machines
        self._peers: list[str] | None = None
        self.refused = RefusedJobs() if refused is None else refused  # refused jobs stay out until they change
        self.tally = CycleTally()
        self._pending_entry = view.pending_of_classes(self.classes)
        """job id → its entry if it is pending, not killed and of a class served."""
        self._started = False
        view.track_changed_jobs()

    # -- a round ----------------------------------------------------------------------------

    def round(self) -> int:
        """One round (module docstring); how many jobs were taken."""
        host, view, queue = self.host, self.view, self.queue
        host.catch_up()
        if view.take_freed():
            queue.reset()
        self.refresh_candidates()
        peers = host.peers()
        if peers != self._peers:
            if self.share_machines is not None:
                self.share_machines(peers)
            self._peers = peers
        chosen = queue.select_tracked(peers, self.clock.now(), self.batch_jobs)
        pending = self._pending_entry
        for n, entry in enumerate(chosen):
            if host.stopping():
                return n
            if n:
                host.catch_up()
            current = pending(entry.id)
            if current is not None:
                self.place(current)
            if view.take_freed() and self._release_deferred():
                return n + 1
        return len(chosen)

    def next_wake(self, now: float) -> float | None:
        """The next time after ``now`` when a deferred job is due or a candidate becomes
        stealable (None: no such time; a due time already past is not one: the round just run
        released what was due)."""
        times = []
        ready = self.queue.next_ready_at()
        if ready is not None and ready > now:
            times.append(ready)
        steal = self.queue.next_steal_at(now)
        if steal is not None:
            times.append(steal)
        return min(times) if times else None

    def _release_deferred(self) -> bool:
        """The cell freed resources: deferred jobs may fit now. Forget their backoff; True
        when there were some (the round then ends and the order is walked again, with them)."""
        deferred = self.queue.has_deferred()
        self.queue.reset()
        return deferred

    def refresh_candidates(self) -> None:
        """Hand the queue the jobs whose candidacy may have changed since the last round: the
        jobs whose record changed (every pending one the first time), those the memo noted,
        released or remembered on their own, and the request groups it put to sleep or woke."""
        if self._started:
            changed = self.view.take_changed_jobs()
        else:
            self._started = True
            self.view.take_changed_jobs()
            pending = self._pending_entry
            changed = {entry.id for entry in self.view.pending_jobs() if pending(entry.id) is not None}
        memo, queue, refused = self.memo, self.queue, self.refused
        held = refused.holds if refused.jobs else None  # (no refusal: no call per job)
        pending = self._pending_entry
        if memo is None:
            for job_id in changed:
                entry = pending(job_id)
                if entry is None:
                    queue.untrack(job_id)
                    if held is not None:
                        refused.forget(job_id)
                elif held is not None and held(entry):
                    queue.untrack(job_id)
                else:
                    queue.track(entry)
            return
        changes = memo.refresh(changed, pending)
        for request, asleep in changes.groups.items():
            queue.set_group_asleep(request, asleep)
        ids = (changed | changes.touched) if changes.touched else changed
        for job_id in ids:  # a job changed and touched is looked at once
            entry = pending(job_id)
            if entry is None:
                queue.untrack(job_id)
                if held is not None:
                    refused.forget(job_id)
            elif memo.solo(job_id) or held is not None and held(entry):
                queue.untrack(job_id, coming_back=True)
            else:
                queue.track(entry, memo.group_of(job_id))

    # -- one job ----------------------------------------------------------------------------

    def place(self, entry: JobEntry) -> PlacementResult | None:
        """Place one job's pending tasks and file the outcome (module docstring). None: the
        job was refused (a plan that can never fit one txn; its reason is in the record) or
        its plan rejected."""
        job_id = entry.id
        self.tally.jobs_taken += 1
        self.host.taken(entry)
        try:
            result = self.placer.place(job_id, self.view, self.host.decide)
        except PlanTooLarge as exc:
            log.warning("job refused scheduler=%s job=%s reason=%r", self.name, job_id, str(exc))
            self.tally.refused += 1
            self.refused.refuse(self.view.job(job_id) or entry)  # out until the job changes
            self.queue.untrack(job_id)
            self.host.placed(entry, None)
            return None
        except PlanRejected as exc:
            log.error("plan rejected scheduler=%s job=%s reason=%r", self.name, job_id, str(exc))
            self.tally.rejected += 1
            self.queue.defer(job_id, self.clock.now())
            self.host.placed(entry, None)
            return None
        self.tally.gave_up += result.gave_up
        if self.memo is not None:
            self.memo.note(job_id, result)
        if result.pending and not result.job_gone:
            self.queue.defer(job_id, self.clock.now())
        else:
            self.queue.reset(job_id)
        self.host.placed(entry, result)
        return result
