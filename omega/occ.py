"""The optimistic placement loop (Omega §3.4): decide on a private view, commit, resolve conflicts.

One *attempt* = one decision by the scheduler and the transactions it leads to:
  1. read the job from the view; pick the tasks to decide (all pending tasks the first time,
     or for a gang; afterwards only the tasks sent back by the commit mode);
  2. ``decide(job_entry, tasks, view)`` → claims and reasons for the tasks left out;
  3. commit the claims in transactions of at most ``committer.max_claims_per_txn`` claims
     (incremental: split; all-or-nothing: one txn, or, for a gang larger than one txn,
     reservations in chunks made final by one last txn through the committer's ``gangs``,
     ``omega.gangs``; ``PlanTooLarge`` without them); after each txn the
     view takes in the outcome (``apply_outcome``);
  4. on a failed txn the conflict mode splits the claims against the fresh state read in
     the same round trip; the commit mode says which to retry at once (rebased on the fresh
     revisions) and which tasks go back to the scheduler. The failed txn counts as a
     conflict, or as a stale retry when nothing really conflicted (``omega.modes``).
With an ``expect`` (a replay's modelled decision time for n tasks), a gang reserved in chunks
holds its job on a lease sized from it (``omega.gangs.lease_ttl``).
With a ``pace`` (a replay's modelled decision time), the decision's time passes as it goes:
``pace(k)`` before each txn of k claims, ``pace(0)`` once its txns are over (the rest);
without one, all of it passed inside ``decide``.
Attempts repeat (tenacity) while tasks are sent back, up to ``retry.max_attempts`` attempts
in a row without progress, with jittered exponential backoff slept on the injected clock.
The first attempt is made before tenacity's loop (most placements end there), which then
starts from its outcome, as if it had made it.
Whatever stays pending keeps a reason in the job record: nothing is lost.
One placement's state and each attempt are explicit objects (``omega.placement``: ``PlacementRun``,
``PlacementAttempt``), which this incremental strategy and the gang strategy (``omega.gangs``)
drive through their public methods.
"""

from __future__ import annotations

from typing import Callable

from tenacity import Retrying, retry_if_result

from cellstate.fastbuild import builder
from omega.attempts import Attempt, AttemptOutcome, PlacementResult, classify
from omega.gangs import has_reservations, partly_running, place_in_chunks, with_cell_state
from omega.modes import CommitMode, ConflictMode, check_gang_size, victims_of
from cellstate.plan import AllocEntry, Claim, JobEntry, MachineEntry, Plan, PlanTooLarge
from omega.placement import PlacementRun, PlacementAttempt, Tally
from omega.protocols import Clock, Committer, Decide, Decision, PlacementView
from omega.retry import RetryPolicy

# One per placement or txn, every field given: without their dataclass __init__.
_PLACEMENT_RESULT, _PLAN = builder(PlacementResult), builder(Plan)
_SEEN_KEPT = 1024  # jobs whose pending tasks are kept between placements


