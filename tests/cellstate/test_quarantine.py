"""Bad values are quarantined, never fatal (issue 19, item 4).

A value that does not decode, or whose id is not its key's (``machines/m1`` holding machine
m2's valid value), met by the committer's failure branch becomes a None entry named in
``CommitOutcome.quarantined``; a plan that files one machine's entry under another id is
rejected before anything is written (the committer never writes a key it did not compare);
the scheduler's view quarantines what the committer read back; a scheduler round survives it;
``check_cell`` names exactly the bad keys. On the memory store and a real etcd.
"""

from __future__ import annotations

import logging

import pytest
from cell_helpers import seed_machine

from cellstate.check import check_cell
from cellstate.codec.records import decode_machine, encode_alloc, encode_job_record, encode_machine
from cellstate.committer import StoreCommitter
from cellstate.keys import CellKeys
from cellstate.memory.store import MemoryStore
from cellstate.model import Alloc, Job, JobKind, JobRecord, Machine
from cellstate.replica.view import ReplicaView
from cellstate.resources import Resources
from cellstate.store import Put
from cellstate.plan import AllocEntry, Claim, JobEntry, MachineEntry, Plan, PlanRejected
from omega.runtime import SchedulerProcess
from schedulers.chains import make_scheduler, retry_policy_for

REQ = Resources(1000, 512)
GARBAGE = b"\xc1 not msgpack"


def seed_job(store, keys, job_id, tasks=2, states=None) -> JobEntry:
    record = JobRecord(Job(job_id, JobKind.BATCH, tasks, REQ), states or "p" * tasks, submitted_at=1.0)
    return JobEntry(record, store.put(keys.job(job_id), encode_job_record(record)))


# -- the committer's failure branch -----------------------------------------------------------


def test_garbage_read_back_is_quarantined_not_raised(store, keys):
    m1, m2 = seed_machine(store, keys, "m1"), seed_machine(store, keys, "m2")
    job = seed_job(store, keys, "j")
    bad_mod = store.put(keys.machine("m1"), GARBAGE)
    plan = Plan(job, (Claim(0, "m1", REQ), Claim(1, "m2", REQ)), {"m1": m1, "m2": m2}, "b", now=5.0)
    outcome = StoreCommitter(store, keys).commit(plan)  # before the fix: CodecError
    assert not outcome.committed
    assert outcome.fresh_machines == {"m1": None, "m2": m2}
    assert outcome.fresh_job == job and not outcome.job_deleted
    assert list(outcome.quarantined) == [keys.machine("m1")]
    assert outcome.quarantined[keys.machine("m1")][0] == bad_mod
    assert store.revision() == bad_mod  # nothing written


def test_misfiled_read_back_is_quarantined_not_taken_for_the_other_machine(store, keys):
    m1, m2 = seed_machine(store, keys, "m1"), seed_machine(store, keys, "m2")
    job = seed_job(store, keys, "j")
    store.put(keys.machine("m1"), encode_machine(m2.machine))  # m2's valid value under m1's key
    plan = Plan(job, (Claim(0, "m1", REQ),), {"m1": m1}, "b", now=5.0)
    outcome = StoreCommitter(store, keys).commit(plan)
    assert not outcome.committed
    assert outcome.fresh_machines == {"m1": None}  # before the fix: m2's machine filed under m1
    assert "holds machine 'm2'" in outcome.quarantined[keys.machine("m1")][1]


def test_bad_job_read_back_is_quarantined_not_deleted(store, keys):
    m1 = seed_machine(store, keys, "m1")
    job = seed_job(store, keys, "j")
    other = seed_job(store, keys, "k")
    store.put(keys.job("j"), encode_job_record(other.record))  # job k's record under jobs/j
    outcome = StoreCommitter(store, keys).commit(Plan(job, (Claim(0, "m1", REQ),), {"m1": m1}, "b", now=5.0))
    assert not outcome.committed and outcome.fresh_job is None and not outcome.job_deleted
    assert list(outcome.quarantined) == [keys.job("j")]
    store.put(keys.job("j"), GARBAGE)
    outcome = StoreCommitter(store, keys).commit(Plan(job, (), {}, "b", {0: "no room"}, now=5.0))
    assert outcome.fresh_job is None and list(outcome.quarantined) == [keys.job("j")]


