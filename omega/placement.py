"""One placement and its attempts, the seam between the placer and its strategies.

``PlacementRun`` is the state of one ``OptimisticPlacer.place`` call across its attempts;
``PlacementAttempt`` one decision and the transactions it leads to (``Tally``). The incremental
strategy (``omega.occ``) and the gang strategy (``omega.gangs``) both drive an attempt through
its public methods: ``decide``, ``pace``, ``commit`` (one txn), ``refreshed`` (a stale plan
rebased), ``resolve`` (a failed txn split), ``record_committed``, ``write_reason`` and ``emit``
(the ``Attempt`` record). docs/OMEGA_CORE.md has the loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from cellstate.fastbuild import builder
from cellstate.plan import Claim, CommitOutcome, JobEntry, Plan
from omega.attempts import Attempt, AttemptOutcome
from omega.modes import CommitMode, ConflictMode, ConflictSplit
from omega.protocols import Decide, Decision, PlacementView

if TYPE_CHECKING:
    from omega.occ import OptimisticPlacer

# One per attempt or txn, every field given: without their dataclass __init__.
_ATTEMPT, _PLAN = builder(Attempt), builder(Plan)


@dataclass(slots=True)
class PlacementRun:
    """State of one ``place`` call across its attempts."""

    job_id: str
    view: PlacementView
    decide: Decide
    todo: list[int] | None = None
    unplaced: dict[int, str] = field(default_factory=dict)
    conflicts: dict[int, str] = field(default_factory=dict)
    placed: list[Claim] = field(default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)
    no_progress: int = 0
    job_gone: bool = False
    retrying: bool = False  # tenacity's loop has taken over from the first attempt


@dataclass(slots=True)
class Tally:
    """The transactions of one attempt."""

    committed: list[Claim] = field(default_factory=list)
    conflicting: dict[str, str | None] = field(default_factory=dict)  # machine -> who had won it (None: unknown)
    winners: dict[str, None] = field(default_factory=dict)
    redecide: list[int] = field(default_factory=list)
    transactions: int = 0
    failed: int = 0
    stale: int = 0
    job_conflicts: int = 0  # conflicts that rejected no claim: the job record had changed
    job_gone: bool = False


@dataclass(slots=True)
class PlacementAttempt:
    """One attempt of ``placement`` by ``placer``, begun at ``started_at``: the tasks decided,
    the claims of the decision, the time it took (``decision_time_s``, paced txns included),
    its transactions (``tally``) and, once emitted, its ``outcome``."""

    placer: OptimisticPlacer
    placement: PlacementRun
    started_at: float
    tasks: list[int] = field(default_factory=list)
    decision_time_s: float = 0.0
    claims: tuple[Claim, ...] = ()
    tally: Tally = field(default_factory=Tally)
    outcome: AttemptOutcome | None = None

    @property
    def view(self) -> PlacementView:
        return self.placement.view

    @property
    def job_id(self) -> str:
        return self.placement.job_id

    # -- deciding ----------------------------------------------------------------------------

    def decide(self, entry: JobEntry, tasks: list[int], paced: bool = False) -> tuple[Decision, float]:
        """The scheduler's decision for ``tasks`` of ``entry`` and the time it took (not added
        to ``decision_time_s``: the caller does); ``paced``: its txns will call ``pace`` (else
        the rest of a paced decision's time passes here, before anything is committed).
        TypeError or ValueError for a decision that is not one or claims what was not asked."""
        placer = self.placer
        clock = placer.clock
        before = clock.now()
        decision = self.placement.decide(entry, list(tasks), self.placement.view)
        if not paced and placer.pace is not None:
            placer.pace(0)
        elapsed = max(0.0, clock.now() - before)
        check_decision(placer.scheduler, entry, tasks, decision)
        return decision, elapsed

    def pace(self, claims: int) -> None:
        """Let the share of the decision's time for ``claims`` claims pass (0: all that is
        left), with the placer's ``pace``; ``decision_time_s`` includes it."""
        placer = self.placer
        if placer.pace is None:
            return
        before = placer.clock.now()
        placer.pace(claims)
        self.decision_time_s += max(0.0, placer.clock.now() - before)

    # -- transactions ------------------------------------------------------------------------

    def commit(self, plan: Plan) -> CommitOutcome:
        """One txn of ``plan`` through the placer's committer; the view takes in its outcome."""
        outcome = self.placer.committer.commit(plan)
        self.placement.view.apply_outcome(outcome)
        tally = self.tally
        tally.transactions += 1
        if not outcome.committed:
            tally.failed += 1
        return outcome

    def refreshed(self, plan: Plan) -> Plan:
        """Resource-fit, with the placer's ``refresh`` (the view's pump): the plan rebased on the
        newer ledgers the view has by now, when against them it would only be a stale retry
        (every claim still fits, the job unchanged): the txn bound to fail on the old revisions
        is not sent. Anything else (a real conflict, or sequence mode) goes out as it is and is
        detected and counted by the commit."""
        placer = self.placer
        if placer.refresh is None or placer.conflict_mode is not ConflictMode.RESOURCE_FIT:
            return plan
        placer.refresh()
        view = self.placement.view
        machines = {machine_id: view.machine(machine_id) for machine_id in plan.machines}
        if all(m is not None and m.mod_revision == plan.machines[i].mod_revision for i, m in machines.items()):
            return plan
        probe = CommitOutcome(False, view.revision, machines, view.job(plan.job.id), False,
                              {job_id: view.job(job_id) for job_id in plan.victims},
                              {task: view.alloc_entry(*task) for task in plan.victim_allocs})
        strategy = placer.conflict_mode.strategy
        found = {machine_id: m for machine_id, m in machines.items() if m is not None}
        if len(found) < len(machines) or not strategy.stale(plan, probe, strategy.split(plan, probe)):
            return plan  # (a machine gone is a conflict, never a stale retry)
        return replace(plan, machines=found)

    def resolve(self, mode: CommitMode, plan: Plan, outcome: CommitOutcome) -> Plan | None:
        """The rebased plan of the claims to retry now after the failed txn ``outcome`` (None:
        the job is gone); the tasks to decide again go to ``tally.redecide``. Counts the failed
        txn as a stale retry or notes its conflict (``omega.modes``: accounting)."""
        if outcome.job_deleted or outcome.fresh_job is None:
            return None
        placer, st, tally = self.placer, self.placement, self.tally
        strategy = placer.conflict_mode.strategy
        split = strategy.split(plan, outcome)
        if strategy.stale(plan, outcome, split):
            tally.stale += 1
        else:
            note_conflict(outcome, split, tally)
            if not split.rejected:
                tally.job_conflicts += 1
        st.conflicts.update({claim.task_index: why for claim, why in split.rejected})
        resolution = mode.strategy.resolve(split)
        tally.redecide.extend(resolution.redecide)
        machines = {c.machine_id: outcome.fresh_machines[c.machine_id] for c in resolution.retry}
        victims = {job_id: outcome.fresh_victims[job_id]
                   for c in resolution.retry for job_id, _ in c.evicts}
        victim_allocs = {task: outcome.fresh_victim_allocs[task] for c in resolution.retry for task in c.evicts}
        # a kept claim may have fitted only by another claim's eviction the split rejected
        rebased, back = mode.strategy.fitting(_PLAN(outcome.fresh_job, tuple(resolution.retry), machines,
                                                    placer.scheduler, dict(st.unplaced), placer.clock.now(),
                                                    victims, victim_allocs))
        tally.redecide.extend(back)
        return rebased

    # -- what it leaves ----------------------------------------------------------------------

    def record_committed(self) -> None:
        """The placement takes in the claims committed: placed, no longer unplaced or conflicting."""
        st, committed = self.placement, self.tally.committed
        st.placed.extend(committed)
        for claim in committed:
            st.unplaced.pop(claim.task_index, None)
            st.conflicts.pop(claim.task_index, None)

    def write_reason(self, entry: JobEntry) -> None:
        """Store the reasons of the still-pending tasks in the job record (guarded by its
        revision; one more try on fresh state if the job changed meanwhile)."""
        placer, unplaced = self.placer, self.placement.unplaced
        for _ in range(2):
            plan = _PLAN(entry, (), {}, placer.scheduler, dict(unplaced), placer.clock.now(), {}, {})
            outcome = self.commit(plan)
            if outcome.committed or outcome.fresh_job is None:
                return
            entry = outcome.fresh_job

    def emit(self, outcome: AttemptOutcome) -> Attempt:
        """The ``Attempt`` record of this attempt with ``outcome``, added to the placement's and
        handed to the placer's ``on_attempt``."""
        self.outcome = outcome
        st, tally, placer = self.placement, self.tally, self.placer
        record = _ATTEMPT(placer.scheduler, st.job_id, self.decision_time_s, self.claims,
                          tuple(tally.committed), tuple(tally.conflicting), len(st.attempts), outcome,
                          tally.transactions, tally.failed, self.started_at, tuple(tally.winners),
                          tally.stale, tally.job_conflicts, tuple(w or "" for w in tally.conflicting.values()))
        st.attempts.append(record)
        if placer.on_attempt is not None:
            placer.on_attempt(record)
        return record


