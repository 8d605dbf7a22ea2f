"""The plan arithmetic of a commit, pure: what a plan touches (``touched_machines``,
``collateral``), whether it is consistent (``check_plan``), the ledgers, job record and victim
records it leads to (``new_ledgers``, ``updated_record``, ``victim_records``), whether its
record need not be written (``guarded``, ``record_free``) and the one-line reason of what stays
pending (``summarize_reasons``). ``StoreCommitter`` and ``GangCommits`` build their txns from it
(docs/CELLSTATE.md)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from operator import itemgetter

from cellstate.devices import binding_problem
from cellstate.fastbuild import builder
from cellstate.model import JobRecord, Machine, MachineState, TaskState, with_states
from cellstate.plan import Plan, PlanRejected
from cellstate.resources import Resources

MAX_REASON_CHARS = 400
_MACHINE, _RESOURCES = builder(Machine), builder(Resources)
_DOWN = MachineState.DOWN


def summarize_reasons(unplaced: dict[int, str]) -> str:
    """One line for a job record: the distinct reasons, most frequent first, with task counts."""
    if not unplaced:
        return ""
    reasons = list(unplaced.values())
    if reasons.count(reasons[0]) == len(reasons):  # one reason for all (C-level, by identity first)
        counts = [(reasons[0], len(reasons))]
    else:
        counts = Counter(reasons).most_common()
    parts = [f"{n} task{'s' if n > 1 else ''}: {reason}" for reason, n in counts]
    text = "; ".join(parts)
    return text if len(text) <= MAX_REASON_CHARS else text[:MAX_REASON_CHARS - 1] + "…"


def guarded(plan: Plan) -> bool:
    """True for a plan with claims of a job that is not a gang: its claims are guarded per task
    (alloc keys and the kill marker compared missing, read back on failure)."""
    return bool(plan.claims) and not plan.job.record.job.gang


def record_free(plan: Plan, record: JobRecord) -> bool:
    """True when ``plan`` (``guarded``) need not write its job record: ``record``, its
    ``updated_record``, differs from the seen record only in task states (the claimed tasks
    are placed by their allocs alone: ``model.effective_tasks``)."""
    if not guarded(plan):
        return False
    seen = plan.job.record
    return (record.reason == seen.reason and record.first_attempt_at == seen.first_attempt_at
            and record.placed_at == seen.placed_at and record.killed == seen.killed)


def touched_machines(plan: Plan) -> list[str]:
    """Machine ids the plan's claims use, in first-use order, then those of its ``collateral``
    evictions (``new_ledgers``' order)."""
    ids = dict.fromkeys(claim.machine_id for claim in plan.claims)
    if plan.victim_allocs:
        for task in collateral(plan):
            ids.setdefault(plan.victim_allocs[task].alloc.machine_id)
    return list(ids)


def collateral(plan: Plan) -> list[tuple[str, int]]:
    """The victim allocations no claim evicts: the rest of a gang one of whose members a claim
    evicts, evicted in the same txn (a gang runs whole or not at all, docs/GANGS.md); their
    machines are in ``plan.machines``, compared and released like a claim's."""
    if not plan.victim_allocs:
        return []
    named = {task for claim in plan.claims for task in claim.evicts}
    return [task for task in plan.victim_allocs if task not in named]


def check_plan(plan: Plan) -> None:
    """ValueError naming the job and the problem unless the plan is self-consistent."""
    record = plan.job.record
    seen: set[int] = set()
    evicted: set[tuple[str, int]] = set()
    tasks, states, machines = record.job.tasks, record.tasks, plan.machines
    for claim in plan.claims:
        index = claim.task_index
        if 0 <= index < tasks and index not in seen and states[index] == "p" and claim.machine_id in machines \
                and not claim.evicts:
            seen.add(index)  # the usual claim: checked without naming it
            continue
        where = f"plan of {plan.scheduler!r} for job {record.id!r}: task {index}"
        if not 0 <= index < tasks:
            raise ValueError(f"{where} is out of range (job has {tasks} tasks)")
        if index in seen:
            raise ValueError(f"{where} is claimed twice")
        seen.add(index)
        if states[index] != TaskState.PENDING.value:
            raise ValueError(f"{where} is not pending (state {states[index]!r})")
        if claim.machine_id not in machines:
            raise ValueError(f"{where} is on machine {claim.machine_id!r}, which the plan has no ledger of")
        for job_id, task in claim.evicts:
            _check_victim(plan, job_id, task, where, claim.machine_id)
            if (job_id, task) in evicted:
                raise ValueError(f"{where} evicts {job_id}/{task}, which another claim evicts too")
            evicted.add((job_id, task))
    if len(plan.victim_allocs) > len(evicted):
        for job_id, task in collateral(plan):
            where = f"plan of {plan.scheduler!r} for job {record.id!r}: the rest of gang {job_id!r}"
            victim = plan.victims.get(job_id)
            if victim is None or not victim.record.job.gang:
                raise ValueError(f"{where}: allocation {job_id}/{task} is evicted by no claim and is not of a "
                                 f"gang victim of the plan")
            _check_victim(plan, job_id, task, where, plan.victim_allocs[(job_id, task)].alloc.machine_id)


def _check_victim(plan: Plan, job_id: str, task: int, where: str, machine_id: str) -> None:
    victim = plan.victims.get(job_id)
    if job_id == plan.job.id or victim is None:
        raise ValueError(f"{where} evicts {job_id}/{task}, but the plan carries no victim record "
                         f"of job {job_id!r}")
    if victim.id != job_id:
        raise PlanRejected(f"{where} evicts {job_id}/{task}, but the plan files job {victim.id!r} under {job_id!r}")
    if not 0 <= task < victim.record.job.tasks or victim.record.tasks[task] not in "ar":
        raise ValueError(f"{where} evicts {job_id}/{task}, which is not placed or running")
    seen = plan.victim_allocs.get((job_id, task))
    if seen is None:
        raise ValueError(f"{where} evicts {job_id}/{task}, but the plan carries no allocation of it")
    if seen.alloc.job_id != job_id or seen.alloc.task_index != task:
        raise PlanRejected(f"{where} evicts {job_id}/{task}, but the plan files the alloc of "
                           f"{seen.alloc.job_id}/{seen.alloc.task_index} under it")
    if seen.alloc.machine_id != machine_id:
        raise PlanRejected(f"{where} evicts {job_id}/{task} to make room on {machine_id!r}, but that "
                           f"task runs on {seen.alloc.machine_id!r}")


def new_ledgers(plan: Plan) -> dict[str, Machine]:
    """Each touched machine's ledger after the plan: seen + claims - evicted tasks, written by
    the plan's scheduler."""
    # Sums first, one new Machine per machine at the end: the commit's hot path (building a
    # Machine costs more than the arithmetic).
    totals: dict[str, list] = {}
    for claim in plan.claims:
        entry = totals.get(claim.machine_id)
        if entry is None:
            seen = plan.machines[claim.machine_id].machine
            if seen.id != claim.machine_id:  # the ledger written is the key compared: never another's
                raise PlanRejected(f"plan of {plan.scheduler!r} for job {plan.job.id!r} files machine {seen.id!r} "
                                   f"under {claim.machine_id!r}: its ledger would not be the key compared")
            totals[claim.machine_id] = entry = [seen, seen.allocated, seen.task_count]
        if claim.request.extra:
            problem = binding_problem(claim.request, entry[0].capacity)
            if problem is not None:
                raise PlanRejected(f"plan of {plan.scheduler!r} for job {plan.job.id!r}: task {claim.task_index} on "
                                   f"machine {claim.machine_id!r}: {problem}")
        entry[1] = _plus(entry[1], claim.request)
        entry[2] += 1
        for victim in claim.evicts:
            entry[1] = entry[1] - plan.victim_allocs[victim].alloc.resources
            entry[2] -= 1
    if plan.victim_allocs:
        for task in collateral(plan):  # the rest of an evicted gang, released on its machines
            alloc = plan.victim_allocs[task].alloc
            entry = totals.get(alloc.machine_id)
            if entry is None:
                seen = plan.machines.get(alloc.machine_id)
                if seen is None or seen.machine.id != alloc.machine_id:
                    raise PlanRejected(f"plan of {plan.scheduler!r} for job {plan.job.id!r} evicts "
                                       f"{task[0]}/{task[1]} on machine {alloc.machine_id!r} without its ledger")
                totals[alloc.machine_id] = entry = [seen.machine, seen.machine.allocated, seen.machine.task_count]
            entry[1] = entry[1] - alloc.resources
            entry[2] -= 1
    for seen, allocated, count in totals.values():
        _check_ledger(plan, seen, allocated, count)
    writer = plan.scheduler
    return {mid: _MACHINE(seen.id, seen.capacity, seen.zone, seen.rack, seen.platform, seen.packages, seen.labels,
                          seen.state, allocated, count, writer)  # replace(seen, ...), without its cost
            for mid, (seen, allocated, count) in totals.items()}


def _plus(a: Resources, b: Resources) -> Resources:
    """``a + b``; built directly when neither has extra resources (the usual case)."""
    if a.extra or b.extra:
        return a + b
    return _RESOURCES(a.cpu + b.cpu, a.memory + b.memory, a.disk + b.disk, ())


def _check_ledger(plan: Plan, seen: Machine, allocated, count: int) -> None:
    """PlanRejected unless the machine is not down and the new ledger fits it: a plan never
    places on a down machine and never overcommits, whatever its scheduler decided (defence in
    depth behind every scheduler's own checks; a draining machine is the scheduler's policy)."""
    capacity = seen.capacity
    if (seen.state is not _DOWN and count >= 0 and not allocated.extra and not capacity.extra
            and 0 <= allocated.cpu <= capacity.cpu and 0 <= allocated.memory <= capacity.memory
            and 0 <= allocated.disk <= capacity.disk):
        return  # the common case, decided without building names
    if seen.state is _DOWN:
        raise PlanRejected(f"plan of {plan.scheduler!r} for job {plan.job.id!r} places tasks on machine "
                           f"{seen.id!r}, which is {seen.state}")
    short = allocated.shortfall(capacity)
    if short is not None or allocated.is_negative() or count < 0:
        raise PlanRejected(
            f"plan of {plan.scheduler!r} for job {plan.job.id!r} would leave machine {seen.id!r} with "
            f"ledger {allocated.to_dict()} ({count} tasks) against capacity {seen.capacity.to_dict()}")


def updated_record(plan: Plan) -> JobRecord:
    """The plan's job with claimed tasks 'a', the reason for what stays pending, and times."""
    seen = plan.job.record
    tasks = seen.tasks
    if plan.claims:  # (a reason write keeps the task states)
        tasks = with_states(tasks, [claim.task_index for claim in plan.claims], "a")  # TaskState.PLACED
    first = seen.first_attempt_at if seen.first_attempt_at is not None else plan.now
    placed = seen.placed_at
    if placed is None and "p" not in tasks and not seen.killed:  # no pending task left
        placed = plan.now
    reason = summarize_reasons(_still_pending(plan.unplaced, tasks))
    return seen.with_progress(tasks, reason, first, placed)


def _still_pending(unplaced: dict[int, str], tasks: str) -> dict[int, str]:
    """The entries of ``unplaced`` (by task index) whose task is pending in ``tasks``: usually
    all of them (a scheduler reports the pending tasks it could not place, often every one),
    found with C-level loops (``itemgetter`` and ``tuple.count``) before a filtering pass
    over thousands of tasks."""
    if len(unplaced) > 1:
        states = itemgetter(*unplaced)(tasks)
        if states.count("p") == len(states):
            return unplaced
    return {i: r for i, r in unplaced.items() if tasks[i] == "p"}


def victim_records(plan: Plan) -> dict[str, JobRecord]:
    """Victim job records with their evicted tasks back to pending."""
    evicted: dict[str, list[int]] = {}
    for claim in plan.claims:
        for job_id, task in claim.evicts:
            evicted.setdefault(job_id, []).append(task)
    rest = collateral(plan)
    for job_id, task in rest:
        evicted.setdefault(job_id, []).append(task)
    if rest:  # a gang evicted whole says why
        gangs = {job_id for job_id, _ in rest}
        return {job_id: replace(plan.victims[job_id].record.with_tasks(tasks, TaskState.PENDING),
                                reason=f"gang member preempted by job {plan.job.id!r}: the whole gang is evicted")
                if job_id in gangs else plan.victims[job_id].record.with_tasks(tasks, TaskState.PENDING)
                for job_id, tasks in evicted.items()}
    return {job_id: plan.victims[job_id].record.with_tasks(tasks, TaskState.PENDING)
            for job_id, tasks in evicted.items()}
