"""Conflict modes and commit modes (Omega §3.4), each an Enum whose members carry a strategy.

Conflict mode: after a failed commit, which claims are still valid against the fresh state?
  SEQUENCE      coarse: a claim survives only if its machine's revision is unchanged;
  RESOURCE_FIT  fine: claims on a changed machine are re-checked, cumulatively, against the
                fresh ledger (the machine must still be up); only those that no longer fit fail.
Either way a claim whose task is no longer pending in the fresh job is dropped (another
scheduler placed it, or the job was killed), and a preempting claim survives only if its
machine and its victims' jobs are unchanged.

Accounting (``stale``): etcd can only compare revisions, so resource-fit detection is
emulated: any change to a touched machine fails the txn, and the fit is re-checked on the
fresh ledgers the failure branch read. A failed txn whose claims all still hold (none
rejected or dropped) on an unchanged job record is a *stale retry* (an artifact of that
emulation: Omega's fine-grained store would have accepted it), not a conflict. In sequence
mode every failed txn is a conflict.

Commit mode: what happens to the claims.
  INCREMENTAL     keep what is valid: retry the kept claims at once (rebased on the fresh
                  revisions); rejected tasks go back to the scheduler; big plans are split.
  ALL_OR_NOTHING  gang: a decision must place every task; any rejection sends the whole job
                  back; a gang larger than one transaction is reserved in chunks and placed
                  by one last txn (``omega.gangs``), or refused (PlanTooLarge) by a committer
                  without ``gangs``.

``drop_unfit`` re-checks a plan's claims with the same cumulative fit before a later chunk of
a split decision goes out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from typing import Any, Iterable, Mapping, TypeVar, cast

from cellstate.devices import bind_in
from cellstate.model import MachineState
from cellstate.plan import AllocEntry, Claim, CommitOutcome, JobEntry, MachineEntry, Plan, PlanTooLarge
from omega.protocols import Decision

Judged = tuple[list[Claim], list[tuple[Claim, str]]]
"""Claims on one machine split into those kept and (claim, why) for those rejected."""


@dataclass(frozen=True, slots=True)
class ConflictSplit:
    """Claims of a failed plan sorted by the fresh state."""

    kept: tuple[Claim, ...]
    rejected: tuple[tuple[Claim, str], ...]
    dropped: tuple[Claim, ...]


@dataclass(frozen=True, slots=True)
class Resolution:
    """What to do after a conflict: claims to retry now, tasks to re-decide."""

    retry: tuple[Claim, ...]
    redecide: tuple[int, ...]


def changed_machines(plan: Plan, outcome: CommitOutcome) -> list[str]:
    """Ids of the plan's machines whose fresh revision differs from the seen one (or are gone)."""
    out = []
    for machine_id, fresh in outcome.fresh_machines.items():
        seen = plan.machines.get(machine_id)
        if fresh is None or seen is None or fresh.mod_revision != seen.mod_revision:
            out.append(machine_id)
    return out


def _still_pending(claim: Claim, fresh_job: JobEntry | None) -> bool:
    return fresh_job is not None and not fresh_job.record.killed and \
        fresh_job.record.tasks[claim.task_index] == "p"


def _preemption_problem(plan: Plan, outcome: CommitOutcome, claim: Claim) -> str | None:
    """Why a preempting claim cannot be kept (machine or a victim changed), else None."""
    fresh = outcome.fresh_machines.get(claim.machine_id)
    if fresh is None or fresh.mod_revision != plan.machines[claim.machine_id].mod_revision:
        return f"preemption on machine {claim.machine_id} needs it unchanged"
    for job_id, task in claim.evicts:
        victim = outcome.fresh_victims.get(job_id)
        if victim is None or victim.mod_revision != plan.victims[job_id].mod_revision:
            return f"victim job {job_id} changed"
        alloc = outcome.fresh_victim_allocs.get((job_id, task))
        seen = plan.victim_allocs.get((job_id, task))
        if alloc is None or seen is None or alloc.mod_revision != seen.mod_revision:
            return f"victim allocation {job_id}/{task} changed"
    return None


