"""StoreCommitter: one placement txn, on a real etcd and on the memory store."""

from __future__ import annotations

from dataclasses import replace

import pytest
from cell_helpers import seed_machine

from cellstate.check import check_cell
from cellstate.codec.records import decode_alloc, decode_job_record, decode_machine, encode_alloc, encode_job_record, \
    encode_machine
from cellstate.committer import StoreCommitter, claims_per_txn, summarize_reasons
from cellstate.keys import CellKeys
from cellstate.memory.store import MemoryStore
from cellstate.model import Alloc, Job, JobKind, JobRecord, MachineState
from cellstate.resources import Resources
from cellstate.store import Get, Put
from cellstate.plan import AllocEntry, Claim, JobEntry, MachineEntry, Plan, PlanRejected, PlanTooLarge

REQ = Resources(1000, 512)


def put(store, key, raw) -> int:
    return store.put(key, raw)


def seed_job(store, keys, job_id, tasks=3, states=None, priority=0) -> JobEntry:
    job = Job(job_id, JobKind.BATCH, tasks, REQ, priority=priority)
    record = JobRecord(job, states or "p" * tasks, submitted_at=1.0)
    return JobEntry(record, put(store, keys.job(job_id), encode_job_record(record)))


def read(store, key, decode):
    kv = store.get(key)
    return None if kv is None else decode(key, kv.value)


def test_success_writes_ledgers_allocs_and_job(store, keys):
    m1, m2 = seed_machine(store, keys, "m1"), seed_machine(store, keys, "m2")
    job = seed_job(store, keys, "j", tasks=3)
    claims = (Claim(0, "m1", REQ), Claim(1, "m1", REQ), Claim(2, "m2", REQ))
    plan = Plan(job, claims, {"m1": m1, "m2": m2}, "batch-0", now=5.0)
    outcome = StoreCommitter(store, keys).commit(plan)
    assert outcome.committed
    assert outcome.revision == store.revision()
    m1_now = read(store, keys.machine("m1"), decode_machine)
    assert (m1_now.allocated, m1_now.task_count, m1_now.writer) == (REQ.scaled(2), 2, "batch-0")
    record = read(store, keys.job("j"), decode_job_record)
    assert (record.tasks, record.reason, record.first_attempt_at, record.placed_at) == ("aaa", "", 5.0, 5.0)
    alloc = read(store, keys.alloc("j", 2), decode_alloc)
    assert (alloc.machine_id, alloc.resources, alloc.scheduler, alloc.placed_at) == ("m2", REQ, "batch-0", 5.0)
    assert set(outcome.written) == {keys.machine("m1"), keys.machine("m2"), keys.job("j"),
                                    *(keys.alloc("j", i) for i in range(3))}
    for key, raw in outcome.written.items():
        assert store.get(key).value == raw and store.get(key).mod_revision == outcome.revision
    assert check_cell(store, keys).ok


def test_success_hands_back_what_it_wrote_decoded(store, keys):
    m1, m2 = seed_machine(store, keys, "m1"), seed_machine(store, keys, "m2")
    job = seed_job(store, keys, "j", tasks=3)
    plan = Plan(job, (Claim(0, "m1", REQ), Claim(2, "m2", REQ)), {"m1": m1, "m2": m2}, "batch-0", now=5.0)
    outcome = StoreCommitter(store, keys).commit(plan)
    assert outcome.committed and outcome.applied
    rev, w = outcome.revision, outcome.written
    assert outcome.applied_machines == tuple(MachineEntry(decode_machine(k, w[k]), rev)
                                             for k in (keys.machine("m1"), keys.machine("m2")))
    assert outcome.applied_jobs == (JobEntry(decode_job_record(keys.job("j"), w[keys.job("j")]), rev),)
    assert outcome.applied_allocs == {k: decode_alloc(k, w[k]) for k in (keys.alloc("j", 0), keys.alloc("j", 2))}
    assert len(w) == 2 + 1 + 2 and outcome.deleted == ()


def test_partial_plan_keeps_reason_and_leaves_placed_at_unset(store, keys):
    m1 = seed_machine(store, keys, "m1")
    job = seed_job(store, keys, "j", tasks=3)
    plan = Plan(job, (Claim(0, "m1", REQ),), {"m1": m1}, "s", unplaced={1: "no room", 2: "no room"}, now=2.0)
    assert StoreCommitter(store, keys).commit(plan).committed
    record = read(store, keys.job("j"), decode_job_record)
    assert (record.tasks, record.reason, record.placed_at) == ("app", "2 tasks: no room", None)


