"""One replayed scheduler: the REAL scheduler class (``make_scheduler``), the REAL
``OptimisticPlacer`` and ``StoreCommitter``, its own watch-fed ``ReplicaView``, and the
``JobQueue`` — run as a simulated process on virtual time.

Loop: pump the replica (the view is now as of T), choose the next job (in the config's queue
order, fair or drf; work shared with same-kind peers), ``placer.place`` it. The decide
function the placer calls runs the scheduler on the view as of T, then holds the process for
the decision time (modelled ``t_job + t_task × tasks``, or the measured wall time ×
``time_scale``), so the commit lands at T + decision time, after every commit other
schedulers made meanwhile. Idle, the process parks until the cell changes or a deferred job
is due. Jobs whose last decision found no machine are left out of the candidates until room
may have appeared for them (``tools.fauxmaster.fit_memo``; batch and service kinds, ``skip_nothing_fits``).
The candidates are kept across rounds: a round hands the memo and the queue only the jobs whose
record changed and those the memo released or remembered (``JobQueue.track``/``select_tracked``),
so its cost follows the changes, not the backlog.
"""

from __future__ import annotations

import time
from functools import partial
from dataclasses import dataclass, field
from typing import Any

from cellstate.fastbuild import builder
from cellstate.memory_store import MemoryStore
from cellstate.model import JobKind
from cellstate.placement_view import ReplicaView
from cellstate.store import Store
from omega.attempts import Attempt
from omega.modes import CommitMode, ConflictMode
from omega.occ import OptimisticPlacer
from omega.protocols import Decision, JobEntry, PlanTooLarge
from omega.queue import JobQueue, check_order, make_order
from omega.refusals import RefusedJobs
from omega.retry import retry_policy_for
from schedulers.chains import KINDS, make_scheduler
from tools.fauxmaster.clock import EventCore, Process, VirtualClock
from tools.fauxmaster.fit_memo import NothingFitsMemo, memo_applies

DECISION_TIME_MODES = ("modelled", "measured")
SELECT_BATCH = 16  # jobs taken from one fair ordering of the queue before ordering it again
_DECISION = builder(Decision)  # one per decision of a scheduler answering otherwise: without __init__
_JOB_KINDS = {"batch": (JobKind.BATCH,), "service": (JobKind.SERVICE,), "all": (JobKind.BATCH, JobKind.SERVICE)}


@dataclass(frozen=True)
class SchedulerConfig:
    """One replayed scheduler. ``t_job``/``t_task``: modelled decision time (Omega's defaults)."""

    name: str
    kind: str = "batch"
    conflict_mode: str = "resource-fit"
    commit_mode: str = "incremental"
    seed: int = 0
    t_job: float = 0.1
    t_task: float = 0.005
    plugins: dict[str, Any] = field(default_factory=dict)
    jobs: str = ""
    """Job kinds it places: "batch", "service" or "all". Default: a batch or service scheduler
    its own kind, any other kind (borg…) "all". Filled in by the constructor."""
    order: str = "fair"
    """Its queue order: "fair" or "drf" (``omega.queue.make_order``)."""
    drf_weights: dict[str, float] = field(default_factory=dict)
    """Owner → weight of the owner's dominant share under "drf" (default 1)."""
    options: dict[str, Any] = field(default_factory=dict)
    """The kind's own config keys, as ``make_scheduler`` takes them (borg: ``k``,
    ``walk_start``…; solver: ``time_limit_s``, ``deterministic_time``…; batch: ``k``…)."""

    def __post_init__(self):
        if not self.name or "/" in self.name:
            raise ValueError(f'scheduler name must be non-empty without "/", got {self.name!r}')
        if self.kind not in KINDS:
            raise ValueError(f"scheduler {self.name!r}: unknown kind {self.kind!r}; known: {sorted(KINDS)}")
        if self.jobs and self.jobs not in _JOB_KINDS:
            raise ValueError(f"scheduler {self.name!r}: jobs must be one of {sorted(_JOB_KINDS)}, got {self.jobs!r}")
        if not self.jobs:
            own = self.kind if self.kind in {k.value for k in JobKind} else "all"
            object.__setattr__(self, "jobs", own)
        try:
            object.__setattr__(self, "drf_weights", check_order(self.order, self.drf_weights))
        except ValueError as exc:
            raise ValueError(f"scheduler {self.name!r}: {exc}") from None
        if self.t_job < 0 or self.t_task < 0:
            raise ValueError(f"scheduler {self.name!r}: t_job and t_task must be >= 0, "
                             f"got {self.t_job!r} and {self.t_task!r}")
        try:
            make_scheduler(self.kind, self.name, self.seed, self.scheduler_config())  # checks plugins/options
        except ValueError as exc:
            raise ValueError(f"scheduler {self.name!r}: {exc}") from None
        ConflictMode.parse(self.conflict_mode)
        CommitMode.parse(self.commit_mode)

    def scheduler_config(self) -> dict[str, Any] | None:
        """The config ``make_scheduler`` gets: ``options`` plus ``plugins`` (None: defaults)."""
        if not self.options and not self.plugins:
            return None
        if not isinstance(self.options, dict):
            raise ValueError(f"options must be a mapping of config keys, got {self.options!r}")
        return {**self.options, **({"plugins": self.plugins} if self.plugins else {})}


