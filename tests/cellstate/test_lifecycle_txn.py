"""The lifecycle transactions (start, finish, fail, drain, repair) against a real etcd."""

from __future__ import annotations

from dataclasses import replace

import pytest
from lifecycle_helpers import CAPACITY, REQUEST, all_allocs, allocs_of, job_entry, machine_entry, write_placed

from cellstate.check import check_cell
from cellstate.codec.records import decode_job_record, decode_machine, encode_job_record
from cellstate.lifecycle_txn import (
    LedgerError, drain_machine_ops, fail_machine_ops, finish_task_ops, repair_machine_ops, start_task_ops,
)
from cellstate.keys import CellKeys
from cellstate.model import Alloc, Job, JobKind, JobRecord, JobState, Machine, MachineState
from cellstate.resources import ZERO
from cellstate.plan import JobEntry, MachineEntry

BATCH, SERVICE = JobKind.BATCH, JobKind.SERVICE
WRITER = "agent:test"


def run(store, ops):
    return store.txn(ops.compares, ops.success, ops.failure)


def assert_clean(store, keys):
    report = check_cell(store, keys)
    assert report.ok, report.violations


# ------------------------------------------------------------------------------- start


def test_start_marks_allocs_running_and_tasks_r(etcd_store, cell_keys):
    write_placed(etcd_store, cell_keys, {"m1": [("j", 0), ("j", 1)]}, {"j": (BATCH, 3, "aap")})
    job = job_entry(etcd_store, cell_keys, "j")
    result = run(etcd_store, start_task_ops(cell_keys, job, allocs_of(etcd_store, cell_keys, "j")))
    assert result.succeeded
    assert job_entry(etcd_store, cell_keys, "j").record.tasks == "rrp"
    assert all(a.running for a in allocs_of(etcd_store, cell_keys, "j"))
    assert_clean(etcd_store, cell_keys)


def test_start_on_a_stale_job_fails_and_reads_the_job(etcd_store, cell_keys):
    write_placed(etcd_store, cell_keys, {"m1": [("j", 0)]}, {"j": (BATCH, 2, "ap")})
    stale = job_entry(etcd_store, cell_keys, "j")
    etcd_store.put(cell_keys.job("j"), encode_job_record(replace(stale.record, reason="changed")))
    result = run(etcd_store, start_task_ops(cell_keys, stale, allocs_of(etcd_store, cell_keys, "j")))
    assert not result.succeeded
    fresh = result.reads[0][0]
    assert decode_job_record(fresh.key, fresh.value).reason == "changed"
    assert not allocs_of(etcd_store, cell_keys, "j")[0].running


# ------------------------------------------------------------------------------ finish


def test_finish_deletes_alloc_releases_ledger_and_finishes_job(etcd_store, cell_keys):
    write_placed(etcd_store, cell_keys, {"m1": [("j", 0)]}, {"j": (BATCH, 1, "r")})
    ops = finish_task_ops(cell_keys, job_entry(etcd_store, cell_keys, "j"), allocs_of(etcd_store, cell_keys, "j"),
                          {"m1": machine_entry(etcd_store, cell_keys, "m1")}, WRITER)
    assert run(etcd_store, ops).succeeded
    machine = machine_entry(etcd_store, cell_keys, "m1").machine
    assert (machine.allocated, machine.task_count, machine.writer) == (ZERO, 0, WRITER)
    record = job_entry(etcd_store, cell_keys, "j").record
    assert (record.tasks, record.state) == ("f", JobState.FINISHED)
    assert allocs_of(etcd_store, cell_keys, "j") == []
    assert_clean(etcd_store, cell_keys)


def test_finish_tasks_on_two_machines_in_one_txn(etcd_store, cell_keys):
    write_placed(etcd_store, cell_keys, {"m1": [("j", 0), ("k", 0)], "m2": [("j", 1)]},
                 {"j": (BATCH, 2, "ra"), "k": (BATCH, 1, "r")})
    machines = {m: machine_entry(etcd_store, cell_keys, m) for m in ("m1", "m2")}
    ops = finish_task_ops(cell_keys, job_entry(etcd_store, cell_keys, "j"), allocs_of(etcd_store, cell_keys, "j"),
                          machines, WRITER)
    assert run(etcd_store, ops).succeeded
    assert machine_entry(etcd_store, cell_keys, "m1").machine.allocated == REQUEST
    assert machine_entry(etcd_store, cell_keys, "m2").machine.task_count == 0
    assert job_entry(etcd_store, cell_keys, "j").record.tasks == "ff"
    assert_clean(etcd_store, cell_keys)