def test_changed_machine_fails_and_returns_fresh_state(store, keys):
    m1, m2 = seed_machine(store, keys, "m1"), seed_machine(store, keys, "m2")
    job = seed_job(store, keys, "j", tasks=2)
    rival = replace(m1.machine, allocated=Resources(3000, 0), task_count=1, writer="rival")
    rival_rev = put(store, keys.machine("m1"), encode_machine(rival))
    before = store.revision()
    plan = Plan(job, (Claim(0, "m1", REQ), Claim(1, "m2", REQ)), {"m1": m1, "m2": m2}, "s")
    outcome = StoreCommitter(store, keys).commit(plan)
    assert not outcome.committed and store.revision() == before
    assert outcome.fresh_machines == {"m1": MachineEntry(rival, rival_rev), "m2": m2}
    assert outcome.fresh_machines["m2"] is m2 and outcome.fresh_job is job  # unchanged: not decoded again
    assert outcome.fresh_job == job and not outcome.job_deleted
    assert outcome.written == {} and read(store, keys.alloc("j", 1), decode_alloc) is None


def test_deleted_job_is_reported(store, keys):
    m1 = seed_machine(store, keys, "m1")
    job = seed_job(store, keys, "j", tasks=1)
    store.delete(keys.job("j"))
    outcome = StoreCommitter(store, keys).commit(Plan(job, (Claim(0, "m1", REQ),), {"m1": m1}, "s"))
    assert not outcome.committed and outcome.job_deleted and outcome.fresh_job is None


def test_reason_only_plan_updates_job_and_unchanged_record_writes_nothing(store, keys):
    job = seed_job(store, keys, "j", tasks=2)
    committer = StoreCommitter(store, keys)
    outcome = committer.commit(Plan(job, (), {}, "s", unplaced={0: "too big", 1: "too big"}, now=3.0))
    record = read(store, keys.job("j"), decode_job_record)
    assert outcome.committed and (record.reason, record.first_attempt_at) == ("2 tasks: too big", 3.0)
    fresh = JobEntry(record, store.get(keys.job("j")).mod_revision)
    before = store.revision()
    again = committer.commit(Plan(fresh, (), {}, "s", unplaced={0: "too big", 1: "too big"}, now=4.0))
    assert again.committed and again.written == {} and store.revision() == before
    stale = committer.commit(Plan(job, (), {}, "s", unplaced={0: "other"}))
    assert not stale.committed and stale.fresh_job == fresh


def test_preemption_evicts_victims_in_the_same_txn(store, keys):
    m1 = seed_machine(store, keys, "m1", cpu=2000)
    victim = seed_job(store, keys, "low", tasks=2, states="aa")
    ledger = replace(m1.machine, allocated=REQ.scaled(2), task_count=2)
    writes = [Put(keys.machine("m1"), encode_machine(ledger))]
    writes += [Put(keys.alloc("low", i), encode_alloc(Alloc("low", i, "m1", REQ))) for i in range(2)]
    revision = store.txn((), writes).revision
    victim = JobEntry(victim.record, victim.mod_revision)
    job = seed_job(store, keys, "high", tasks=1, priority=100)
    plan = Plan(job, (Claim(0, "m1", REQ, evicts=(("low", 1),)),), {"m1": MachineEntry(ledger, revision)},
                "s", victims={"low": victim},
                victim_allocs={("low", 1): AllocEntry(Alloc("low", 1, "m1", REQ), revision)})
    outcome = StoreCommitter(store, keys).commit(plan)
    assert outcome.committed and outcome.deleted == (keys.alloc("low", 1),)
    assert read(store, keys.job("low"), decode_job_record).tasks == "ap"
    assert read(store, keys.machine("m1"), decode_machine).task_count == 2
    assert check_cell(store, keys).ok


def _preemption_setup(store, keys):
    """m1 full of job 'low' (2 tasks), m2 empty; job 'high' pending."""
    m1 = seed_machine(store, keys, "m1", cpu=2000)
    m2 = seed_machine(store, keys, "m2", cpu=2000)
    victim = seed_job(store, keys, "low", tasks=2, states="aa")
    ledger = replace(m1.machine, allocated=REQ.scaled(2), task_count=2)
    writes = [Put(keys.machine("m1"), encode_machine(ledger))]
    writes += [Put(keys.alloc("low", i), encode_alloc(Alloc("low", i, "m1", REQ))) for i in range(2)]
    revision = store.txn((), writes).revision
    job = seed_job(store, keys, "high", tasks=1, priority=100)
    return MachineEntry(ledger, revision), m2, victim, job, revision


