"""The host contract: what a scheduler may ask of the process that runs it, what it offers
back, and the one assembly of placer, queue and cycle that every host uses (docs/HOST.md).

A host is the live process (``omega.runtime.SchedulerProcess``) or a replayed one
(``tools.fauxmaster.scheduler_process.SimScheduler``). Both call ``assemble``, which hands the
scheduler a ``SchedulerHost`` once, through the scheduler's ``attach`` (every scheduler
declares it: ``schedulers.base.Scheduler``), and wires what the returned ``Attachment``
offers into the cycle:

- the scheduler may ask for the host's ``clock`` (virtual in a replay: a scheduler that plans
  in time), the cycle's ``refused`` jobs (a scheduler that plans over the whole queue), the
  ``view`` the cycle works on with its change feed (``omega.protocols.ChangeFeed``), and the
  host's choices ``all_or_nothing`` (every job is committed whole), ``skip_nothing_fits``
  (the host lets a candidate filter set aside jobs a decision found no room for) and
  ``explains_waits`` (a job is set aside only after one decision of it, so its record says why
  it waits: the core's promise that every pending task keeps a reason; live, not in a replay);
- it may offer ``share_machines`` (called with the live peers of its class when they change)
  and a ``candidate_filter`` (``omega.cycle.CandidateFilter``: the nothing-fits memo of a
  scheduler that leaves a task unplaced only when no machine has room, or EASY's holds).

Nothing is probed: a scheduler that needs nothing returns ``Attachment()``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Collection, Mapping, Protocol

from cellstate.plan import JobEntry
from omega.attempts import Attempt
from omega.cycle import CandidateFilter, CycleHost, CycleView, SchedulingCycle
from omega.modes import CommitMode, ConflictMode
from omega.occ import OptimisticPlacer
from omega.protocols import CellView, Clock, Committer, Decision
from omega.queue import JobQueue, make_order
from omega.refusals import RefusedJobs
from omega.retry import RetryPolicy


class SchedulerHost(Protocol):
    """What a scheduler may ask of the host that runs it (see the module docstring)."""

    @property
    def name(self) -> str:
        """The scheduler's name (the writer of its commits)."""
        ...

    @property
    def clock(self) -> Clock:
        """The host's time: the wall clock live, the virtual clock in a replay."""
        ...

    @property
    def view(self) -> CycleView:
        """The view the host's cycle works on, with its change feed."""
        ...

    @property
    def refused(self) -> RefusedJobs:
        """The jobs the cycle refused (``PlanTooLarge``), out until they change."""
        ...

    @property
    def all_or_nothing(self) -> bool:
        """True when the host commits every job all-or-nothing (gangs are, in any case)."""
        ...

    @property
    def skip_nothing_fits(self) -> bool:
        """True when a candidate filter may set aside jobs a decision found no room for."""
        ...

    @property
    def explains_waits(self) -> bool:
        """True when a candidate filter sets a job aside only after a decision of it (its
        record then holds the reason it waits)."""
        ...


@dataclass(frozen=True, slots=True)
class Attachment:
    """What a scheduler offers its host (``attach``'s answer; module docstring)."""

    share_machines: Callable[[list[str]], None] | None = None
    candidate_filter: CandidateFilter | None = None


class HostedScheduler(Protocol):
    """A scheduler as a host runs it (``schedulers.base.Scheduler``)."""

    name: str
    kind: str

    def decide(self, job: JobEntry, tasks: list[int], view: CellView) -> Decision: ...

    def attach(self, host: SchedulerHost) -> Attachment:
        """Take from ``host`` what it needs; what it offers back. Called once, before the
        first decision."""
        ...


@dataclass(frozen=True, slots=True)
class HostContext:
    """The ``SchedulerHost`` that ``assemble`` hands a scheduler."""

    name: str
    clock: Clock
    view: CycleView
    refused: RefusedJobs
    all_or_nothing: bool
    skip_nothing_fits: bool
    explains_waits: bool


@dataclass(frozen=True, slots=True)
class CycleOptions:
    """How a host's cycle is assembled: the placer's modes and retry policy, the queue's order
    (``omega.queue.make_order``) and stealing, jobs taken per ordering (``batch_jobs``) and
    whether the nothing-fits memo may be used (``skip_nothing_fits``) and whether a job is
    decided once before a candidate filter sets it aside (``explains_waits``: a live host's
    users read the reasons; a replay leaves that decision out)."""

    retry: RetryPolicy
    conflict_mode: ConflictMode = ConflictMode.RESOURCE_FIT
    commit_mode: CommitMode = CommitMode.INCREMENTAL
    order: str = "fair"
    drf_weights: Mapping[str, float] = field(default_factory=dict)
    steal_after_s: float | None = None
    batch_jobs: int = 16
    skip_nothing_fits: bool = True
    explains_waits: bool = True


@dataclass(frozen=True, slots=True)
class Assembly:
    """A host's assembled loop: the placer, the queue, the cycle and what the scheduler offered."""

    placer: OptimisticPlacer
    queue: JobQueue
    cycle: SchedulingCycle
    attachment: Attachment


def assemble(scheduler: HostedScheduler, classes: Collection[str], view: CycleView, committer: Committer,
             host: CycleHost, clock: Clock, options: CycleOptions, *,
             on_attempt: Callable[[Attempt], None] | None = None,
             refresh: Callable[[], object] | None = None,
             pace: Callable[[int], object] | None = None,
             expect: Callable[[int], float] | None = None) -> Assembly:
    """The placer, queue and cycle of ``scheduler`` serving the scheduler ``classes`` on
    ``view`` for ``host``; the scheduler is attached (module docstring) before the cycle is
    built, and what it offers is wired in. ``on_attempt``, ``refresh``, ``pace`` and ``expect``
    go to the placer (``omega.occ.OptimisticPlacer``). TypeError when ``attach`` answers
    anything but an ``Attachment``."""
    name = scheduler.name
    placer = OptimisticPlacer(name, committer, options.conflict_mode, options.commit_mode, options.retry, clock,
                              on_attempt, refresh=refresh, pace=pace, expect=expect)
    queue = JobQueue(name, steal_after_s=options.steal_after_s,
                     order=make_order(options.order, view, options.drf_weights))
    refused = RefusedJobs()
    context = HostContext(name, clock, view, refused, options.commit_mode is CommitMode.ALL_OR_NOTHING,
                          options.skip_nothing_fits, options.explains_waits)
    attachment = scheduler.attach(context)
    if not isinstance(attachment, Attachment):
        raise TypeError(f"scheduler {name!r} ({scheduler.kind}): attach must return an omega.host.Attachment, "
                        f"got {attachment!r}")
    cycle = SchedulingCycle(name, classes, view, placer, queue, host, clock, batch_jobs=options.batch_jobs,
                            memo=attachment.candidate_filter, share_machines=attachment.share_machines,
                            refused=refused)
    return Assembly(placer, queue, cycle, attachment)