def test_bad_victim_read_backs_are_quarantined(store, keys):
    m1 = seed_machine(store, keys, "m1", cpu=1000)
    low = seed_job(store, keys, "low", tasks=1, states="a")
    alloc = Alloc("low", 0, "m1", REQ)
    alloc_mod = store.put(keys.alloc("low", 0), encode_alloc(alloc))
    full = Machine("m1", Resources(1000, 16384, 100_000), allocated=REQ, task_count=1)
    m1 = MachineEntry(full, store.put(keys.machine("m1"), encode_machine(full)))
    high = seed_job(store, keys, "high", tasks=1)
    plan = Plan(high, (Claim(0, "m1", REQ, evicts=(("low", 0),)),), {"m1": m1}, "b", now=5.0,
                victims={"low": low}, victim_allocs={("low", 0): AllocEntry(alloc, alloc_mod)})
    store.put(keys.job("low"), GARBAGE)
    store.put(keys.alloc("low", 0), encode_alloc(Alloc("low", 1, "m1", REQ)))  # task 1's alloc under task 0
    outcome = StoreCommitter(store, keys).commit(plan)
    assert not outcome.committed
    assert outcome.fresh_victims == {"low": None} and outcome.fresh_victim_allocs == {("low", 0): None}
    assert set(outcome.quarantined) == {keys.job("low"), keys.alloc("low", 0)}


# -- the success path never writes a key it did not compare ----------------------------------


def test_plan_filing_a_machine_under_another_id_is_rejected_before_writing(store, keys):
    m1, m2 = seed_machine(store, keys, "m1"), seed_machine(store, keys, "m2")
    job = seed_job(store, keys, "j")
    before = store.revision()
    misfiled = MachineEntry(m2.machine, m1.mod_revision)  # what a misfiled read-back used to give
    with pytest.raises(PlanRejected, match="files machine 'm2' under 'm1'"):
        StoreCommitter(store, keys).commit(Plan(job, (Claim(0, "m1", REQ),), {"m1": misfiled}, "b",
                                                now=5.0))
    assert store.revision() == before  # before the fix: machines/m2 written, never compared
    assert decode_machine(keys.machine("m2"), store.get(keys.machine("m2")).value).task_count == 0


def test_plan_filing_a_victim_under_another_id_is_rejected(store, keys):
    m1 = seed_machine(store, keys, "m1")
    low, other = seed_job(store, keys, "low", tasks=1, states="a"), seed_job(store, keys, "other", 1, "a")
    alloc = Alloc("low", 0, "m1", REQ)
    alloc_mod = store.put(keys.alloc("low", 0), encode_alloc(alloc))
    high = seed_job(store, keys, "high", tasks=1)
    claim = Claim(0, "m1", REQ, evicts=(("low", 0),))
    with pytest.raises(PlanRejected, match="files job 'other' under 'low'"):
        StoreCommitter(store, keys).commit(Plan(high, (claim,), {"m1": m1}, "b", now=5.0, victims={"low": other},
                                                victim_allocs={("low", 0): AllocEntry(alloc, alloc_mod)}))
    wrong = AllocEntry(Alloc("low", 1, "m1", REQ), alloc_mod)
    with pytest.raises(PlanRejected, match="files the alloc of low/1 under it"):
        StoreCommitter(store, keys).commit(Plan(high, (claim,), {"m1": m1}, "b", now=5.0, victims={"low": low},
                                                victim_allocs={("low", 0): wrong}))


# -- the view takes the quarantine in --------------------------------------------------------