def test_finish_after_a_concurrent_job_change_fails_then_succeeds_on_fresh_state(etcd_store, cell_keys):
    write_placed(etcd_store, cell_keys, {"m1": [("j", 0)]}, {"j": (BATCH, 2, "rp")})
    stale_job = job_entry(etcd_store, cell_keys, "j")
    machines = {"m1": machine_entry(etcd_store, cell_keys, "m1")}
    allocs = allocs_of(etcd_store, cell_keys, "j")
    etcd_store.put(cell_keys.job("j"), encode_job_record(replace(stale_job.record, reason="no fit")))
    first = run(etcd_store, finish_task_ops(cell_keys, stale_job, allocs, machines, WRITER))
    assert not first.succeeded
    fresh_kv = first.reads[1][0]
    fresh = JobEntry(decode_job_record(fresh_kv.key, fresh_kv.value), fresh_kv.mod_revision)
    assert run(etcd_store, finish_task_ops(cell_keys, fresh, allocs, machines, WRITER)).succeeded
    record = job_entry(etcd_store, cell_keys, "j").record
    assert (record.tasks, record.reason) == ("fp", "no fit")
    assert_clean(etcd_store, cell_keys)


# ------------------------------------------------------------------------------- evict


def _evict_all(store, keys, machine_id, build, max_ops):
    """Run eviction txns until nothing is left to evict; returns the number of txns."""
    txns = 0
    while True:
        allocs = [a for a in all_allocs(store, keys) if a.machine_id == machine_id]
        jobs = {a.job_id: job_entry(store, keys, a.job_id) for a in allocs}
        eviction = build(keys, machine_entry(store, keys, machine_id), allocs, jobs, WRITER, max_ops)
        assert run(store, eviction.ops).succeeded
        txns += 1
        assert_clean(store, keys)
        if len(eviction.evicted) == len(allocs):
            return txns


@pytest.mark.parametrize("max_ops, txns", [(128, 1), (4, 2), (3, 3)], ids=["one-txn", "split-4", "split-3"])
def test_fail_machine_with_three_allocs(etcd_store, cell_keys, max_ops, txns):
    write_placed(etcd_store, cell_keys, {"m1": [("j", 0), ("j", 1), ("s", 0)], "m2": [("j", 2)]},
                 {"j": (BATCH, 3, "rar"), "s": (SERVICE, 1, "r")})
    assert _evict_all(etcd_store, cell_keys, "m1", fail_machine_ops, max_ops) == txns
    machine = machine_entry(etcd_store, cell_keys, "m1").machine
    assert (machine.state, machine.allocated, machine.task_count) == (MachineState.DOWN, ZERO, 0)
    j, s = job_entry(etcd_store, cell_keys, "j").record, job_entry(etcd_store, cell_keys, "s").record
    assert (j.tasks, s.tasks) == ("ppr", "p")
    assert j.reason == s.reason == "machine m1 failed"
    assert [a.machine_id for a in all_allocs(etcd_store, cell_keys)] == ["m2"]


def test_fail_machine_kills_tasks_of_a_killed_job(etcd_store, cell_keys):
    write_placed(etcd_store, cell_keys, {"m1": [("j", 0)]}, {"j": (BATCH, 2, "rk")})
    entry = job_entry(etcd_store, cell_keys, "j")
    etcd_store.put(cell_keys.job("j"), encode_job_record(replace(entry.record, killed=True)))
    _evict_all(etcd_store, cell_keys, "m1", fail_machine_ops, 128)
    assert job_entry(etcd_store, cell_keys, "j").record.tasks == "kk"


