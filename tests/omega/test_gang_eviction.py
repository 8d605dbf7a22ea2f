"""A gang runs whole or not at all, on a real etcd (docs/OMEGA_CORE.md, "Gangs"): a machine failure
evicts every member in the failure's txn and a scheduler process places the gang again whole; a
preemption of one member evicts the others; a gang found partly running is evicted before it is
placed; a gang lease covers a decision longer than its minimum."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from cellstate.check import check_cell
from cellstate.codec.records import decode_alloc, decode_job_record, decode_machine, encode_job_record, encode_machine
from cellstate.committer import StoreCommitter
from cellstate.gang_commit import GANG_LEASE_TTL
from cellstate.memory.store import MemoryStore
from cellstate.model import Job, JobKind, Machine, TaskState
from cellstate.replica.view import ReplicaView
from cellstate.resources import Resources
from cellstate.submit import submit_jobs
from omega.modes import CommitMode, ConflictMode
from omega.occ import OptimisticPlacer
from cellstate.plan import Claim, JobEntry, MachineEntry, Plan
from omega.protocols import Decision
from omega.retry import RetryPolicy
from omega.runtime import SchedulerProcess
from schedulers.chains import make_scheduler, retry_policy_for
from tools.agents.agent import Agent

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "schedulers"))
from viewlib import FixedClock, NullSink  # noqa: E402

CAPACITY = Resources.of(4_000, 8_192, 100_000)
MEMBER = Resources.of(3_000, 1_024, 10)  # one gang member per machine


def cell(store, keys, machines: int) -> None:
    for i in range(1, machines + 1):
        store.put(keys.machine(f"m{i}"), encode_machine(Machine(f"m{i}", CAPACITY)))


def place_gang(store, keys, job_id: str, machines: list[str], request: Resources = MEMBER) -> None:
    """The gang's one-txn placement commit (the record written with every task 'a')."""
    kv = store.get(keys.job(job_id))
    seen = {}
    for machine_id in machines:
        m = store.get(keys.machine(machine_id))
        seen[machine_id] = MachineEntry(decode_machine(m.key, m.value), m.mod_revision)
    plan = Plan(JobEntry(decode_job_record(kv.key, kv.value), kv.mod_revision),
                tuple(Claim(i, m, request) for i, m in enumerate(machines)), seen, scheduler="test", now=1.0)
    assert StoreCommitter(store, keys).commit(plan).committed


def record(store, keys, job_id):
    kv = store.get(keys.job(job_id))
    return decode_job_record(kv.key, kv.value)


def machines_of(store, keys, job_id) -> list[str]:
    return sorted(decode_alloc(kv.key, kv.value).machine_id for kv in store.range(keys.job_allocs(job_id)).kvs)


def test_a_failed_member_machine_evicts_the_whole_gang_in_one_txn_and_it_is_placed_again(etcd_store, cell_keys):
    store, keys = etcd_store, cell_keys
    cell(store, keys, 4)
    submit_jobs(store, keys, [Job("g", JobKind.BATCH, 3, MEMBER, duration_s=3600.0, gang=True)], 1.0)
    place_gang(store, keys, "g", ["m1", "m2", "m3"])
    agent = Agent(store, keys)
    agent.start()
    try:
        before = store.revision()
        assert agent.fail("m1") == 3  # its own member and the 2 others
        assert store.revision() - before == 1
    finally:
        agent.close()
    g = record(store, keys, "g")
    assert g.tasks == "ppp" and g.reason == "machine m1 failed"
    assert machines_of(store, keys, "g") == []
    assert check_cell(store, keys).ok
    process = SchedulerProcess(make_scheduler("batch", "batch-a", 0), ReplicaView(store, keys),
                               StoreCommitter(store, keys), NullSink(), retry=retry_policy_for("batch"),
                               clock=FixedClock(10.0))
    process.work_round()
    assert record(store, keys, "g").tasks == "aaa"
    assert machines_of(store, keys, "g") == ["m2", "m3", "m4"]
    assert check_cell(store, keys).ok


