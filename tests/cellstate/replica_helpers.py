"""Helpers of the replica tests: cell values, writes, and a check that a replica equals the store."""

from __future__ import annotations

import time

from cellstate.codec.records import decode_alloc, decode_job_record, decode_machine, encode_alloc, encode_job_record, \
    encode_machine
from cellstate.keys import CellKeys
from cellstate.model import Alloc, Job, JobKind, JobRecord, Machine
from cellstate.replica.watched import Replica
from cellstate.resources import Resources
from cellstate.store import Delete, Put

REQUEST = Resources(100, 128)


def machine(i: int | str, tasks: int = 0, cpu: int = 4000) -> Machine:
    mid = i if isinstance(i, str) else f"m{i}"
    return Machine(mid, Resources(cpu, 8192, 100_000), allocated=REQUEST.scaled(tasks), task_count=tasks)


def job(job_id: str, states: str = "ppp", kind: JobKind = JobKind.BATCH, killed: bool = False) -> JobRecord:
    return JobRecord(Job(job_id, kind, len(states), REQUEST), states, killed=killed)


def alloc(job_id: str, task: int, machine_id: str) -> Alloc:
    return Alloc(job_id, task, machine_id, REQUEST)


def raw(keys: CellKeys, value) -> tuple[str, bytes]:
    """(key, bytes) of a Machine, JobRecord or Alloc in the cell of ``keys``."""
    if isinstance(value, Machine):
        return keys.machine(value.id), encode_machine(value)
    if isinstance(value, JobRecord):
        return keys.job(value.id), encode_job_record(value)
    return keys.alloc(value.job_id, value.task_index), encode_alloc(value)


def write(store, keys: CellKeys, *values, deletes=()) -> int:
    """Put the values and delete the keys in one txn; the new revision."""
    ops = [Put(*raw(keys, v)) for v in values] + [Delete(k) for k in deletes]
    return store.txn((), ops).revision


def catch_up(replica: Replica, revision: int, timeout: float = 10.0) -> int:
    """Pump until the replica reached ``revision``; events applied."""
    deadline = time.monotonic() + timeout
    applied = 0
    while replica.revision < revision:
        assert time.monotonic() < deadline, f"replica at {replica.revision}, wanted {revision}"
        applied += replica.pump(0.2)
    return applied


def assert_matches_store(replica: Replica, store, keys: CellKeys) -> None:
    """The replica holds exactly the store's content at the replica's revision, indexes included."""
    kvs = store.range(keys.prefix, replica.revision).kvs
    by_kind: dict[str, dict] = {"machines": {}, "jobs": {}, "allocs": {}, "stats": {}, "conflicts": {}}
    for kv in kvs:
        if kv.key in replica.quarantine:
            continue
        kind, _ = keys.parse(kv.key)
        decode = {"machines": decode_machine, "jobs": decode_job_record, "allocs": decode_alloc}.get(kind)
        by_kind[kind][kv.key] = (decode(kv.key, kv.value) if decode else kv.value, kv.mod_revision)
    assert {e.id: (e.machine, e.mod_revision) for e in replica.machines()} == {
        m.id: (m, rev) for m, rev in by_kind["machines"].values()}
    assert {e.id: (e.record, e.mod_revision) for e in replica.jobs()} == {
        r.id: (r, rev) for r, rev in by_kind["jobs"].values()}
    allocs = [a for a, _ in by_kind["allocs"].values()]
    assert sorted(replica.allocs(), key=_alloc_id) == sorted(allocs, key=_alloc_id)
    assert {k: v for k, (v, _) in by_kind["stats"].items()} == replica.stats_raw
    assert {k: v for k, (v, _) in by_kind["conflicts"].items()} == replica.conflicts_raw
    _assert_indexes(replica, allocs)


def _alloc_id(a: Alloc) -> tuple[str, int]:
    return a.job_id, a.task_index


def _assert_indexes(replica: Replica, allocs: list[Alloc]) -> None:
    machine_ids = {a.machine_id for a in allocs} | {e.id for e in replica.machines()}
    for mid in machine_ids:
        assert sorted(replica.allocs_on(mid), key=_alloc_id) == sorted(
            (a for a in allocs if a.machine_id == mid), key=_alloc_id), f"allocs_on({mid!r})"
    for job_id in {a.job_id for a in allocs} | {e.id for e in replica.jobs()}:
        assert sorted(replica.allocs_of(job_id), key=_alloc_id) == sorted(
            (a for a in allocs if a.job_id == job_id), key=_alloc_id), f"allocs_of({job_id!r})"
    for kind in JobKind:
        want = {e.id for e in replica.jobs() if e.record.job.kind is kind and e.record.pending_tasks()}
        assert {e.id for e in replica.pending_jobs(kind)} == want, f"pending_jobs({kind})"
    assert {e.id for e in replica.pending_jobs()} == {e.id for e in replica.jobs() if e.record.pending_tasks()}