class _ConflictStrategy:
    """Shared sorting; subclasses decide ``_judge`` for the claims of one machine."""

    label = ""

    def split(self, plan: Plan, outcome: CommitOutcome) -> ConflictSplit:
        if outcome.committed:
            raise ValueError("a committed outcome has no conflict to split")
        kept, rejected, dropped = [], [], []
        by_machine: dict[str, list[Claim]] = {}
        for claim in plan.claims:
            if not _still_pending(claim, outcome.fresh_job):
                dropped.append(claim)
            elif claim.evicts:
                problem = _preemption_problem(plan, outcome, claim)
                (kept.append(claim) if problem is None else rejected.append((claim, problem)))
            else:
                by_machine.setdefault(claim.machine_id, []).append(claim)
        context = self._context(plan, outcome) if by_machine else None
        for machine_id, claims in by_machine.items():
            k, r = self._judge(plan, outcome, machine_id, claims, context)
            kept += k
            rejected += r
        order = {c.task_index: n for n, c in enumerate(plan.claims)}
        kept.sort(key=lambda c: order[c.task_index])
        return ConflictSplit(tuple(kept), tuple(rejected), tuple(dropped))

    def _context(self, plan: Plan, outcome: CommitOutcome) -> Any:
        """What ``_judge`` needs of the whole plan, computed once per split."""
        return None

    def _judge(self, plan: Plan, outcome: CommitOutcome, machine_id: str, claims: list[Claim],
               context: Any) -> Judged:
        raise NotImplementedError

    def stale(self, plan: Plan, outcome: CommitOutcome, split: ConflictSplit) -> bool:
        """True when the failed txn of ``plan`` is a stale retry rather than a conflict (see
        the module docstring); ``split`` is this strategy's split of it."""
        return False


class SequenceConflicts(_ConflictStrategy):
    """Any change to a touched machine invalidates every claim on it."""

    label = "sequence"

    def _judge(self, plan: Plan, outcome: CommitOutcome, machine_id: str, claims: list[Claim],
               context: Any) -> Judged:
        fresh = outcome.fresh_machines.get(machine_id)
        seen = plan.machines[machine_id].mod_revision
        if fresh is None:
            return [], [(c, f"machine {machine_id} is gone") for c in claims]
        if fresh.mod_revision != seen:
            why = f"machine {machine_id} changed (revision {seen} -> {fresh.mod_revision})"
            return [], [(c, why) for c in claims]
        return claims, []


class ResourceFitConflicts(_ConflictStrategy):
    """Claims on a changed machine are re-checked in order against its fresh free resources."""

    label = "resource-fit"

    def _context(self, plan: Plan, outcome: CommitOutcome) -> bool:
        return _spread_rules_at_risk(plan, outcome)

    def _judge(self, plan: Plan, outcome: CommitOutcome, machine_id: str, claims: list[Claim],
               spread_at_risk: bool) -> Judged:
        fresh = outcome.fresh_machines.get(machine_id)
        seen = plan.machines[machine_id].mod_revision
        if fresh is not None and fresh.mod_revision == seen:
            return claims, []
        if fresh is None:
            return [], [(c, f"machine {machine_id} is gone") for c in claims]
        if fresh.machine.state != MachineState.UP:
            return [], [(c, f"machine {machine_id} is {fresh.machine.state}") for c in claims]
        if spread_at_risk:
            why = f"job {plan.job.id} was placed elsewhere concurrently; its spread must be re-decided"
            return [], [(c, why) for c in claims]
        return fit_cumulatively(fresh, claims)

    def stale(self, plan: Plan, outcome: CommitOutcome, split: ConflictSplit) -> bool:
        fresh = outcome.fresh_job
        return (not split.rejected and not split.dropped and fresh is not None
                and fresh.mod_revision == plan.job.mod_revision)


def _spread_rules_at_risk(plan: Plan, outcome: CommitOutcome) -> bool:
    """True when other tasks of a job with per-machine rules were placed since the plan's view."""
    spec = plan.job.record.job
    if not (spec.different_machine or spec.max_per_machine) or outcome.fresh_job is None:
        return False
    before, after = plan.job.record.tasks, outcome.fresh_job.record.tasks
    if before == after:
        return False
    # Per task, in C: a 1 byte where it was pending before / is live after; any common 1?
    n = min(len(before), len(after))
    was_pending = before[:n].encode("latin-1").translate(_PENDING)
    now_live = after[:n].encode("latin-1").translate(_LIVE)
    return int.from_bytes(was_pending) & int.from_bytes(now_live) != 0


