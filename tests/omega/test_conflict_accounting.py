"""Conflict accounting of the conflict modes: a failed txn is a conflict, or (resource-fit
only) a stale retry when every claim still holds on the fresh state and the job is unchanged."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cellstate.model import MachineState, TaskState
from fakeview import batch_job, machine
from omega.modes import ConflictMode
from cellstate.plan import Claim, CommitOutcome, JobEntry, MachineEntry, Plan
from omega.stats import StatsRecorder

SEQ, FIT = ConflictMode.SEQUENCE, ConflictMode.RESOURCE_FIT
JOB = JobEntry(batch_job("j", 2, cpu=1000), 5)
SEEN = {"m1": MachineEntry(machine("m1", cpu=4000), 3), "m2": MachineEntry(machine("m2", cpu=4000), 4)}
CLAIMS = (Claim(0, "m1", JOB.record.job.request), Claim(1, "m2", JOB.record.job.request))


def fresh_m1(cpu_used: int = 0, state=MachineState.UP) -> dict:
    """m1 changed (revision 9) with ``cpu_used`` millicores allocated by a rival; m2 unchanged."""
    m1 = SEEN["m1"].machine
    changed = replace(m1, allocated=replace(m1.allocated, cpu=cpu_used), state=state, writer="rival")
    return {"m1": MachineEntry(changed, 9), "m2": SEEN["m2"]}


CASES = [
    # mode, fresh machines, fresh job, stale?
    (SEQ, fresh_m1(), JOB, False),
    (FIT, fresh_m1(), JOB, True),
    (FIT, fresh_m1(cpu_used=2500), JOB, True),
    (FIT, fresh_m1(cpu_used=3500), JOB, False),
    (FIT, fresh_m1(state=MachineState.DOWN), JOB, False),
    (FIT, {"m1": None, "m2": SEEN["m2"]}, JOB, False),
    (FIT, fresh_m1(), replace(JOB, mod_revision=8), False),
    (FIT, fresh_m1(), JobEntry(JOB.record.with_tasks([1], TaskState.PLACED), 8), False),
]


@pytest.mark.parametrize("mode, machines, job, stale", CASES, ids=[
    "sequence-still-fits", "fit-still-fits", "fit-still-fits-tightly", "fit-no-longer-fits", "fit-machine-down",
    "fit-machine-gone", "fit-job-changed", "fit-task-placed-elsewhere"])
def test_a_failed_txn_is_stale_only_in_resource_fit_when_nothing_really_changed(mode, machines, job, stale):
    plan = Plan(JOB, CLAIMS, dict(SEEN), "us")
    outcome = CommitOutcome(False, 10, machines, job)
    split = mode.strategy.split(plan, outcome)
    assert mode.strategy.stale(plan, outcome, split) is stale
    assert (split.rejected == () and split.dropped == ()) or not stale


def test_stale_retries_are_counted_apart_from_conflicts():
    rec = StatsRecorder("s", "batch")
    rec.record_attempt(0.01, 0.02, txns=3, commits=1, conflicts=0, retries=0, tasks_placed=2, tasks_unplaced=0,
                       job_placed=True, conflict_machines={}, job_id="j1", now=1.0, stale_retries=2)
    rec.record_attempt(0.01, 0.02, txns=2, commits=1, conflicts=1, retries=0, tasks_placed=1, tasks_unplaced=0,
                       job_placed=True, conflict_machines={"m1": "rival"}, job_id="j2", now=2.0)
    stats = rec.snapshot(3.0)
    assert (stats.txns, stats.commits, stats.conflicts, stats.stale_retries) == (5, 2, 1, 2)
    assert stats.conflict_fraction == 0.5
    assert [note.job for note in stats.recent_conflicts] == ["j2"]


def test_negative_stale_retries_are_refused():
    with pytest.raises(ValueError, match="stale_retries must be a non-negative int"):
        StatsRecorder("s", "batch").record_attempt(0.0, 0.0, 1, 0, 0, 0, 0, 0, False, {}, "j", 1.0, stale_retries=-1)


@pytest.mark.parametrize("room, refresh, txns, failed, stale", [
    (True, False, 2, 1, 1),   # the txn on the old revision fails: a stale retry
    (True, True, 1, 0, 0),    # the refreshed view shows the claims still fit: rebased, no failed txn
    (False, True, 2, 1, 0),   # a real conflict goes out as it is and is counted
], ids=["room-no-refresh", "room-refresh", "full-refresh"])
def test_refresh_before_commit_saves_only_stale_retries(room, refresh, txns, failed, stale):
    from cellstate.committer import StoreCommitter
    from cellstate.keys import CellKeys
    from cellstate.memory.store import MemoryStore
    from fakeview import FakeClock, ReplicaView, least_loaded, seed
    from omega.modes import CommitMode
    from omega.occ import OptimisticPlacer
    from omega.retry import RetryPolicy

    store, keys = MemoryStore(), CellKeys("refresh")
    seed(store, keys, [machine("m1"), machine("m2")],
         [batch_job("A", 1, cpu=2000 if room else 3500), batch_job("B", 2, cpu=1000)])
    rival_view, our_view = ReplicaView(store, keys), ReplicaView(store, keys)

    def placer(name, view, attempts):
        return OptimisticPlacer(name, StoreCommitter(store, keys), FIT, CommitMode.INCREMENTAL,
                                RetryPolicy(max_attempts=4), FakeClock(), on_attempt=attempts.append,
                                refresh=(lambda: view.pump(0.0)) if refresh else None)

    placer("rival", rival_view, []).place("A", rival_view, least_loaded)
    attempts = []
    result = placer("us", our_view, attempts).place("B", our_view, least_loaded)
    assert result.pending == () and our_view.job("B").record.tasks == "aa"
    first = attempts[0]
    assert (first.transactions, first.failed_transactions, first.stale_retries) == (txns, failed, stale)


def test_the_winner_of_a_conflict_is_who_had_written_the_machine_when_the_txn_failed():
    """Not whoever wrote it last by the attempt's end (a retry of the loser's own may have)."""
    from omega.placement import Tally as _Tally, note_conflict as _note_conflict

    plan = Plan(JOB, CLAIMS, dict(SEEN), "us")
    tally = _Tally()
    outcome = CommitOutcome(False, 10, fresh_m1(cpu_used=3500), JOB)  # m1 no longer fits: rejected
    _note_conflict(outcome, FIT.strategy.split(plan, outcome), tally)
    assert tally.conflicting == {"m1": "rival"} and list(tally.winners) == ["rival"]
    ours = dict(fresh_m1(cpu_used=3500))
    ours["m1"] = MachineEntry(replace(ours["m1"].machine, writer="us"), 11)  # our own retry wrote m1 since
    again = CommitOutcome(False, 12, ours, JOB)
    _note_conflict(again, FIT.strategy.split(plan, again), tally)
    assert tally.conflicting == {"m1": "rival"}  # the first winner stays the machine's
