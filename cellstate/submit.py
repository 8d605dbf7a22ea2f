"""Submitting and killing jobs: the writes a user (not a scheduler) makes to a cell."""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from cellstate.codec import decode_alloc, decode_job_record, decode_machine, encode_job_record
from cellstate.codec_trusted import pack_machine
from cellstate.keys import CellKeys
from cellstate.model import Alloc, Job, JobRecord, Machine, TaskState
from cellstate.fastbuild import builder
from cellstate.store import (
    Compare, CompareOp, CompareTarget, Delete, KeyValue, Op, Put, Store, StoreError, mod_revision_is,
)

# Per-op framing allowance when packing a txn below the store's request-size limit.
_OP_BYTES = 48
_SIZE_MARGIN = 0.8


# A submission's ops, built without their dataclass __init__ (cellstate.fastbuild): a replay
# submits tens of thousands of jobs.
_PUT, _COMPARE, _RECORD = builder(Put), builder(Compare), builder(JobRecord)
_PENDING = TaskState.PENDING.value
_CREATE, _EQ = CompareTarget.CREATE, CompareOp.EQ


class JobsExist(StoreError):
    """Some job ids of a submission are already in the cell; ``committed`` jobs were written
    before the clash was found (0 unless a concurrent writer raced a multi-txn submission)."""

    def __init__(self, job_ids: Sequence[str], committed: int = 0):
        self.job_ids, self.committed = tuple(job_ids), committed
        shown = ", ".join(self.job_ids[:10]) + (" …" if len(self.job_ids) > 10 else "")
        extra = f"; {committed} job(s) before them were already submitted" if committed else ""
        super().__init__(f"{len(self.job_ids)} job id(s) already exist: {shown}{extra}")


class JobNotFound(StoreError):
    def __init__(self, job_id: str):
        self.job_id = job_id
        super().__init__(f"no job {job_id!r} in the cell")


class KillConflict(StoreError):
    """The job kept changing under ``kill_job`` for all its attempts."""


# ------------------------------------------------------------------------------ submit


def submit_jobs(store: Store, keys: CellKeys, jobs: Sequence[Job], now: float) -> int:
    """Write ``JobRecord.new(job, now)`` for every job; return the store revision after it.

    Refuses the whole submission (JobsExist, nothing written) when any id is already in the
    cell: each txn compares ``missing(job key)`` for all its jobs. The records go in ONE txn
    when they fit the store's ``max_txn_ops`` and request-size limit; otherwise they are split
    into txns of whole jobs, after checking up front that no id exists. Only a concurrent
    writer of the same ids between those txns can then leave a prefix submitted (reported in
    ``JobsExist.committed``). ValueError on duplicate ids within ``jobs``; CodecError on an
    invalid job.
    """
    if not jobs:
        raise ValueError("no jobs to submit")
    records = _encoded_records(keys, jobs, now)
    # one job (a replay's usual submission) is always one chunk
    chunks = [records] if len(records) == 1 else txn_chunks(records, store.max_txn_ops, store.max_request_bytes)
    if len(chunks) > 1:
        _, present = store.get_many([key for key, _ in records])
        if present:
            raise JobsExist(_ids_of(keys, present))
    committed, revision = 0, 0
    for chunk in chunks:
        result = store.txn([_COMPARE(key, _CREATE, _EQ, 0) for key, _ in chunk],  # missing(key)
                           [_PUT(key, value, 0) for key, value in chunk], [])
        if not result.succeeded:
            _, present = store.get_many([key for key, _ in chunk])
            raise JobsExist(_ids_of(keys, present), committed)
        committed += len(chunk)
        revision = result.revision
    return revision


def _encoded_records(keys: CellKeys, jobs: Sequence[Job], now: float) -> list[tuple[str, bytes]]:
    seen: set[str] = set()
    records = []
    prefix = keys.kind_prefix("jobs")  # + id: ``keys.job``
    for job in jobs:
        job_id = job.id
        if job_id in seen:
            raise ValueError(f"job id {job_id!r} appears twice in one submission")
        seen.add(job_id)
        record = _RECORD(job, _PENDING * job.tasks, now, "", False, None, None)  # JobRecord.new(job, now)
        records.append((f"{prefix}{job_id}", encode_job_record(record)))
    return records


def txn_chunks(records: list[tuple[str, bytes]], max_ops: int, max_bytes: int) -> list[list]:
    """Consecutive runs of (key, value) puts, each guarded by one compare per key, within the
    op limit and (with a margin) the request-size limit of one txn."""
    budget = max_bytes * _SIZE_MARGIN
    chunks: list[list] = [[]]
    size = 0
    for key, value in records:
        cost = 2 * len(key) + len(value) + 2 * _OP_BYTES
        if chunks[-1] and (len(chunks[-1]) >= max_ops or size + cost > budget):
            chunks.append([])
            size = 0
        chunks[-1].append((key, value))
        size += cost
    return chunks