@dataclass(slots=True)
class SchedulerTally:
    """What one scheduler did during the replay."""

    attempts: int = 0
    transactions: int = 0
    failed_transactions: int = 0
    conflict_transactions: int = 0
    conflicted_attempts: int = 0
    tasks_placed: int = 0
    jobs_taken: int = 0
    gave_up: int = 0
    too_large: int = 0
    decide_wall_s: float = 0.0


class SimScheduler:
    """A scheduler process of the replay (see the module docstring)."""

    def __init__(self, config: SchedulerConfig, store: Store, core: EventCore, clock: VirtualClock,
                 cell, peers: list[str], decision_time: str = "modelled", time_scale: float = 1.0,
                 journal=None, skip_nothing_fits: bool = True):
        if decision_time not in DECISION_TIME_MODES:
            raise ValueError(f"decision_time must be one of {DECISION_TIME_MODES}, got {decision_time!r}")
        self.config = config
        self.name = config.name
        self.store = store
        self.core = core
        self.clock = clock
        self.peers = peers
        self.kinds = _JOB_KINDS[config.jobs or config.kind]
        self.measured = decision_time == "measured"
        self.synchronous_watch = isinstance(store, MemoryStore)
        self.time_scale = time_scale
        self.journal = journal
        self.tally = SchedulerTally()
        self.scheduler = make_scheduler(config.kind, config.name, config.seed, config.scheduler_config())
        self.view = ReplicaView(store, cell.keys, shared_decodes=cell.decodes)
        self.placer = OptimisticPlacer(config.name, cell.committer(), ConflictMode.parse(config.conflict_mode),
                                       CommitMode.parse(config.commit_mode),
                                       retry_policy_for(config.kind, config.seed), clock, self._on_attempt)
        self.queue = JobQueue(config.name, order=make_order(config.order, self.view, config.drf_weights))
        self.memo = (NothingFitsMemo(self.view, CommitMode.parse(config.commit_mode) is CommitMode.ALL_OR_NOTHING)
                     if skip_nothing_fits and memo_applies(self.scheduler) else None)
        self.refused = RefusedJobs()  # refused jobs stay out until they change
        self.view.track_changed_jobs()
        lookups = [self.view.replica.pending_lookup(kind) for kind in self.kinds]
        self._pending_entry = lookups[0] if len(lookups) == 1 else partial(_first_pending, lookups)
        """job id → its entry if it is pending (not killed) and of this scheduler's kinds."""
        self._started = False
        self.process = Process(core, config.name, self._run)

    # -- the loop ---------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            self.catch_up()
            if self.view.take_freed():
                self.queue.reset()
            now = self.clock.now()
            self._refresh_candidates()
            chosen = self.queue.select_tracked(self.peers, now, SELECT_BATCH)
            if not chosen:
                self.process.park(self._idle_timeout(now))
                continue
            for entry in chosen:  # the fair order is walked once per batch of jobs
                current = self.view.job(entry.id)
                if current is not None and "p" in current.record.tasks and not current.record.killed:
                    self._place(current)
                if self.view.take_freed() and self._release_deferred():
                    break

    def _release_deferred(self) -> bool:
        """The cell freed resources: deferred jobs may fit now. Forget their backoff; True
        when there were some (then the fair order is walked again, with them)."""
        deferred = self.queue.has_deferred()
        self.queue.reset()
        return deferred

    def _refresh_candidates(self) -> None:
        """Hand the queue the jobs whose candidacy may have changed since the last round: the
        jobs whose record changed (all pending ones the first time), those the memo noted,
        released or remembered on their own, and the request groups it put to sleep or woke.
        Candidates: pending jobs of its kinds the memo does not skip."""
        if self._started:
            changed = self.view.take_changed_jobs()
        else:
            self._started = True
            self.view.take_changed_jobs()
            changed = {entry.id for kind in self.kinds for entry in self.view.pending_jobs(kind)}
        memo, queue, refused = self.memo, self.queue, self.refused
        held = refused.holds if refused.jobs else None  # (no refusal: no call per job)
        if memo is None:
            for job_id in changed:
                entry = self._pending_entry(job_id)
                if entry is None:
                    queue.untrack(job_id)
                    if held is not None:
                        refused.forget(job_id)
                elif held is not None and held(entry):
                    queue.untrack(job_id)
                else:
                    queue.track(entry)
            return
        changes = memo.refresh(changed, self._pending_entry)
        for request, asleep in changes.groups.items():
            queue.set_group_asleep(request, asleep)
        pending, ids = self._pending_entry, (changed | changes.touched) if changes.touched else changed
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

    def _place(self, entry: JobEntry) -> None:
        self.tally.jobs_taken += 1
        if self.journal is not None:
            self.journal.taken(entry.id, self.clock.now())
        try:
            result = self.placer.place(entry.id, self.view, self._decide)
        except PlanTooLarge:
            self.tally.too_large += 1
            self.refused.refuse(entry)  # out of the candidates until the job changes
            self.queue.untrack(entry.id)
            return
        self.tally.gave_up += result.gave_up
        if self.memo is not None:
            self.memo.note(entry.id, result)
        if result.pending and not result.job_gone:
            self.queue.defer(entry.id, self.clock.now())
        else:
            self.queue.reset(entry.id)
            if self.journal is not None and not result.job_gone:
                self.journal.placed(entry.id, self.clock.now())

    def _idle_timeout(self, now: float) -> float | None:
        """Until the next deferred job is due or a candidate may be stolen (None: no such time)."""
        times = []
        ready = self.queue.next_ready_at()
        if ready is not None and ready > now:
            times.append(ready)
        steal = self.queue.next_steal_at(now)
        if steal is not None:
            times.append(steal)
        return min(times) - now if times else None

    def catch_up(self) -> None:
        """Bring the replica to the store's current revision (a memory store's watch is
        synchronous; an etcd watch may lag a little: wait for it, at most a second)."""
        if self.synchronous_watch:
            self.view.pump()
            return
        target = self.store.revision()
        self.view.pump()
        deadline = time.monotonic() + 1.0
        while self.view.revision < target and time.monotonic() < deadline:
            self.view.pump(0.02)

    # -- what the placer calls ------------------------------------------------------------------

    def _decide(self, entry: JobEntry, tasks: list[int], view) -> Decision:
        """The scheduler's decision on the view as of now; then the decision time passes."""
        self.catch_up()
        started = time.perf_counter()
        answer = self.scheduler.decide(entry, tasks, view)
        wall = time.perf_counter() - started
        self.tally.decide_wall_s += wall
        if self.measured:
            spent = wall * self.time_scale
        else:
            spent = self.config.t_job + self.config.t_task * len(tasks)
        self.process.hold(spent, "decide")
        if type(answer) is Decision:
            return answer
        claims, unplaced = answer.claims, answer.unplaced  # the scheduler's own, fresh for this call
        return _DECISION(claims if type(claims) is list else list(claims),
                         unplaced if type(unplaced) is dict else dict(unplaced))

    def _on_attempt(self, attempt: Attempt) -> None:
        t = self.tally
        t.attempts += 1
        t.transactions += attempt.transactions
        t.failed_transactions += attempt.failed_transactions
        t.conflict_transactions += attempt.conflict_transactions
        t.conflicted_attempts += attempt.conflicted
        t.tasks_placed += len(attempt.committed)

    @property
    def busy_s(self) -> float:
        """Virtual seconds spent deciding and backing off until now (a hold still running
        counts up to now only)."""
        return self.process.held_until(self.core.now)


def _first_pending(lookups, job_id: str) -> JobEntry | None:
    """The entry the first of ``lookups`` finds for ``job_id`` (None: none)."""
    for pending in lookups:
        entry = pending(job_id)
        if entry is not None:
            return entry
    return None
