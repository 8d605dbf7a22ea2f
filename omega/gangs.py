"""Gangs larger than one transaction: reserved in chunks, placed all at once.

An all-or-nothing job whose pending tasks do not fit one txn's claims (or that carries
reservations left by a scheduler that died: allocations of pending tasks) is placed through
the committer's ``gangs`` (``omega.protocols.GangCommitter``):

  1. hold the job: its gang key, on a lease of ours sized to outlive the decision (``lease_ttl``:
     twice the expected decision time, from the host's ``expect`` or the slowest gang decision
     per task seen so far; held by another: the job waits);
  2. release any reservation left (a dead scheduler's: allocations of tasks not placed or
     running), under our hold, so nothing of it can land afterwards;
  3. decide every pending task on the view pinned at the job's revision; all or nothing;
  4. reserve the claims in chunks of the committer's claims per txn; a chunk compares the
     machines (resource-fit rebasing as for a placement: claims that still fit go again at
     once), the job's revision and our gang key; claims that no longer fit are decided again
     on the fresh view, the reserved ones stay; bounded by the retry policy;
  5. finish: one txn puts the job record with every task 'a' and deletes the gang key.

The lease is refreshed once the decision is made and before every chunk; a lease that ended
during the decision ends the attempt with the reason "reservation expired before commit", and the
next attempt's lease covers the decision time seen. Before the finish the job's tasks stay
pending: no partial gang is ever visible as placed.
Anything else (a change of the job record, the hold lost, giving up, an error) releases the
reservations and the hold; a scheduler that dies leaves them to its lease's expiry and to the
next scheduler that takes the job (step 2). docs/CELLSTATE.md has the transactions.
"""

from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING

from cellstate.fastbuild import builder
from cellstate.resources import Resources
from omega.attempts import AttemptOutcome, classify
from omega.modes import CommitMode, drop_unfit
from cellstate.plan import Claim, GangHold, JobEntry, Plan, PlanTooLarge
from omega.protocols import Decision, GangCommitter, PlacementView

if TYPE_CHECKING:
    from omega.occ import OptimisticPlacer
    from omega.placement import PlacementRun, PlacementAttempt

_PLAN = builder(Plan)


def has_reservations(view: PlacementView, entry: JobEntry) -> bool:
    """True when the view holds an allocation of one of the job's pending tasks (a reservation,
    maybe orphaned by a scheduler that died)."""
    states = entry.record.tasks
    n = len(states)
    return any(a.task_index < n and states[a.task_index] == "p" for a in view.allocs_of(entry.id))


def partly_running(entry: JobEntry) -> bool:
    """True when some of the job's tasks are placed or running and some pending (a gang that lost
    a member; not killed)."""
    tasks = entry.record.tasks
    return not entry.record.killed and "p" in tasks and ("a" in tasks or "r" in tasks)


class _Abort(Exception):
    """The reservation cannot go on (job changed or gone, hold lost): release, retry later.
    ``reason``: why, for the tasks, when it is worth stating (the lease ended)."""

    def __init__(self, reason: str = "") -> None:
        super().__init__(reason)
        self.reason = reason