def placer(store, keys, clock=None, **options) -> OptimisticPlacer:
    return OptimisticPlacer("s", StoreCommitter(store, keys), ConflictMode.RESOURCE_FIT, CommitMode.INCREMENTAL,
                            RetryPolicy(max_attempts=3, base_wait_s=0.0, max_wait_s=0.0), clock or FixedClock(5.0), **options)


def test_preempting_one_member_evicts_the_whole_gang(etcd_store, cell_keys):
    """A production job takes m1 from gang member 0: the same commit evicts the gang's other
    members (their machines compared and released: the committer's ``collateral``), and the
    reason names the preemptor."""
    store, keys = etcd_store, cell_keys
    cell(store, keys, 3)
    submit_jobs(store, keys, [Job("g", JobKind.BATCH, 3, MEMBER, duration_s=3600.0, gang=True, priority=0),
                              Job("prod", JobKind.SERVICE, 1, MEMBER, priority=200)], 1.0)
    place_gang(store, keys, "g", ["m1", "m2", "m3"])
    view = ReplicaView(store, keys)
    view.pump()

    def decide(entry, tasks, view_):
        return Decision([Claim(0, "m1", MEMBER, evicts=(("g", 0),))], {})

    before = store.revision()
    result = placer(store, keys).place("prod", view, decide)
    assert [c.machine_id for c in result.placed] == ["m1"]
    assert store.revision() - before == 1  # the preemption's own txn evicts the whole gang
    g = record(store, keys, "g")
    assert g.tasks == "ppp" and "preempted by job 'prod'" in g.reason
    assert machines_of(store, keys, "g") == []
    assert check_cell(store, keys).ok


def test_a_gang_found_partly_running_is_evicted_then_placed_whole(etcd_store, cell_keys):
    """A gang left partly running (one member back to pending, as an evictor that stopped between
    its txns leaves it; ``omega check`` names it): the placer that takes it evicts the others and
    places all three."""
    store, keys = etcd_store, cell_keys
    cell(store, keys, 4)
    submit_jobs(store, keys, [Job("g", JobKind.BATCH, 3, MEMBER, duration_s=3600.0, gang=True)], 1.0)
    place_gang(store, keys, "g", ["m1", "m2", "m3"])
    kv = store.get(keys.alloc("g", 0))
    store.delete(kv.key)
    m1 = decode_machine(keys.machine("m1"), store.get(keys.machine("m1")).value)
    store.put(keys.machine("m1"), encode_machine(replace(m1, allocated=m1.allocated - MEMBER, task_count=0)))
    store.put(keys.job("g"), encode_job_record(record(store, keys, "g").with_tasks([0], TaskState.PENDING)))
    assert check_cell(store, keys).kinds() == {"partial-gang"}
    view = ReplicaView(store, keys)
    view.pump()
    scheduler = make_scheduler("batch", "s", 0)
    result = placer(store, keys).place("g", view, scheduler.decide)
    assert len(result.placed) == 3 and record(store, keys, "g").tasks == "aaa"
    assert check_cell(store, keys).ok


class _SlowClock:
    """A clock a decision moves forward (the memory store's leases run on it)."""

    def __init__(self):
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


def test_a_gang_lease_outlives_a_decision_longer_than_its_minimum():
    """A gang larger than one txn (8 tasks at 4 claims per txn) whose decision takes 7 s, above the
    5 s minimum lease, on a placer without a modelled decision time (a live process): the first
    attempt's lease ends during the decision (nothing is sent: no txn fails); the next lease covers
    the decision time seen, and the gang is placed."""
    clock = _SlowClock()
    store = MemoryStore(clock=clock.now, max_txn_ops=10)
    from cellstate.keys import CellKeys

    keys = CellKeys("lease")
    cell(store, keys, 8)
    submit_jobs(store, keys, [Job("g", JobKind.BATCH, 8, MEMBER, gang=True)], 0.0)
    view = ReplicaView(store, keys)
    scheduler = make_scheduler("batch", "s", 0)

    def slow(entry, tasks, view_):
        clock.t += GANG_LEASE_TTL + 2.0
        return scheduler.decide(entry, tasks, view_)

    p = placer(store, keys, clock)
    result = p.place("g", view, slow)
    assert len(result.placed) == 8 and record(store, keys, "g").tasks == "a" * 8
    assert p.gang_s_per_task > 0
    assert len(result.attempts) == 2 and result.attempts[0].failed_transactions == 0
    assert check_cell(store, keys).ok