_PENDING = bytes(int(chr(i) == "p") for i in range(256))
_LIVE = bytes(int(chr(i) in "ar") for i in range(256))


def fit_cumulatively(fresh: MachineEntry, claims: list[Claim],
                     victim_allocs: Mapping[tuple[str, int], AllocEntry] | None = None) -> Judged:
    """Split ``claims`` on one machine into those that fit its ledger one after another and
    (claim, reason) for the rest. An evicting claim is credited with its victims' resources
    (from ``victim_allocs``, those on this machine); a rejected one evicts nothing. On a
    machine that is down every claim is rejected (its free room is no room; whether a draining
    machine takes tasks is the scheduler's policy: ``machine_state``'s ``accept``)."""
    if fresh.machine.state is MachineState.DOWN:
        return [], [(claim, f"machine {fresh.id} is down") for claim in claims]
    free = fresh.machine.free
    kept, rejected = [], []
    last = len(claims) - 1
    for i, claim in enumerate(claims):
        room = free
        if claim.evicts and victim_allocs is not None:
            for task in claim.evicts:
                victim = victim_allocs.get(task)
                if victim is not None and victim.alloc.machine_id == fresh.id:
                    room = room + victim.alloc.resources
        request = claim.request
        if request.extra:  # a GPU ask is held by devices with room, else bound anew (cellstate.devices)
            bound = bind_in(request, room)
            if bound is None:
                rejected.append((claim, f"machine {fresh.id} has no GPU device with room for gpu {request.get('gpu')}"))
                continue
            if bound is not request:
                claim, request = Claim(claim.task_index, claim.machine_id, bound, claim.evicts), bound
        short = request.shortfall(room)
        if short is None:
            kept.append(claim)
            if i < last:  # (what the last claim leaves is never read)
                free = room - request
        else:
            rejected.append((claim, f"machine {fresh.id} no longer has enough {short}"))
    return kept, rejected


def drop_unfit(plan: Plan) -> tuple[Plan, list[int]]:
    """The plan without the claims that no longer fit the ledgers it carries, and their tasks.
    A plan's ledgers are the view's when it is made, after the decision: other schedulers may
    have placed tasks on its machines meanwhile (or, for a decision committed in several
    transactions, a conflict resolved in an earlier chunk brought in their claims), or a
    machine failed, so its claims are checked again before they go out (they go back to the
    scheduler otherwise; the committer would refuse the plan). An evicting claim is checked
    with its victims' resources freed: their revisions guard only the victims, not the room."""
    by_machine: dict[str, list[Claim]] = {}
    for claim in plan.claims:
        by_machine.setdefault(claim.machine_id, []).append(claim)
    unfit: set[int] = set()
    victim_allocs = plan.victim_allocs
    rebound: dict[int, Claim] = {}  # task -> its kept claim, devices bound (anew or as they were)
    for machine_id, claims in by_machine.items():
        kept_here, rejected = fit_cumulatively(plan.machines[machine_id], claims, victim_allocs)
        unfit.update(claim.task_index for claim, _ in rejected)
        rebound.update((c.task_index, c) for c in kept_here if c.request.extra)  # (claims bound to devices)
    if rebound:
        plan = replace(plan, claims=tuple(rebound.get(c.task_index, c) for c in plan.claims))
    if not unfit:
        return plan, []
    kept = tuple(c for c in plan.claims if c.task_index not in unfit)
    used = {c.machine_id for c in kept}
    machines = {mid: entry for mid, entry in plan.machines.items() if mid in used}
    victims, victim_allocs = victims_of(kept, plan.victims, victim_allocs)
    return (replace(plan, claims=kept, machines=machines, victims=victims, victim_allocs=victim_allocs),
            [c.task_index for c in plan.claims if c.task_index in unfit])


def victims_of(claims: Iterable[Claim], victims: dict[str, JobEntry],
               victim_allocs: dict[tuple[str, int], AllocEntry]
               ) -> tuple[dict[str, JobEntry], dict[tuple[str, int], AllocEntry]]:
    """The entries of ``victims`` (by job id) and ``victim_allocs`` (by task) that ``claims``
    evict: what a plan left with only those claims compares."""
    evicted = {task for c in claims for task in c.evicts}
    jobs = {job_id for job_id, _ in evicted}
    return ({job_id: entry for job_id, entry in victims.items() if job_id in jobs},
            {task: entry for task, entry in victim_allocs.items() if task in evicted})