def test_view_quarantines_what_a_failed_commit_read_back(caplog):
    store, keys = MemoryStore(), CellKeys("q")
    m1, m2 = seed_machine(store, keys, "m1"), seed_machine(store, keys, "m2")
    job = seed_job(store, keys, "j")
    view = ReplicaView(store, keys)
    bad_mod = store.put(keys.machine("m1"), encode_machine(m2.machine))
    with caplog.at_level(logging.WARNING, "cellstate.replica.state"):
        outcome = StoreCommitter(store, keys).commit(Plan(job, (Claim(0, "m1", REQ),), {"m1": m1}, "b", now=5.0))
        view.apply_outcome(outcome)
        assert view.machine("m1") is None and view.machine("m2") == m2  # m2 untouched
        assert set(view.quarantine) == {keys.machine("m1")}
        assert view.mod_revision(keys.machine("m1")) == bad_mod
        view.pump()  # the watch brings the same bad put: skipped, not reported again
    assert set(view.quarantine) == {keys.machine("m1")} and view.machine("m1") is None
    assert [r.getMessage().count(keys.machine("m1")) for r in caplog.records] == [1]
    good = store.put(keys.machine("m1"), encode_machine(m1.machine))
    view.pump()
    assert view.machine("m1") == MachineEntry(m1.machine, good) and not view.quarantine


class _Clock:
    def now(self) -> float:
        return 1.0

    def sleep(self, seconds: float) -> None:
        pass


class _NullSink:
    def publish(self, stats) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.mark.parametrize("bad", ["garbage", "misfiled"])
def test_scheduler_round_survives_a_bad_machine_met_at_commit(bad):
    """The issue's crash: the view still holds m0 good when its key goes bad; the scheduler
    claims m0, the txn fails, the read-back is bad. The round goes on, the job lands elsewhere,
    m1's ledger is not overwritten and the check names exactly the bad key."""
    store, keys = MemoryStore(), CellKeys("q")
    for i in range(3):
        seed_machine(store, keys, f"m{i}", cpu=2000)
    seed_job(store, keys, "j", tasks=4)
    process = SchedulerProcess(make_scheduler("batch", "b1", 0), ReplicaView(store, keys),
                               StoreCommitter(store, keys), _NullSink(), retry=retry_policy_for("batch"),
                               clock=_Clock())
    m1 = store.get(keys.machine("m1"))
    store.put(keys.machine("m0"), GARBAGE if bad == "garbage" else m1.value)  # not pumped yet
    process.view.replica.pump = lambda *a, **k: 0  # the watch is late: the commit meets the bad value first
    process.placer.refresh = lambda: 0
    result = process.place("j")
    assert result is not None and set(result.pending) == set(), result
    assert {c.machine_id for c in result.placed} == {"m1", "m2"}
    assert set(process.view.quarantine) == {keys.machine("m0")}
    report = check_cell(store, keys)
    assert [(v.kind, v.key) for v in report.violations] == [
        ("undecodable" if bad == "garbage" else "key-mismatch", keys.machine("m0"))]


def test_check_names_only_the_misfiled_key():
    store, keys = MemoryStore(), CellKeys("q")
    m1, m2 = seed_machine(store, keys, "m1"), seed_machine(store, keys, "m2")
    store.put(keys.alloc("j", 0), encode_alloc(Alloc("j", 0, "m1", REQ)))
    store.put(keys.job("j"), encode_job_record(JobRecord(Job("j", JobKind.BATCH, 1, REQ), "a", submitted_at=1.0)))
    loaded = Machine("m1", m1.machine.capacity, allocated=REQ, task_count=1)
    store.txn((), [Put(keys.machine("m1"), encode_machine(m2.machine))])  # m1 holds m2's value now
    report = check_cell(store, keys)
    assert [(v.kind, v.key) for v in report.violations] == [("key-mismatch", keys.machine("m1"))]
    store.put(keys.machine("m1"), encode_machine(loaded))
    assert check_cell(store, keys).ok