class OptimisticPlacer:
    """Places jobs for scheduler ``scheduler_name`` through ``committer`` (see module doc).
    A job with ``gang=True`` is always committed all-or-nothing."""

    def __init__(self, scheduler_name: str, committer: Committer, conflict_mode: ConflictMode,
                 commit_mode: CommitMode, retry: RetryPolicy, clock: Clock,
                 on_attempt: Callable[[Attempt], None] | None = None,
                 refresh: Callable[[], object] | None = None,
                 pace: Callable[[int], object] | None = None,
                 expect: Callable[[int], float] | None = None):
        if not isinstance(conflict_mode, ConflictMode) or not isinstance(commit_mode, CommitMode):
            raise TypeError(f"conflict_mode and commit_mode must be ConflictMode and CommitMode members, "
                            f"got {conflict_mode!r} and {commit_mode!r}")
        self.scheduler = scheduler_name
        self.committer = committer
        self.conflict_mode = conflict_mode
        self.commit_mode = commit_mode
        self.retry = retry
        self.clock = clock
        self.on_attempt = on_attempt
        self.refresh = refresh
        self.pace = pace
        self.expect = expect  # expected decision seconds for n tasks (a replay's model): gang leases
        self.gang_s_per_task = 0.0  # the slowest gang decision seen, per task (gang leases without expect)
        self._gangs = committer.gangs  # a GangCommitter: gangs larger than one txn
        self._seen: dict[str, tuple[str, list[int]]] = {}  # job id → (task states, pending tasks) last read
        # one loop for every placement: its stop and wait read the placement it is called with
        self._retrying = Retrying(
            stop=lambda state: retry.exhausted(state.args[0].no_progress),
            wait=lambda state: retry.backoff(state.args[0].no_progress),
            sleep=clock.sleep,
            retry=retry_if_result(lambda finished: not finished),
            retry_error_callback=lambda _: False,
        )

    def place(self, job_id: str, view: PlacementView, decide: Decide) -> PlacementResult:
        """Place the pending tasks of ``job_id``; PlanTooLarge for a gang that cannot fit one txn
        (after recording the attempt and the reason), ValueError for an inconsistent decision."""
        st = PlacementRun(job_id, view, decide)
        finished = self._attempt(st) or self._retrying(self._attempt_again, st)
        if not finished:
            self._give_up(st)
        result = self._result(st, gave_up=not finished)
        if result.job_gone or not result.pending:
            self._seen.pop(job_id, None)
        return result

    def _attempt_again(self, st: PlacementRun) -> bool:
        """What tenacity's loop calls once the first attempt left tasks to retry: its first
        call hands over that attempt's outcome (False), later calls attempt again."""
        if st.retrying:
            return self._attempt(st)
        st.retrying = True
        return False

    # -- one attempt ---------------------------------------------------------------------

    def _attempt(self, st: PlacementRun) -> bool:
        """Decide and commit once; True when there is nothing left to retry."""
        entry = st.view.job(st.job_id)
        if entry is None:
            st.job_gone = True
            return True
        mode = CommitMode.ALL_OR_NOTHING if entry.record.job.gang else self.commit_mode
        if entry.record.job.gang and self._gangs is not None and partly_running(entry):
            entry = self.evict_gang(st, entry.id, "gang partly running (a member was evicted): the whole "
                                    "gang is evicted to be placed again")
            if entry is None:
                st.job_gone = True
                return True
        pending = self._pending_of(entry)
        tasks = pending if st.todo is None or mode is CommitMode.ALL_OR_NOTHING else \
            sorted(set(st.todo) & set(pending))
        if not tasks:
            return True
        attempt = PlacementAttempt(self, st, self.clock.now(), tasks)
        if mode is CommitMode.ALL_OR_NOTHING:
            # Reservations in chunks are for gangs only: a job that is not a gang has its tasks
            # placed as soon as their allocs exist (docs/CELLSTATE.md, "Task state out of the
            # record"), so an all-or-nothing commit mode cannot reserve its tasks; larger than one
            # txn it is refused as before (PlanTooLarge).
            if self._gangs is not None and entry.record.job.gang and (
                    len(tasks) > self.committer.max_claims_per_txn or has_reservations(st.view, entry)):
                return place_in_chunks(self._gangs, attempt, entry)
            self._refuse_oversized_gang(attempt, entry)
        decision, attempt.decision_time_s = attempt.decide(entry, tasks, paced=True)
        decision = mode.strategy.admit(entry, tasks, decision)
        if entry.record.job.gang and not decision.claims:
            decision = with_cell_state(st.view, entry, tasks, decision)
        st.unplaced.update(decision.unplaced)
        attempt.claims = tuple(decision.claims)
        if not decision.claims:
            attempt.pace(0)
            attempt.write_reason(entry)
            attempt.emit(AttemptOutcome.NOTHING_FITS)
            return True
        tally = self._commit_decision(attempt, mode, decision, entry)
        st.no_progress = 0 if tally.committed else st.no_progress + 1
        st.todo = tally.redecide
        attempt.emit(classify(attempt.claims, tuple(tally.committed)))
        return tally.job_gone or not tally.redecide

    def _pending_of(self, entry: JobEntry) -> list[int]:
        """The job's pending tasks: the list last read for it while its task states are those
        (a decision that placed nothing leaves them as they were, and a job deferred is taken
        again unchanged: a job of maybe thousands of tasks; the list is only read)."""
        record = entry.record
        if record.killed:
            return []
        seen = self._seen.get(entry.id)
        if seen is not None and seen[0] == record.tasks:
            return seen[1]
        pending = record.pending_tasks()
        if len(self._seen) >= _SEEN_KEPT:
            self._seen.clear()
        self._seen[entry.id] = (record.tasks, pending)
        return pending

    def _refuse_oversized_gang(self, attempt: PlacementAttempt, entry: JobEntry) -> None:
        """PlanTooLarge (after recording the attempt and the reason) for a gang whose tasks do
        not fit one txn."""
        limit = self.committer.max_claims_per_txn
        try:
            check_gang_size(entry, len(attempt.tasks), limit)
        except PlanTooLarge as exc:
            attempt.placement.unplaced.update(
                {i: f"gang too large for one transaction (limit {limit} tasks)" for i in attempt.tasks})
            attempt.write_reason(entry)
            attempt.emit(AttemptOutcome.TOO_LARGE)
            raise exc

    # -- transactions --------------------------------------------------------------------

    def _commit_decision(self, attempt: PlacementAttempt, mode: CommitMode, decision: Decision,
                         entry: JobEntry) -> Tally:
        """Commit ``decision`` (made on ``entry``) in the commit mode's chunks of txns."""
        st, tally = attempt.placement, attempt.tally
        limit = self.committer.max_claims_per_txn
        chunks = mode.strategy.chunks(entry, list(decision.claims), limit)
        try:
            for chunk in chunks:
                attempt.pace(len(chunk))
                self._commit_claims(attempt, mode, chunk)
                if tally.job_gone:
                    break
        except PlanTooLarge as exc:
            attempt.pace(0)
            attempt.record_committed()
            attempt.emit(AttemptOutcome.TOO_LARGE)
            fresh = st.view.job(st.job_id)
            if fresh is not None:
                st.unplaced.update({c.task_index: f"plan too large for one transaction ({exc})"
                                    for c in decision.claims if c not in tally.committed})
                attempt.write_reason(fresh)  # (after the record: not one of the attempt's txns)
            raise
        attempt.pace(0)
        attempt.record_committed()
        return tally

    def _commit_claims(self, attempt: PlacementAttempt, mode: CommitMode, claims: list[Claim]) -> None:
        """Commit ``claims`` in one txn, retrying kept claims at once after conflicts; an
        incremental plan the store finds too large is halved."""
        st, tally = attempt.placement, attempt.tally
        plan, gone = self.plan_of(st, claims)
        tally.redecide.extend(gone)
        if plan is not None:
            plan, back = mode.strategy.fitting(plan, bool(gone))
            tally.redecide.extend(back)
        for _ in range(self.retry.max_attempts):
            if plan is None or not plan.claims:
                tally.job_gone = plan is None
                return
            plan = attempt.refreshed(plan)
            try:
                outcome = attempt.commit(plan)
            except PlanTooLarge:
                if mode is CommitMode.ALL_OR_NOTHING or len(plan.claims) < 2:
                    raise
                half = len(plan.claims) // 2
                self._commit_claims(attempt, mode, list(plan.claims[:half]))
                self._commit_claims(attempt, mode, list(plan.claims[half:]))
                return
            if outcome.committed:
                tally.committed.extend(plan.claims)
                if plan.victims and self._gangs is not None:
                    for victim in plan.victims.values():
                        if victim.record.job.gang:  # a gang runs whole or not at all
                            self.evict_gang(st, victim.id, f"gang member preempted by job {plan.job.id!r}: "
                                            "the whole gang is evicted")
                return
            plan = attempt.resolve(mode, plan, outcome)
        if plan is not None:
            tally.redecide.extend(c.task_index for c in plan.claims)

    def evict_gang(self, st: PlacementRun, job_id: str, reason: str) -> JobEntry | None:
        """Evict the placed and running tasks of gang ``job_id`` whose other tasks are pending
        (``GangCommitter.evict``); the job as the view has it then."""
        assert self._gangs is not None
        for outcome in self._gangs.evict(job_id, reason, self.scheduler):
            st.view.apply_outcome(outcome)
        return st.view.job(job_id)

    def plan_of(self, st: PlacementRun, claims: list[Claim]) -> tuple[Plan | None, list[int]]:
        """A plan of the claims whose tasks are still pending in the view (None: job gone),
        and the tasks of the claims left out because the view has moved on since the decision:
        their machine is gone, or a victim of theirs is no longer placed or running on it
        (they go back to the scheduler)."""
        entry = st.view.job(st.job_id)
        if entry is None:
            return None, []
        tasks, killed, machine = entry.record.tasks, entry.record.killed, st.view.machine
        live = [c for c in claims if tasks[c.task_index] == "p" and not killed]
        machines: dict[str, MachineEntry] = {}
        victims: dict[str, JobEntry] = {}
        victim_allocs: dict[tuple[str, int], AllocEntry] = {}
        gone: list[int] = []
        for claim in live:
            found = machine(claim.machine_id)
            if found is None or claim.evicts and not self._victims_live(st.view, claim, victims, victim_allocs):
                gone.append(claim.task_index)
                continue
            machines[claim.machine_id] = found
        if gone:
            live = [c for c in live if c.task_index not in gone]
            victims, victim_allocs = victims_of(live, victims, victim_allocs)
        if victims:
            self._gang_rest(st.view, live, machines, victims, victim_allocs)
        return _PLAN(entry, tuple(live), machines, self.scheduler, dict(st.unplaced), self.clock.now(),
                     victims, victim_allocs), gone

    def _gang_rest(self, view: PlacementView, claims: list[Claim], machines: dict[str, MachineEntry],
                   victims: dict[str, JobEntry], victim_allocs: dict[tuple[str, int], AllocEntry]) -> None:
        """Add to a preempting plan the other placed or running members of each gang it evicts
        from (their allocs to ``victim_allocs``, their machines to ``machines``: the committer's
        ``collateral``, evicted in the plan's own txn) while the txn's operations stay within the
        committer's limit; a gang that does not fit is evicted right after the commit instead."""
        limit = self.committer.max_txn_ops
        for job_id, victim in victims.items():
            if not victim.record.job.gang:
                continue
            states = victim.record.tasks
            rest: list[tuple[tuple[str, int], AllocEntry]] = []
            extra: dict[str, MachineEntry] = {}
            whole = True  # every live member's alloc and machine found
            for alloc in view.allocs_of(job_id):
                task = (job_id, alloc.task_index)
                if task in victim_allocs or not 0 <= alloc.task_index < len(states) or \
                        states[alloc.task_index] not in "ar":
                    continue
                found, seen = view.alloc_entry(*task), machines.get(alloc.machine_id) or extra.get(alloc.machine_id)
                if seen is None:
                    seen = view.machine(alloc.machine_id)
                    if seen is None or seen.machine.state.value == "down":
                        whole = False
                        break
                    extra[alloc.machine_id] = seen
                if found is None:
                    whole = False
                    break
                rest.append((task, found))
            # ops: every machine (compare, put), alloc (compare, delete), claim (alloc put and key
            # compare), victim record (compare, put), the job and its kill marker
            ops = len(machines) + len(extra) + len(victim_allocs) + len(rest) + 2 * len(claims) + \
                len(victims) + 2
            if not whole or not rest or ops > limit:
                continue
            machines.update(extra)
            victim_allocs.update(rest)

    @staticmethod
    def _victims_live(view: PlacementView, claim: Claim, victims: dict[str, JobEntry],
                      victim_allocs: dict[tuple[str, int], AllocEntry]) -> bool:
        """True when every victim of ``claim`` is placed or running on its machine in ``view``
        (their entries then added to ``victims`` and ``victim_allocs``)."""
        for job_id, task in claim.evicts:
            job, alloc = view.job(job_id), view.alloc_entry(job_id, task)
            if job is None or alloc is None or alloc.alloc.machine_id != claim.machine_id \
                    or not 0 <= task < len(job.record.tasks) or job.record.tasks[task] not in "ar":
                return False
            victims[job_id], victim_allocs[(job_id, task)] = job, alloc
        return True

    # -- reasons and results ------------------------------------------------------------

    def _give_up(self, st: PlacementRun) -> None:
        entry = st.view.job(st.job_id)
        if entry is None:
            return
        attempts = len(st.attempts)
        for task in st.todo or ():
            why = st.conflicts.get(task, "conflicting commits")
            st.unplaced[task] = f"gave up after {attempts} conflicting attempts ({why})"
        PlacementAttempt(self, st, 0.0).write_reason(entry)  # (no attempt: recorded nowhere)

    def _result(self, st: PlacementRun, gave_up: bool) -> PlacementResult:
        entry = st.view.job(st.job_id)
        pending = () if entry is None else tuple(self._pending_of(entry))
        reason = entry.record.reason if entry is not None else ""
        return _PLACEMENT_RESULT(st.job_id, tuple(st.placed), pending, reason, tuple(st.attempts),
                                 gave_up, st.job_gone or entry is None)