@pytest.mark.parametrize("target, alloc_revision, expect", [
    ("m2", 0, "rejected"),
    ("m1", -1, "conflict"),
], ids=["victim-on-another-machine", "victim-alloc-changed"])
def test_eviction_is_guarded_by_the_victim_allocation(store, keys, target, alloc_revision, expect):
    m1, m2, victim, job, revision = _preemption_setup(store, keys)
    seen = AllocEntry(Alloc("low", 1, "m1", REQ), revision + alloc_revision)
    plan = Plan(job, (Claim(0, target, REQ, evicts=(("low", 1),)),), {"m1": m1, "m2": m2}, "s",
                victims={"low": victim}, victim_allocs={("low", 1): seen})
    before = store.revision()
    if expect == "rejected":
        with pytest.raises(PlanRejected, match="room on 'm2', but that task runs on 'm1'"):
            StoreCommitter(store, keys).commit(plan)
    else:
        outcome = StoreCommitter(store, keys).commit(plan)
        assert not outcome.committed
        assert outcome.fresh_victim_allocs[("low", 1)].mod_revision == revision
    assert store.revision() == before and check_cell(store, keys).ok


@pytest.mark.parametrize("claims, message", [
    ((Claim(3, "m1", REQ),), "out of range"),
    ((Claim(0, "m1", REQ), Claim(0, "m1", REQ)), "claimed twice"),
    ((Claim(1, "m1", REQ),), "not pending"),
    ((Claim(0, "m9", REQ),), "no ledger"),
    ((Claim(0, "m1", REQ, evicts=(("other", 0),)),), "no victim record"),
], ids=["out-of-range", "twice", "not-pending", "unknown-machine", "victim-missing"])
def test_inconsistent_plans_are_refused(claims, message):
    store, keys = MemoryStore(), CellKeys("bad")
    m1 = seed_machine(store, keys, "m1")
    job = seed_job(store, keys, "j", tasks=3, states="pap")
    with pytest.raises(ValueError, match=message):
        StoreCommitter(store, keys).commit(Plan(job, claims, {"m1": m1}, "s"))
    assert store.get(keys.alloc("j", 0)) is None


@pytest.mark.parametrize("ops, claims", [(128, 63), (20, 9), (21, 9), (4, 1)],
                         ids=["etcd-default", "twenty", "twenty-one", "minimum"])
def test_claims_per_txn_follows_the_op_limit(ops, claims):
    assert claims_per_txn(ops) == claims
    assert StoreCommitter(MemoryStore(max_txn_ops=ops), CellKeys()).max_claims_per_txn == claims


def test_too_small_op_limit_is_refused():
    with pytest.raises(ValueError, match="max_txn_ops"):
        StoreCommitter(MemoryStore(), CellKeys(), max_txn_ops=3)


def test_plan_beyond_the_op_limit_is_too_large():
    store, keys = MemoryStore(max_txn_ops=20), CellKeys("big")
    machines = {f"m{i}": seed_machine(store, keys, f"m{i}") for i in range(10)}
    job = seed_job(store, keys, "j", tasks=10)
    plan = Plan(job, tuple(Claim(i, f"m{i}", REQ) for i in range(10)), machines, "s")
    # 10 machine compares, 10 alloc keys and the kill marker compared missing, the job's revision
    with pytest.raises(PlanTooLarge, match="'j'.*10 claims.*22.*limit is 20"):
        StoreCommitter(store, keys).commit(plan)


def test_summarize_reasons_counts_distinct_reasons():
    assert summarize_reasons({0: "a", 1: "b", 2: "b"}) == "2 tasks: b; 1 task: a"
    assert summarize_reasons({}) == ""
    assert len(summarize_reasons({i: f"reason {i} " * 20 for i in range(50)})) == 400


def test_summarize_reasons_of_one_reason_counts_every_task():
    assert summarize_reasons({i: "no room" for i in range(5)}) == "5 tasks: no room"
    assert summarize_reasons({3: "no room"}) == "1 task: no room"