def check_decision(scheduler: str, entry: JobEntry, tasks: list[int], decision: object) -> None:
    """TypeError unless ``decision`` is a ``Decision``; ValueError when it claims a task not
    asked for or twice, or gives reasons for tasks not asked for."""
    where = f"decision of scheduler {scheduler!r} for job {entry.id!r}"
    if not isinstance(decision, Decision):
        raise TypeError(f"{where} is {type(decision).__name__}, expected a Decision")
    asked = set(tasks)
    claimed = [claim.task_index for claim in decision.claims]
    distinct = set(claimed)
    if len(distinct) < len(claimed) or not distinct <= asked:
        seen: set[int] = set()
        for task in claimed:  # the first claim refused
            if task not in asked or task in seen:
                raise ValueError(f"{where} claims task {task}, which was not asked for "
                                 f"or is claimed twice (asked: {sorted(asked)})")
            seen.add(task)
    if not asked.issuperset(decision.unplaced):
        stray = set(decision.unplaced) - asked
        raise ValueError(f"{where} gives reasons for tasks {sorted(stray)}, which were not asked for")


def note_conflict(outcome: CommitOutcome, split: ConflictSplit, tally: Tally) -> None:
    """Record the machines of the rejected claims and who had last written each when the txn
    failed (its fresh ledger's ``writer``: the winner; read now, not at the attempt's end, when
    a retry of this scheduler's may have written the machine since)."""
    fresh_machines, conflicting, winners = outcome.fresh_machines, tally.conflicting, tally.winners
    for machine_id in dict.fromkeys(claim.machine_id for claim, _ in split.rejected):
        fresh = fresh_machines.get(machine_id)
        writer = fresh.machine.writer if fresh is not None else ""
        if not conflicting.get(machine_id):
            conflicting[machine_id] = writer
        if writer:
            winners[writer] = None