def test_drain_moves_service_tasks_and_keeps_batch_tasks(etcd_store, cell_keys):
    write_placed(etcd_store, cell_keys, {"m1": [("b", 0), ("s", 0), ("s", 1)]},
                 {"b": (BATCH, 1, "r"), "s": (SERVICE, 2, "rr")})
    services = allocs_of(etcd_store, cell_keys, "s")
    eviction = drain_machine_ops(cell_keys, machine_entry(etcd_store, cell_keys, "m1"), services,
                                 {"s": job_entry(etcd_store, cell_keys, "s")}, WRITER, 128)
    assert run(etcd_store, eviction.ops).succeeded
    machine = machine_entry(etcd_store, cell_keys, "m1").machine
    assert (machine.state, machine.allocated, machine.task_count) == (MachineState.DRAINING, REQUEST, 1)
    record = job_entry(etcd_store, cell_keys, "s").record
    assert (record.tasks, record.reason) == ("pp", "machine m1 draining")
    assert job_entry(etcd_store, cell_keys, "b").record.tasks == "r"
    assert_clean(etcd_store, cell_keys)


def test_repair_brings_a_down_machine_up_empty(etcd_store, cell_keys):
    write_placed(etcd_store, cell_keys, {"m1": [("j", 0)]}, {"j": (BATCH, 1, "r")})
    _evict_all(etcd_store, cell_keys, "m1", fail_machine_ops, 128)
    assert run(etcd_store, repair_machine_ops(cell_keys, machine_entry(etcd_store, cell_keys, "m1"), WRITER)).succeeded
    machine = machine_entry(etcd_store, cell_keys, "m1").machine
    assert (machine.state, machine.task_count, machine.writer) == (MachineState.UP, 0, WRITER)
    kv = etcd_store.get(cell_keys.machine("m1"))
    assert decode_machine(kv.key, kv.value).allocated == ZERO


# ----------------------------------------------------------------------- bad input (pure)


def _entries():
    machine = MachineEntry(Machine("m1", CAPACITY).with_claim(REQUEST), 5)
    job = JobEntry(JobRecord(Job("j", BATCH, 2, REQUEST, duration_s=1.0), "ap"), 7)
    return machine, job


def _bad_calls():
    machine, job = _entries()
    alloc = Alloc("j", 0, "m1", REQUEST)
    keys = CellKeys("c")
    return [
        ("start-pending-task", lambda: start_task_ops(keys, job, [replace(alloc, task_index=1)]), "task state is 'p'"),
        ("start-other-job", lambda: start_task_ops(keys, job, [replace(alloc, job_id="x")]), "not of job 'j'"),
        ("start-twice", lambda: start_task_ops(keys, job, [alloc, alloc]), "given twice"),
        ("start-nothing", lambda: start_task_ops(keys, job, []), "no allocs"),
        ("finish-no-machine", lambda: finish_task_ops(keys, job, [alloc], {}, WRITER), "no ledger of machine"),
        ("finish-twice", lambda: finish_task_ops(keys, job, [alloc, alloc], {"m1": machine}, WRITER), "given twice"),
        ("finish-out-of-range", lambda: finish_task_ops(keys, job, [replace(alloc, task_index=5)],
                                                        {"m1": machine}, WRITER), "has 2 tasks"),
        ("evict-other-machine", lambda: fail_machine_ops(keys, machine, [replace(alloc, machine_id="m2")],
                                                         {"j": job}, WRITER, 128), "is on machine 'm2'"),
        ("evict-job-not-given", lambda: fail_machine_ops(keys, machine, [alloc], {}, WRITER, 128), "no entry"),
        ("evict-tiny-limit", lambda: fail_machine_ops(keys, machine, [alloc], {"j": job}, WRITER, 2), "max_ops"),
    ]


@pytest.mark.parametrize("call, message", [(c, m) for _, c, m in _bad_calls()], ids=[n for n, _, _ in _bad_calls()])
def test_bad_input_is_refused_with_a_clear_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_release_below_zero_is_a_ledger_error():
    machine, job = _entries()
    empty = MachineEntry(replace(machine.machine, allocated=ZERO, task_count=0), 5)
    with pytest.raises(LedgerError, match="negative ledger"):
        finish_task_ops(CellKeys("c"), job,
                        [Alloc("j", 0, "m1", REQUEST)], {"m1": empty}, WRITER)
