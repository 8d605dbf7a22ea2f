"""check_cell: a clean cell passes; each planted violation is found (and nothing else)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cell_helpers import SMALL, add_machines, place
from cellstate.check import check_cell
from cellstate.codec.records import decode_alloc, decode_job_record, decode_machine, encode_alloc, encode_job_record, encode_machine
from cellstate.model import Alloc, Job, JobKind, Machine, TaskState
from cellstate.resources import ZERO, Resources
from cellstate.submit import submit_jobs

REQUEST = Resources.of(2000, 4096)


@pytest.fixture
def cell(etcd_store, cell_keys):
    """Machines m0..m2; job a (3 tasks: 0 on m0, 1 on m1, 2 pending); job b (1 task on m0)."""
    add_machines(etcd_store, cell_keys, 3)
    submit_jobs(etcd_store, cell_keys, [Job("a", JobKind.SERVICE, 3, REQUEST), Job("b", JobKind.BATCH, 1, REQUEST)], 1.0)
    place(etcd_store, cell_keys, "a", [(0, "m0"), (1, "m1")])
    place(etcd_store, cell_keys, "b", [(0, "m0")])
    return etcd_store, cell_keys


def _machine(store, keys, machine_id) -> Machine:
    kv = store.get(keys.machine(machine_id))
    return decode_machine(kv.key, kv.value)


def _set_machine(store, keys, machine_id, **changes):
    store.put(keys.machine(machine_id), encode_machine(replace(_machine(store, keys, machine_id), **changes)))


def _set_task(store, keys, job_id, task, state):
    kv = store.get(keys.job(job_id))
    store.put(kv.key, encode_job_record(decode_job_record(kv.key, kv.value).with_tasks([task], state)))


def _put_alloc(store, key, job_id, task, machine_id, resources=REQUEST):
    store.put(key, encode_alloc(Alloc(job_id, task, machine_id, resources)))


PLANTS = [
    ("undecodable-job", lambda s, k: s.put(k.job("a"), b"\xc1garbage"),
     {"undecodable"}),
    ("undecodable-machine", lambda s, k: s.put(k.machine("m2"), b"\x93\x01\x02\x03"),
     {"undecodable"}),
    ("unknown-kind", lambda s, k: s.put(k.prefix + "widgets/w1", b"x"),
     {"bad-key"}),
    ("deep-machine-key", lambda s, k: s.put(k.machine("m2") + "/extra", encode_machine(Machine("m2", SMALL))),
     {"bad-key"}),
    ("machine-under-wrong-key", lambda s, k: s.put(k.machine("m9"), encode_machine(Machine("m8", SMALL))),
     {"key-mismatch"}),
    ("ledger-off", lambda s, k: _set_machine(s, k, "m1", allocated=REQUEST + Resources.of(1)),
     {"ledger-mismatch"}),
    ("task-count-off", lambda s, k: _set_machine(s, k, "m1", task_count=2),
     {"task-count"}),
    ("over-capacity", lambda s, k: _set_machine(s, k, "m0", capacity=Resources.of(3000, 65536, 100_000)),
     {"over-capacity"}),
    ("placed-twice", lambda s, k: _put_alloc(s, k.alloc("a", 2), "a", 0, "m2", ZERO) or
     _set_machine(s, k, "m2", task_count=1),
     {"placed-twice", "key-mismatch"}),
    ("alloc-without-job", lambda s, k: _put_alloc(s, k.alloc("ghost", 0), "ghost", 0, "m2", ZERO) or
     _set_machine(s, k, "m2", task_count=1),
     {"orphan-alloc"}),
    ("alloc-without-machine", lambda s, k: _put_alloc(s, k.alloc("a", 2), "a", 2, "gone") or
     _set_task(s, k, "a", 2, TaskState.PLACED),
     {"orphan-alloc"}),
    ("task-out-of-range", lambda s, k: _put_alloc(s, k.alloc("b", 5), "b", 5, "m2", ZERO) or
     _set_machine(s, k, "m2", task_count=1),
     {"task-out-of-range"}),
    ("placed-without-alloc", lambda s, k: _set_task(s, k, "a", 2, TaskState.PLACED),
     {"task-state"}),
    ("running-without-alloc", lambda s, k: _set_task(s, k, "a", 2, TaskState.RUNNING),
     {"task-state"}),
    ("alloc-but-finished", lambda s, k: _set_task(s, k, "b", 0, TaskState.FINISHED),
     {"task-state"}),
    ("alloc-deleted", lambda s, k: s.delete(k.alloc("a", 1)),
     {"task-state", "ledger-mismatch", "task-count"}),
]


def test_clean_cell_passes(cell):
    store, keys = cell
    report = check_cell(store, keys)
    assert report.ok, report.violations
    assert (report.machines, report.jobs, report.allocs) == (3, 2, 3)
    assert report.revision == store.revision()


@pytest.mark.parametrize("plant, kinds", [p[1:] for p in PLANTS], ids=[p[0] for p in PLANTS])
def test_finds_planted_violation(cell, plant, kinds):
    store, keys = cell
    clean_revision = store.revision()
    plant(store, keys)
    report = check_cell(store, keys)
    assert report.kinds() == kinds, report.violations
    assert all(v.key.startswith(keys.prefix) and v.message for v in report.violations)
    assert check_cell(store, keys, clean_revision).ok  # reading at one revision: the past is clean


def test_report_to_dict(cell):
    store, keys = cell
    _set_task(store, keys, "a", 2, TaskState.PLACED)
    d = check_cell(store, keys).to_dict()
    assert d["ok"] is False and d["cell"] == keys.cell
    assert d["violations"] == [{"kind": "task-state", "key": keys.job("a"),
                                "message": "task(s) 2 placed/running without an alloc"}]


def test_a_gang_partly_running_is_a_violation(cell):
    """A gang of 2 placed whole is clean; once one member is back to pending (its alloc gone, as an
    eviction leaves it) while the other runs, the gang is reported partial, and only that."""
    store, keys = cell
    submit_jobs(store, keys, [replace(Job("g", JobKind.BATCH, 2, Resources.of(100, 64)), gang=True)], 2.0)
    place(store, keys, "g", [(0, "m1"), (1, "m2")])
    assert check_cell(store, keys).ok
    kv = store.get(keys.alloc("g", 1))
    alloc = decode_alloc(kv.key, kv.value)
    store.delete(kv.key)
    machine = _machine(store, keys, "m2")
    _set_machine(store, keys, "m2", allocated=machine.allocated - alloc.resources, task_count=machine.task_count - 1)
    _set_task(store, keys, "g", 1, TaskState.PENDING)
    report = check_cell(store, keys)
    assert [(v.kind, v.key) for v in report.violations] == [("partial-gang", keys.job("g"))]
    assert "task(s) 0 placed/running while task(s) 1 are pending" in report.violations[0].message