def test_a_lease_that_ends_during_every_decision_gives_that_reason():
    """One attempt only: the lease (5 s, nothing seen yet) ends during the 7 s decision; the reason
    stored says so, and no txn failed (nothing was sent)."""
    clock = _SlowClock()
    store = MemoryStore(clock=clock.now, max_txn_ops=10)
    from cellstate.keys import CellKeys

    keys = CellKeys("expired")
    cell(store, keys, 8)
    submit_jobs(store, keys, [Job("g", JobKind.BATCH, 8, MEMBER, gang=True)], 0.0)
    scheduler = make_scheduler("batch", "s", 0)

    def slow(entry, tasks, view_):
        clock.t += GANG_LEASE_TTL + 2.0
        return scheduler.decide(entry, tasks, view_)

    p = OptimisticPlacer("s", StoreCommitter(store, keys), ConflictMode.RESOURCE_FIT, CommitMode.INCREMENTAL,
                         RetryPolicy(max_attempts=1, base_wait_s=0.0, max_wait_s=0.0), clock)
    result = p.place("g", ReplicaView(store, keys), slow)
    assert result.gave_up and not result.placed and result.attempts[0].failed_transactions == 0
    reason = record(store, keys, "g").reason
    assert "reservation expired before commit (the decision took 7.00 s, the lease 5 s)" in reason, reason
    assert check_cell(store, keys).ok


def test_a_gang_that_does_not_fit_now_names_the_cell_state(etcd_store, cell_keys):
    """A gang of 3 on 3 machines, one of them busy: refused all-or-nothing, and the reason gives the
    machines up and busy (it fits the empty cell, so it is not 'never fits')."""
    store, keys = etcd_store, cell_keys
    cell(store, keys, 3)
    submit_jobs(store, keys, [Job("other", JobKind.BATCH, 1, MEMBER, duration_s=3600.0),
                              Job("g", JobKind.BATCH, 3, MEMBER, gang=True)], 1.0)
    place_gang(store, keys, "other", ["m1"])
    view = ReplicaView(store, keys)
    view.pump()
    result = placer(store, keys).place("g", view, make_scheduler("batch", "s", 0).decide)
    assert not result.placed
    reason = record(store, keys, "g").reason
    assert reason.endswith("task 2: no machine fits: resources_fit: cpu (3 machines)); the cell has 3 machines up, 1 busy"), reason


def test_a_gang_too_big_for_the_preemption_txn_is_evicted_right_after():
    """At 8 ops per txn the rest of the gang does not fit the preempting plan: the plan evicts its
    one member, and the placer evicts the other two in the next txn; the gang ends whole."""
    from cellstate.keys import CellKeys

    store, keys = MemoryStore(max_txn_ops=8), CellKeys("small")
    cell(store, keys, 3)
    submit_jobs(store, keys, [Job("g", JobKind.BATCH, 3, MEMBER, duration_s=3600.0, gang=True, priority=0),
                              Job("prod", JobKind.SERVICE, 1, MEMBER, priority=200)], 1.0)
    place_gang(store, keys, "g", ["m1", "m2", "m3"])
    view = ReplicaView(store, keys)
    before = store.revision()
    result = placer(store, keys).place("prod", view, lambda e, t, v: Decision([Claim(0, "m1", MEMBER,
                                                                                      evicts=(("g", 0),))], {}))
    assert len(result.placed) == 1 and store.revision() - before == 2
    g = record(store, keys, "g")
    assert g.tasks == "ppp" and "preempted by job 'prod'" in g.reason
    assert machines_of(store, keys, "g") == [] and check_cell(store, keys).ok