def tasks_per_machine(capacity: Resources, request: Resources) -> int:
    """How many tasks of ``request`` an empty machine of ``capacity`` holds (a large number when the
    request asks for nothing)."""
    counts = [capacity.get(name) // request.get(name) for name in request.names() if request.get(name) > 0]
    return min(counts) if counts else 1 << 30


def cell_room(view: PlacementView, request: Resources, tasks: int) -> tuple[int, int, int]:
    """(up machines, how many of them hold tasks, how many of ``tasks`` tasks of ``request`` the
    up machines would hold were they empty, counting to ``tasks`` at most)."""
    up = busy = room = 0
    for entry in view.machines():
        machine = entry.machine
        if machine.state.value != "up":
            continue
        up += 1
        busy += machine.task_count > 0
        if room < tasks:
            room += tasks_per_machine(machine.capacity, request)
    return up, busy, min(room, tasks)


def with_cell_state(view: PlacementView, entry: JobEntry, tasks: list[int], decision: Decision) -> Decision:
    """An all-or-nothing refusal (no claims) with the cell's state appended to its reason: the
    machines up and busy, and when the gang is wider than the empty cell, that it never fits."""
    if decision.claims or not decision.unplaced:
        return decision
    up, busy, room = cell_room(view, entry.record.job.request, len(tasks))
    state = (f"the cell has {up} machines up, {busy} busy" if room >= len(tasks) else
             f"never fits: the cell's {up} up machines hold {room} such tasks even empty")
    why = f"{next(iter(decision.unplaced.values()))}; {state}"
    return Decision([], dict.fromkeys(decision.unplaced, why))


_EXPIRED = "reservation expired before commit (the hold's lease of {ttl} s ended between chunks)"


def lease_ttl(placer: OptimisticPlacer, tasks: int) -> int:
    """Seconds of the gang lease for deciding ``tasks`` tasks: twice the expected decision time
    plus one (the committer adds its own minimum): the host's ``expect(tasks)`` when it has one (a
    replay's modelled time), else the slowest gang decision per task this placer has seen."""
    expect = placer.expect
    expected = expect(tasks) if expect is not None else placer.gang_s_per_task * tasks
    return int(math.ceil(2.0 * max(0.0, expected))) + 1


def place_in_chunks(gangs: GangCommitter, attempt: PlacementAttempt, entry: JobEntry) -> bool:
    """One attempt of a gang through ``gangs`` (the placer's committer's; see the module
    docstring). True when there is nothing to retry (placed, nothing fits, held by another, given up)."""
    placer, st, tasks = attempt.placer, attempt.placement, attempt.tasks
    hold = gangs.begin(entry, placer.scheduler, placer.clock.now(), lease_ttl(placer, len(tasks)))
    if hold is None:  # another scheduler is reserving it (or its hold has not expired yet)
        attempt.emit(AttemptOutcome.NOTHING_FITS)
        return True
    placed = finished = False
    try:
        for outcome in gangs.release(hold):  # what a dead scheduler left
            st.view.apply_outcome(outcome)
        finished, placed = _reserve_and_finish(gangs, hold, attempt)
    except _Abort as abort:
        finished = False
        if abort.reason:
            st.conflicts.update(dict.fromkeys(tasks, abort.reason))
    finally:
        if not placed:
            _release(gangs, hold, st.view)
    tally = attempt.tally
    if placed:
        st.no_progress = 0
        attempt.claims = tuple(tally.committed)
        attempt.record_committed()
    elif not finished:
        st.no_progress += 1
        st.todo = list(tasks)
    attempt.emit(classify(attempt.claims, tuple(tally.committed)))
    if finished and not placed and st.unplaced and not st.job_gone:
        fresh = st.view.job(st.job_id)
        if fresh is not None:
            attempt.write_reason(fresh)  # (after the record: not one of the attempt's txns)
    return finished or placed


def _release(gangs: GangCommitter, hold: GangHold, view: PlacementView) -> None:
    """Release every reservation of the hold and end it; while an error propagates, an error
    here is dropped (the lease's expiry and the next holder release instead)."""
    propagating = sys.exc_info()[0] is not None
    try:
        for outcome in gangs.release(hold):
            view.apply_outcome(outcome)
        gangs.end(hold)
    except Exception:
        if not propagating:
            raise


def _reserve_and_finish(gangs: GangCommitter, hold: GangHold, attempt: PlacementAttempt) -> tuple[bool, bool]:
    """(finished, placed)."""
    placer, st, tally = attempt.placer, attempt.placement, attempt.tally
    view = st.view
    entry = view.job(st.job_id)
    if entry is None:
        st.job_gone = True
        return True, False
    pinned = entry.mod_revision  # the job must stay at this revision until the finish
    tasks = [i for i in attempt.tasks if entry.record.tasks[i] == "p"] if not entry.record.killed else []
    if not tasks:
        return True, False
    strategy = CommitMode.ALL_OR_NOTHING.strategy
    decision, elapsed = attempt.decide(entry, tasks)
    placer.gang_s_per_task = max(placer.gang_s_per_task, elapsed / len(tasks))
    decision = with_cell_state(view, entry, tasks, strategy.admit(entry, tasks, decision))
    attempt.decision_time_s += elapsed
    if decision.claims and not gangs.keep_alive(hold):
        raise _Abort(f"reservation expired before commit (the decision took {elapsed:.2f} s, "
                     f"the lease {hold.ttl} s)")
    attempt.claims = tuple(decision.claims)
    st.unplaced.update(decision.unplaced)
    if not decision.claims:
        return True, False
    if any(c.evicts for c in decision.claims):
        raise PlanTooLarge(f"gang job {st.job_id!r} has {len(tasks)} tasks to place, more than one transaction "
                           f"holds, and a reservation in chunks cannot evict tasks")
    reserved: dict[int, Claim] = {}
    todo = list(decision.claims)
    limit = gangs.max_claims_per_txn
    idle = 0
    while todo:
        redo: list[int] = []
        for i in range(0, len(todo), limit):
            redo += _reserve_chunk(gangs, hold, attempt, pinned, todo[i:i + limit], reserved)
        if not redo:
            break
        idle = 0 if len(reserved) > 0 and len(redo) < len(todo) else idle + 1
        if placer.retry.exhausted(idle):
            for task in redo:
                st.unplaced[task] = f"gave up reserving the gang ({st.conflicts.get(task, 'conflicting commits')})"
            return True, False
        entry = _pinned(st, pinned)
        decision, elapsed = attempt.decide(entry, sorted(redo))
        attempt.decision_time_s += elapsed
        claimed = {c.task_index for c in decision.claims}
        if claimed != set(redo):
            first = next(iter(decision.unplaced.values()), "not every task was placed")
            why = f"gang of {len(tasks)} tasks: only {len(reserved) + len(claimed)} fit ({first})"
            st.unplaced.update({i: why for i in tasks})
            return True, False
        todo = list(decision.claims)
    entry = _pinned(st, pinned)
    claims = tuple(reserved[i] for i in tasks)
    for task in tasks:
        st.unplaced.pop(task, None)
    plan = _PLAN(entry, claims, {}, placer.scheduler, dict(st.unplaced), placer.clock.now(), {}, {})
    outcome = gangs.finish(hold, plan)
    view.apply_outcome(outcome)
    tally.transactions += 1
    if not outcome.committed:
        tally.failed += 1
        tally.job_conflicts += 1
        raise _Abort()
    tally.committed.extend(claims)
    return True, True


def _pinned(st: PlacementRun, pinned: int) -> JobEntry:
    """The job as the reservation began; _Abort when it is gone or changed since."""
    entry = st.view.job(st.job_id)
    if entry is None:
        st.job_gone = True
        raise _Abort()
    if entry.mod_revision != pinned:
        raise _Abort()
    return entry


def _reserve_chunk(gangs: GangCommitter, hold: GangHold, attempt: PlacementAttempt, pinned: int,
                   claims: list[Claim], reserved: dict[int, Claim]) -> list[int]:
    """Reserve ``claims`` (one txn, retried at once with the claims that still fit after a
    conflict); the tasks to decide again."""
    placer, st, tally = attempt.placer, attempt.placement, attempt.tally
    _pinned(st, pinned)
    found, gone = placer.plan_of(st, claims)
    redo = list(gone)
    if found is None:
        raise _Abort()
    plan: Plan | None
    plan, back = drop_unfit(found)
    redo += back
    for _ in range(placer.retry.max_attempts):
        if plan is None or not plan.claims:
            return redo
        if plan.job.mod_revision != pinned:
            raise _Abort()
        plan = attempt.refreshed(plan)
        if hold.reserved and not gangs.keep_alive(hold):
            raise _Abort(_EXPIRED.format(ttl=hold.ttl))
        outcome, lost = gangs.reserve(hold, plan)
        st.view.apply_outcome(outcome)
        tally.transactions += 1
        if outcome.committed:
            reserved.update((c.task_index, c) for c in plan.claims)
            return redo
        tally.failed += 1
        fresh = outcome.fresh_job
        if lost or fresh is None or fresh.mod_revision != pinned:
            tally.job_conflicts += 1
            raise _Abort(_EXPIRED.format(ttl=hold.ttl) if lost else "")
        before = len(tally.redecide)
        plan = attempt.resolve(CommitMode.INCREMENTAL, plan, outcome)
        redo += tally.redecide[before:]
        del tally.redecide[before:]
        if plan is None:
            raise _Abort()
    if plan is not None:
        redo += [c.task_index for c in plan.claims]
    return redo