def _ids_of(keys: CellKeys, present: dict[str, KeyValue]) -> list[str]:
    return sorted(keys.parse(key)[1][0] for key in present)


# -------------------------------------------------------------------------------- kill


def kill_job(store: Store, keys: CellKeys, job_id: str, attempts: int = 5,
             released: list[Alloc] | None = None) -> int:
    """Mark the job killed, delete its allocs and release them from their machines' ledgers.

    Each txn compares the revisions of the job, of every alloc it deletes and of every machine
    it updates, and sets the killed flag, pending tasks and the released tasks to 'k'. When the
    whole kill fits in ``store.max_txn_ops`` it is one txn; otherwise the allocs are released
    in several txns of whole machines (the job is marked killed by the first, so no scheduler
    places more tasks meanwhile). A lost race re-reads and retries, up to ``attempts`` times in
    a row (KillConflict beyond). JobNotFound when the job is absent. Returns the revision;
    ``released``, when given, gets every alloc the kill deleted appended.
    """
    conflicts = 0
    while True:
        job_kv, allocs, machines = _read_job_state(store, keys, job_id)
        compares, ops, deleted = _kill_step(keys, job_kv, allocs, machines, store.max_txn_ops)
        result = store.txn(compares, ops, [])
        if not result.succeeded:
            conflicts += 1
            if conflicts >= attempts:
                raise KillConflict(f"job {job_id!r} changed during {attempts} kill attempts")
            continue
        conflicts = 0
        if released is not None:
            released.extend(deleted)
        if len(ops) - 1 >= _live_count(allocs, machines):
            return result.revision


def _read_job_state(store: Store, keys: CellKeys, job_id: str):
    """The job's kv, its allocs (key -> (kv, Alloc)), and their machines (key -> kv or None)."""
    job_kv = store.get(keys.job(job_id))
    if job_kv is None:
        raise JobNotFound(job_id)
    alloc_range = store.range(keys.job_allocs(job_id))
    allocs = {kv.key: (kv, decode_alloc(kv.key, kv.value)) for kv in alloc_range.kvs}
    machine_keys = sorted({keys.machine(a.machine_id) for _, a in allocs.values()})
    _, present = store.get_many(machine_keys) if machine_keys else (0, {})
    machines = {key: present.get(key) for key in machine_keys}
    return job_kv, allocs, machines


def _live_count(allocs: dict, machines: dict) -> int:
    """Ops needed to release everything: one delete per alloc and one put per present machine."""
    return len(allocs) + sum(1 for kv in machines.values() if kv is not None)


def _kill_step(keys: CellKeys, job_kv: KeyValue, allocs: dict, machines: dict,
               max_ops: int) -> tuple[list[Compare], list[Op], list[Alloc]]:
    """Compares and ops of one kill txn (the job record plus as many whole machines as fit),
    and the allocs it deletes."""
    record = decode_job_record(job_kv.key, job_kv.value)
    by_machine: dict[str, list[tuple[str, KeyValue, Alloc]]] = {}
    for key, (kv, alloc) in sorted(allocs.items()):
        by_machine.setdefault(keys.machine(alloc.machine_id), []).append((key, kv, alloc))
    compares: list[Compare] = [mod_revision_is(job_kv.key, job_kv.mod_revision)]
    ops: list[Op] = []
    released: list[int] = []
    deleted: list[Alloc] = []
    for machine_key, group in sorted(by_machine.items()):
        machine_kv = machines[machine_key]
        need = len(group) + (machine_kv is not None)
        if ops and 1 + len(ops) + need > max_ops:
            break
        compares.append(mod_revision_is(machine_key, machine_kv.mod_revision if machine_kv else 0))
        ops.extend(_release_ops(machine_kv, group))
        compares.extend(mod_revision_is(key, kv.mod_revision) for key, kv, _ in group)
        released.extend(alloc.task_index for _, _, alloc in group)
        deleted.extend(alloc for _, _, alloc in group)
    ops.insert(0, Put(job_kv.key, encode_job_record(_killed(record, released, allocs))))
    return compares, ops, deleted


def _release_ops(machine_kv: KeyValue | None, group: list) -> list[Op]:
    ops: list[Op] = [Delete(key) for key, _, _ in group]
    if machine_kv is not None:
        machine: Machine = decode_machine(machine_kv.key, machine_kv.value)
        for _, _, alloc in group:
            machine = machine.with_release(alloc.resources)
        ops.append(Put(machine_kv.key, pack_machine(machine)))
    return ops


def _killed(record: JobRecord, released: list[int], allocs: dict) -> JobRecord:
    """The record killed: pending tasks, released tasks and live tasks without an alloc -> 'k'."""
    with_alloc = {alloc.task_index for _, alloc in allocs.values()}
    to_kill = set(released)
    for index, char in enumerate(record.tasks):
        if char == TaskState.PENDING or (char in "ar" and index not in with_alloc):
            to_kill.add(index)
    to_kill &= set(range(len(record.tasks)))
    return replace(record.with_tasks(sorted(to_kill), TaskState.KILLED), killed=True)
