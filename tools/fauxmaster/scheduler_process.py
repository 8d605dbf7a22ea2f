"""One replayed scheduler: the REAL scheduler class (``make_scheduler``), the REAL scheduling
cycle (``omega.cycle.SchedulingCycle``: the live process's loop, with its ``OptimisticPlacer``,
``JobQueue`` and refusals, assembled by ``omega.host.assemble`` as the live process's are) over
the REAL ``StoreCommitter`` and its own watch-fed ``ReplicaView`` — run as a simulated process
on virtual time.

The process is the cycle's host: it brings the replica up to date (the view is then as of T),
names its peers (the replay's schedulers serving the same jobs), and lets a decision's time
pass: the decide function runs the scheduler on the view as of T, then holds the process for
the decision time (modelled ``t_job + t_task × tasks``, or the measured wall time ×
``time_scale``), so the commit lands at T + decision time, after every commit other
schedulers made meanwhile. A modelled decision whose claims take several txns sends each as
the decision reaches it (``DECISION_COMMITS``, the placer's ``pace``). Idle, the process parks
until the cell changes or a deferred job is due. The scheduler's candidate filter is the one it
offers when attached, as live: the nothing-fits memo (``schedulers.fit_memo``; batch and
service kinds; ``skip_nothing_fits`` False leaves it out) or EASY's holds. Unlike the live
default, a replayed queue steals after ``STEAL_AFTER_S`` (its peers never die).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from cellstate.fastbuild import builder
from cellstate.memory.store import MemoryStore
from cellstate.model import JobKind
from cellstate.replica.view import ReplicaView
from cellstate.store import Store
from omega.attempts import Attempt, PlacementResult
from omega.host import CycleOptions, assemble
from omega.modes import CommitMode, ConflictMode
from cellstate.plan import JobEntry
from omega.protocols import Decision
from omega.queue import check_order
from schedulers.chains import KINDS, make_scheduler, retry_policy_for
from tools.fauxmaster.clock import EventCore, Process, VirtualClock

DECISION_TIME_MODES = ("modelled", "measured")
DECISION_COMMITS = ("as-decided", "at-end")
"""When a modelled decision's txns go out: "as-decided", each txn of k claims once t_job and
t_task per claim decided so far have passed (the tasks it could not place take their t_task
after its last txn); "at-end", all of them after the whole ``t_job + t_task × tasks`` (Omega's
simulator, whose decision is one txn). The scheduler is busy the same time either way."""
UNPLACED_CHARGES = ("every", "once")
"""What a modelled decision charges ``t_task`` for: "every" task it decided (the paper's
``t_job + t_task × tasks``); "once": every task it placed, plus one ``t_task`` when it left any
unplaced (Borg's equivalence classes: once one task of a class finds no machine, its identical
siblings are not examined again; a replayed job has one request shape)."""
SELECT_BATCH = 16  # jobs taken from one fair ordering of the queue before ordering it again (batch_jobs)
STEAL_AFTER_S = 2.0  # a peer's jobs pending this long are taken over (the replay's peers never die)
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
        if not (0 <= self.t_job < math.inf and 0 <= self.t_task < math.inf):
            raise ValueError(f"scheduler {self.name!r}: t_job and t_task must be finite numbers >= 0, "
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
                 journal=None, skip_nothing_fits: bool = True, decision_commits: str = "as-decided",
                 unplaced_charge: str = "every"):
        if decision_time not in DECISION_TIME_MODES:
            raise ValueError(f"decision_time must be one of {DECISION_TIME_MODES}, got {decision_time!r}")
        if decision_commits not in DECISION_COMMITS:
            raise ValueError(f"decision_commits must be one of {DECISION_COMMITS}, got {decision_commits!r}")
        if unplaced_charge not in UNPLACED_CHARGES:
            raise ValueError(f"unplaced_charge must be one of {UNPLACED_CHARGES}, got {unplaced_charge!r}")
        self.charge_every = unplaced_charge == "every"
        self.config = config
        self.name = config.name
        self.store = store
        self.core = core
        self.clock = clock
        self.peers_list = peers
        self.measured = decision_time == "measured"
        self.paced = not self.measured and decision_commits == "as-decided"
        self._owed = 0.0  # of a paced decision's time: what has not passed yet
        self.synchronous_watch = isinstance(store, MemoryStore)
        self.time_scale = time_scale
        self.journal = journal
        self.tally = SchedulerTally()
        self.scheduler = make_scheduler(config.kind, config.name, config.seed, config.scheduler_config())
        self.view = ReplicaView(store, cell.keys, shared_decodes=cell.decodes)
        options = CycleOptions(retry_policy_for(config.kind, config.seed), ConflictMode.parse(config.conflict_mode),
                               CommitMode.parse(config.commit_mode), config.order, config.drf_weights,
                               STEAL_AFTER_S, SELECT_BATCH, skip_nothing_fits, explains_waits=False)
        assembly = assemble(self.scheduler, served_classes(config), self.view, cell.committer(), self, clock, options,
                            on_attempt=self._on_attempt, refresh=self.catch_up,
                            pace=self._pace if self.paced else None,
                            expect=None if self.measured else self._expected)
        self.placer, self.queue, self.cycle = assembly.placer, assembly.queue, assembly.cycle
        self.memo = self.cycle.memo  # the scheduler's candidate filter: the nothing-fits memo, EASY's holds
        self.refused = self.cycle.refused  # refused jobs stay out until they change
        self.process = Process(core, config.name, self._run)

    # -- the loop ---------------------------------------------------------------------------

    def _run(self) -> None:
        cycle = self.cycle
        while True:
            if not cycle.round():
                now = self.clock.now()
                wake = cycle.next_wake(now)
                self.process.park(None if wake is None else wake - now)

    # -- what the cycle asks of its host (omega.cycle.CycleHost) --------------------------------

    def peers(self) -> list[str]:
        return self.peers_list

    def taken(self, entry: JobEntry) -> None:
        self.tally.jobs_taken += 1
        journal = self.journal
        if journal is not None:
            journal.taken(entry.id, self.clock.now())
            if journal.taken_by is not None:
                journal.taken_by.setdefault(entry.id, self.config.name)

    def placed(self, entry: JobEntry, result: PlacementResult | None) -> None:
        if result is None:
            self.tally.too_large = self.cycle.tally.refused
            return
        self.tally.gave_up += result.gave_up
        if self.journal is not None and not result.pending and not result.job_gone:
            self.journal.placed(entry.id, self.clock.now())

    def stopping(self) -> bool:
        return False

    def decide(self, entry: JobEntry, tasks: list[int], view) -> Decision:
        return self._decide(entry, tasks, view)

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
        self._pace(0)  # an earlier decision's time passes first (normally the placer has let it)
        self.catch_up()
        started = time.perf_counter()
        answer = self.scheduler.decide(entry, tasks, view)
        wall = time.perf_counter() - started
        self.tally.decide_wall_s += wall
        if type(answer) is not Decision:
            claims, unplaced = answer.claims, answer.unplaced  # the scheduler's own, fresh for this call
            answer = _DECISION(claims if type(claims) is list else list(claims),
                               unplaced if type(unplaced) is dict else dict(unplaced))
        if self.measured:
            spent = wall * self.time_scale
        else:
            decided = len(tasks) if self.charge_every else len(answer.claims) + (1 if answer.unplaced else 0)
            if self.paced:
                spent = self.config.t_job
                self._owed = self.config.t_task * decided
            else:
                spent = self.config.t_job + self.config.t_task * decided
        self.process.hold(spent, "decide")
        return answer

    def _expected(self, tasks: int) -> float:
        """The modelled decision time of ``tasks`` tasks (the placer's ``expect``: gang leases)."""
        return self.config.t_job + self.config.t_task * tasks

    def _pace(self, claims: int) -> None:
        """The placer's ``pace``: the decision time of ``claims`` more claims passes (0: all
        that is left of the decision's ``t_task × tasks``)."""
        owed = self._owed
        if owed <= 0.0:
            return
        step = owed if claims <= 0 else min(owed, self.config.t_task * claims)
        self._owed = 0.0 if step >= owed else owed - step
        self.process.hold(step, "decide")

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


def served_classes(config: SchedulerConfig) -> frozenset[str]:
    """The scheduler classes (``Job.scheduler_class``) a replayed scheduler serves: those named
    like the job kinds of its ``jobs``, and its own kind's when that is no job kind's (a borg
    or solver scheduler also serves the jobs that name it)."""
    classes = {kind.value for kind in _JOB_KINDS[config.jobs or config.kind]}
    if config.kind not in {kind.value for kind in JobKind}:
        classes.add(config.kind)
    return frozenset(classes)
