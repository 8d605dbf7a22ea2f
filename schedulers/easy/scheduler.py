"""The scheduler kind ``easy``: EASY backfilling (``schedulers.easy.plan``) as a scheduler, and
the holds that keep the jobs it does not start out of a replayed scheduler's candidates.

``EasyScheduler.decide(job)`` runs the EASY pass on the view at the clock's now, over the jobs
it serves (in a replay, those its scheduling cycle serves, handed over by ``EasyHolds``;
otherwise the pending jobs of the decided job's scheduler class), up to the job: it claims the
machines the pass gives the job, or leaves every pending task unplaced with the pass's reason
(a gang: all or nothing, as always). It never preempts. Its clock is the host's (``attach``,
``use_clock``: the replay's virtual clock, the live runtime's wall clock), else the wall clock;
the jobs its cycle refused (``use_refusals``) are out of the queue.

``EasyHolds`` is its cycle's candidate filter (``omega.cycle.CandidateFilter``, offered to the
host by ``EasyScheduler.attach``, live and in a replay): a job the pass does not start now is held (left
out of the queue's candidates) and the pass is run again whenever the cell changes for it (a
job's record changed: a submission, a placement, a task end, a kill; or a machine freed room):
the jobs it starts then are woken. So held jobs are neither decided again and again while
nothing changes (no backoff spin) nor lost: each change wakes exactly the jobs EASY starts.
What the holds do not follow is time alone: a running job past its estimate is expected to end
"now", which a pass at a later change sees.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Hashable, Iterable

from omega.attempts import PlacementResult
from omega.host import Attachment, SchedulerHost
from cellstate.plan import JobEntry
from omega.protocols import CellView, Decision
from omega.refusals import RefusedJobs
from schedulers.base import checked_tasks, gang_outcome, new_claim, new_decision
from schedulers.easy.plan import EasyPlan, easy_pass, queue_order

PendingLookup = Callable[[str], "JobEntry | None"]


class _WallClock:
    def now(self) -> float:
        return time.time()


class EasyScheduler:
    """FCFS with EASY backfilling (module docstring)."""

    kind = "easy"

    def __init__(self, name: str) -> None:
        self.name = name
        self.clock = _WallClock()
        self.served: PendingLookup | None = None
        """job id → its entry when it is pending and served (set by ``EasyHolds``); None: the
        jobs of the decided job's scheduler class."""
        self.refused: RefusedJobs | None = None

    def attach(self, host: SchedulerHost) -> Attachment:
        """Plan on the host's clock, leave its refusals out; its holds filter the candidates."""
        self.use_clock(host.clock)
        self.use_refusals(host.refused)
        return Attachment(candidate_filter=self.candidate_filter(host.view, host.explains_waits))

    def use_clock(self, clock) -> None:
        """Plan at ``clock.now()`` (the host's clock: virtual in a replay)."""
        self.clock = clock

    def use_refusals(self, refused: RefusedJobs) -> None:
        """Leave the jobs its cycle refused (``PlanTooLarge``: they cannot be placed as they stand)
        out of the queue: a refused head would hold every job behind it."""
        self.refused = refused

    def candidate_filter(self, view, explain_waits: bool = False) -> EasyHolds:
        """The holds its cycle uses (module docstring)."""
        return EasyHolds(self, view, explain_waits)

    def queue(self, view: CellView, job_class: str | None = None) -> list[JobEntry]:
        """The served pending jobs in first come, first served order."""
        served = self.served
        if served is not None:
            entries = [e for e in view.pending_jobs() if served(e.record.job.id) is not None]
        else:
            entries = [e for e in view.pending_jobs() if e.record.job.scheduler_class == job_class]
        refused = self.refused
        if refused is not None and refused.jobs:
            entries = [e for e in entries if not refused.holds(e)]
        return queue_order(entries)

    def plan(self, view: CellView, job_class: str | None = None, stop_at: str | None = None) -> EasyPlan:
        """The EASY pass over the served queue, now."""
        return easy_pass(view, self.clock.now(), self.queue(view, job_class), stop_at)

    def decide(self, job: JobEntry, tasks: list[int], view: CellView) -> Decision:
        tasks = checked_tasks(job, tasks)
        job_id = job.record.job.id
        plan = self.plan(view, job.record.job.scheduler_class, stop_at=job_id)
        start = plan.start.get(job_id)
        if start is None:
            why = plan.waits.get(job_id, "easy: not in the queue")
            return new_decision([], dict.fromkeys(tasks, why))
        where = dict(start)
        request = job.record.job.request
        claims = [new_claim(t, where[t], request, ()) for t in tasks if t in where]
        unplaced = {t: "easy: not a pending task of the pass" for t in tasks if t not in where}
        return gang_outcome(job, tasks, new_decision(claims, unplaced))


@dataclass
class HoldChanges:
    """What a ``refresh`` changed (as ``fit_memo.MemoChanges``): no groups; the jobs whose hold
    changed."""

    groups: dict = field(default_factory=dict)
    touched: set[str] = field(default_factory=set)


class EasyHolds:
    """The replayed scheduler's candidate filter for ``EasyScheduler`` (module docstring)."""

    def __init__(self, scheduler: EasyScheduler, view, explain_waits: bool = False) -> None:
        """``explain_waits``: hold a job only once a decision of it was noted, so its record says
        why it waits (the live host's choice, ``SchedulerHost.explains_waits``)."""
        self.scheduler = scheduler
        self.view = view
        view.track_freed_machines()
        self.held: set[str] = set()
        self.decided: set[str] | None = set() if explain_waits else None
        """The served jobs a decision left waiting (None: not explaining waits)."""
        self._noted: set[str] = set()
        self._first = True

    def refresh(self, changed: Iterable[str], pending: PendingLookup) -> HoldChanges:
        """Run the pass again when something changed (a record, a freed machine, a decision
        noted); hold the served pending jobs it does not start, wake those it does."""
        self.scheduler.served = pending
        changed = set(changed)
        freed = self.view.take_freed_machines()
        noted, self._noted = self._noted, set()
        if not (changed or freed or self._first):
            return HoldChanges(touched=noted)  # a job a decision left pending: held until a change
        self._first = False
        scheduler = self.scheduler
        queue = scheduler.queue(self.view)
        plan = easy_pass(self.view, scheduler.clock.now(), queue)
        held = {e.record.job.id for e in queue} - plan.start.keys()
        if self.decided is not None:
            self.decided &= held  # (a job started or gone is decided anew when it waits again)
            held &= self.decided
        touched = (held ^ self.held) | noted
        self.held = held
        return HoldChanges(touched=touched)

    def solo(self, job_id: str) -> bool:
        """True while the job is held."""
        return job_id in self.held

    def group_of(self, job_id: str) -> Hashable:
        return None

    def note(self, job_id: str, result: PlacementResult) -> None:
        """A decision left the job pending (the pass changed since the refresh): hold it until
        the next change."""
        if result.pending and not result.job_gone:
            self.held.add(job_id)
            self._noted.add(job_id)
            if self.decided is not None:
                self.decided.add(job_id)