@pytest.mark.parametrize("tasks, unplaced, kept", [
    ("pppp", {0: "x", 1: "x", 2: "y", 3: "x"}, [0, 1, 2, 3]),  # every pending task, in order
    ("papp", {0: "x", 2: "x", 3: "y"}, [0, 2, 3]),
    ("papp", {3: "x", 0: "x", 2: "y"}, [3, 0, 2]),  # another order: checked task by task
    ("paap", {0: "x", 1: "x", 3: "y"}, [0, 3]),  # task 1 was placed meanwhile
    ("ffpp", {2: "x", 3: "x"}, [2, 3]),
    ("apfp", {0: "x", 2: "x"}, []),
])
def test_reasons_are_kept_for_the_still_pending_tasks(tasks, unplaced, kept):
    from cellstate.committer import _still_pending
    assert list(_still_pending(unplaced, tasks)) == kept


@pytest.mark.parametrize("tasks, indices", [
    ("pppp", [0]), ("pppp", [3]), ("pppp", [2, 0]), ("p", [0]), ("ppap", [1, 3]),
    ("pppp", [-1]), ("pppp", [1, 1]),  # what indexing a list of the states gives (check_plan refuses these)
])
def test_claimed_tasks_become_placed_and_nothing_else_changes(tasks, indices):
    from cellstate.model import with_states  # what updated_record sets the claimed tasks with
    chars = list(tasks)
    for i in indices:
        chars[i] = "a"
    assert with_states(tasks, indices, "a") == "".join(chars)


def test_a_claim_beyond_the_task_string_fails_as_list_indexing_does():
    from cellstate.model import with_states
    with pytest.raises(IndexError):
        with_states("pp", [2], "a")


def test_a_machine_read_is_made_once_and_leaves_the_keys_equal():
    keys = CellKeys("mem")
    key, get = keys.machine_read("m1")
    assert key == keys.machine("m1") and get == Get(key) and keys.machine_read("m1")[1] is get
    assert keys == CellKeys("mem") and hash(keys) == hash(CellKeys("mem")) and "machine_reads" not in repr(keys)


@pytest.mark.parametrize("state", [MachineState.DOWN, MachineState.DRAINING], ids=["down", "draining"])
def test_a_plan_placing_on_a_down_machine_is_rejected(store, keys, state):
    """A down machine takes no task; a draining one does if its scheduler chose it
    (``machine_state``'s ``accept``)."""
    m1 = seed_machine(store, keys, "m1")
    seen = replace(m1.machine, state=state)
    revision = put(store, keys.machine("m1"), encode_machine(seen))
    job = seed_job(store, keys, "j", tasks=1)
    before = store.revision()
    plan = Plan(job, (Claim(0, "m1", REQ),), {"m1": MachineEntry(seen, revision)}, "s")
    if state is MachineState.DOWN:
        with pytest.raises(PlanRejected, match="places tasks on machine 'm1', which is down"):
            StoreCommitter(store, keys).commit(plan)
        assert store.revision() == before
    else:
        assert StoreCommitter(store, keys).commit(plan).committed


def test_a_gang_claim_never_lands_on_an_allocation_the_plan_did_not_see(store, keys):
    """Per-task guard of a gang: a claimed task's alloc key must be missing. An alloc written
    without the job record (a gang reservation the view has not caught up with) fails the commit
    instead of being overwritten (which would leave its machine charged for an alloc nobody has)."""
    m1 = seed_machine(store, keys, "m1")
    seed_machine(store, keys, "m2")
    job = seed_job(store, keys, "j", tasks=2)
    job = JobEntry(replace(job.record, job=replace(job.record.job, gang=True)), job.mod_revision)
    put(store, keys.job("j"), encode_job_record(job.record))
    job = JobEntry(job.record, store.get(keys.job("j")).mod_revision)
    reserved = Alloc("j", 0, "m2", REQ, 0, "rival", 1.0, False)
    put(store, keys.alloc("j", 0), encode_alloc(reserved))
    plan = Plan(job, (Claim(0, "m1", REQ), Claim(1, "m1", REQ)), {"m1": m1}, "us")
    outcome = StoreCommitter(store, keys).commit(plan)
    assert not outcome.committed
    assert read(store, keys.alloc("j", 0), decode_alloc) == reserved
    assert read(store, keys.alloc("j", 1), decode_alloc) is None
    assert read(store, keys.machine("m1"), decode_machine).allocated == Resources()