class IncrementalCommits:
    """Keep whatever is valid; split plans larger than one transaction."""

    label = "incremental"

    def admit(self, job: JobEntry, tasks: list[int], decision: Decision) -> Decision:
        return decision

    def chunks(self, job: JobEntry, claims: list[Claim], limit: int) -> list[list[Claim]]:
        return [claims[i:i + limit] for i in range(0, len(claims), limit)]

    def resolve(self, split: ConflictSplit) -> Resolution:
        return Resolution(split.kept, tuple(c.task_index for c, _ in split.rejected))

    def fitting(self, plan: Plan, dropped: bool = False) -> tuple[Plan, list[int]]:
        """``drop_unfit(plan)``: the claims that still fit go out, the others go back."""
        return drop_unfit(plan)


class AllOrNothingCommits:
    """Gang: every task of the job in one transaction, or none."""

    label = "all-or-nothing"

    def admit(self, job: JobEntry, tasks: list[int], decision: Decision) -> Decision:
        """The decision if it places every task, else no claims and one reason for all tasks."""
        claimed = {c.task_index for c in decision.claims}
        if claimed == set(tasks):
            return decision
        first = next(iter(decision.unplaced.values()), "not every task was placed")
        why = f"gang of {len(tasks)} tasks: only {len(claimed)} fit ({first})"
        return Decision([], {i: why for i in tasks})

    def chunks(self, job: JobEntry, claims: list[Claim], limit: int) -> list[list[Claim]]:
        check_gang_size(job, len(claims), limit)
        return [claims]

    def fitting(self, plan: Plan, dropped: bool = False) -> tuple[Plan, list[int]]:
        """``plan`` if every claim still fits (and, ``dropped``, none was left out before);
        else no claims, and every task goes back."""
        fitting, unfit = drop_unfit(plan)
        if not (unfit or dropped):
            return fitting, []
        back = unfit + [c.task_index for c in fitting.claims]
        return replace(fitting, claims=(), machines={}, victims={}, victim_allocs={}), back

    def resolve(self, split: ConflictSplit) -> Resolution:
        if split.rejected or split.dropped:
            everything = (*split.kept, *(c for c, _ in split.rejected), *split.dropped)
            return Resolution((), tuple(c.task_index for c in everything))
        return Resolution(split.kept, ())


def check_gang_size(job: JobEntry, tasks: int, limit: int) -> None:
    """PlanTooLarge naming the job, its task count and the limit when a gang cannot fit one txn."""
    if tasks > limit:
        raise PlanTooLarge(f"gang job {job.id!r} has {tasks} tasks to place, but one transaction holds "
                           f"at most {limit} claims; it can never be committed all-or-nothing "
                           f"(raise the store's max_txn_ops or split the job)")


class ConflictMode(Enum):
    SEQUENCE = SequenceConflicts()
    RESOURCE_FIT = ResourceFitConflicts()

    @property
    def strategy(self) -> _ConflictStrategy:
        return cast(_ConflictStrategy, self._value_)  # the member's value, without Enum's ``value`` property

    @classmethod
    def parse(cls, text: str) -> ConflictMode:
        return _parse(cls, text)


class CommitMode(Enum):
    INCREMENTAL = IncrementalCommits()
    ALL_OR_NOTHING = AllOrNothingCommits()

    @property
    def strategy(self) -> IncrementalCommits | AllOrNothingCommits:
        return cast("IncrementalCommits | AllOrNothingCommits", self._value_)  # the member's value, without Enum's ``value`` property

    @classmethod
    def parse(cls, text: str) -> CommitMode:
        return _parse(cls, text)


_Mode = TypeVar("_Mode", "ConflictMode", "CommitMode")


def _parse(enum: type[_Mode], text: str) -> _Mode:
    """The member whose label (or name) is ``text``; ValueError listing the choices."""
    for member in enum:
        if text in (member.value.label, member.name, member.name.lower()):
            return member
    choices = ", ".join(m.value.label for m in enum)
    raise ValueError(f"unknown {enum.__name__} {text!r}; choose one of {choices}")
