"""Submitting and killing jobs: the writes a user (not a scheduler) makes to a cell.

Submission is idempotent under retries: every txn is guarded by "job key missing", and a retry
after a store error (whose txn may have committed) takes a job already stored with the same
spec as submitted. ``submit_retrying`` retries through outages (tenacity) for a bounded time.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable, Sequence

from tenacity import Retrying, retry_if_exception, stop_before_delay, wait_random_exponential

from cellstate.codec.records import CodecError, decode_alloc, decode_job_record, decode_machine, encode_job_record
from cellstate.codec.kill import KillMarker, encode_kill
from cellstate.codec.trusted import pack_machine
from cellstate.keys import CellKeys
from cellstate.model import Alloc, Job, JobRecord, Machine, TaskState
from cellstate.fastbuild import builder
from cellstate.store import (
    Compacted, Compare, CompareOp, CompareTarget, Delete, Get, KeyValue, Op, PermissionDenied, Put, Store, StoreError,
    TxnTooLarge, mod_revision_is,
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


class UnreadableRecord(ValueError):
    """A value ``kill_job`` must read does not decode (a newer schema version, corruption): the
    kill stops before its next txn; ``committed`` of its txns had gone through (0: nothing written)."""

    def __init__(self, error: CodecError, committed: int):
        self.error, self.committed = error, committed
        written = "nothing written" if not committed else f"{committed} txn(s) of the kill had committed"
        super().__init__(f"cannot read {error}; {written}")


# ------------------------------------------------------------------------------ submit


def submit_jobs(store: Store, keys: CellKeys, jobs: Sequence[Job], now: float, resubmit: bool = False) -> int:
    """Write ``JobRecord.new(job, now)`` for every job; return the store revision after it.

    Refuses the whole submission (JobsExist, nothing written) when any id is already in the
    cell: each txn compares ``missing(job key)`` for all its jobs. The records go in ONE txn
    when they fit the store's ``max_txn_ops`` and request-size limit; otherwise they are split
    into txns of whole jobs, after checking up front that no id exists. Only a concurrent
    writer of the same ids between those txns can then leave a prefix submitted (reported in
    ``JobsExist.committed``). ValueError on duplicate ids within ``jobs``; CodecError on an
    invalid job.

    ``resubmit``: this call retries one that failed with a store error, so some or all of its
    txns may have committed. A job already stored with the same spec then counts as submitted
    (it is not written again); one stored with another spec, or a value that does not decode,
    is still a clash (JobsExist).
    """
    if not jobs:
        raise ValueError("no jobs to submit")
    records = _encoded_records(keys, jobs, now)
    if resubmit:
        records, revision = _not_yet_stored(store, keys, jobs, records)
        if not records:
            return revision
    # one job (a replay's usual submission) is always one chunk
    chunks = [records] if len(records) == 1 else txn_chunks(records, store.max_txn_ops, store.max_request_bytes)
    if len(chunks) > 1 and not resubmit:  # (a resubmission has just checked)
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


def _not_yet_stored(store: Store, keys: CellKeys, jobs: Sequence[Job],
                    records: list[tuple[str, bytes]]) -> tuple[list[tuple[str, bytes]], int]:
    """The records whose job is not stored yet, and the revision read; JobsExist when a job is
    stored with another spec (or a value that does not decode)."""
    revision, present = store.get_many([key for key, _ in records])
    if not present:
        return records, revision
    clashes = []
    for job, (key, _) in zip(jobs, records):
        kv = present.get(key)
        if kv is not None:
            try:
                same = decode_job_record(kv.key, kv.value).job == job
            except CodecError:
                same = False
            if not same:
                clashes.append(job.id)
    if clashes:
        raise JobsExist(sorted(clashes))
    return [(key, value) for key, value in records if key not in present], revision


# Store errors a retry cannot cure: a clash, a refusal, a txn over the store's limits.
_PERMANENT = (JobsExist, PermissionDenied, TxnTooLarge, Compacted)
DEFAULT_RETRY_FOR_S = 60.0


def transient(exc: BaseException) -> bool:
    """A store error that may pass (the store unreachable, a leader lost, a broken stream)."""
    return isinstance(exc, StoreError) and not isinstance(exc, _PERMANENT)


def submit_retrying(store: Store, keys: CellKeys, jobs: Sequence[Job], now: float,
                    retry_for: float = DEFAULT_RETRY_FOR_S,
                    on_retry: Callable[[int, BaseException, float, float], None] | None = None,
                    max_wait: float = 2.0) -> int:
    """``submit_jobs``, retried through transient store errors until ``retry_for`` seconds have
    passed (no retry starts after that; the last error is raised). Every retry is a
    resubmission, so a job whose earlier txn committed without an answer counts as submitted
    and is never written twice. ``on_retry(attempt, error, sleep_s, elapsed_s)`` is called
    before each retry's wait (jittered exponential, at most ``max_wait`` s)."""
    attempts = 0

    def attempt() -> int:
        nonlocal attempts
        attempts += 1
        return submit_jobs(store, keys, jobs, now, resubmit=attempts > 1)

    def before_sleep(state) -> None:
        if on_retry is not None:
            on_retry(state.attempt_number, state.outcome.exception(), state.upcoming_sleep,
                     time.monotonic() - started)

    started = time.monotonic()
    retrying = Retrying(retry=retry_if_exception(transient), stop=stop_before_delay(retry_for),
                        wait=wait_random_exponential(multiplier=0.1, max=max_wait), before_sleep=before_sleep,
                        reraise=True)
    return retrying(attempt)


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
             released: list[Alloc] | None = None, now: float | None = None) -> int:
    """Mark the job killed, delete its allocs and release them from their machines' ledgers.

    The first txn puts the job's kill marker ``kills/{job}`` (``KillMarker``, at ``now``, default
    the wall clock), unless it exists: a placement that writes no job record compares it missing,
    so no task is placed after it; the kill then reads the job again, unless the marker's txn
    directly followed its read of the job's allocs (nothing can have landed). Each later txn compares the
    revisions of the job, of every alloc it deletes and of every machine it updates, and sets the
    killed flag, pending tasks and the released tasks to 'k' (tasks placed by their allocs alone,
    ``JobRecord.with_allocs``, count as placed). When the whole kill fits in ``store.max_txn_ops``
    it is one txn; otherwise the allocs are released in several txns of whole machines (the job is
    marked killed by the first). A lost race re-reads and retries, up to ``attempts`` times in a row
    (KillConflict beyond). JobNotFound when the job is absent; UnreadableRecord when the job's
    record, an alloc or a machine does not decode (all are decoded before a txn is built).
    Returns the revision; ``released``, when given, gets every alloc the kill deleted appended.
    """
    conflicts = committed = 0
    recheck = False  # a gang reservation was in progress: look again once everything is released
    marked = False
    revision = 0
    while True:
        try:
            job_kv, record, allocs, machines, read_at = _read_job_state(store, keys, job_id)
        except CodecError as exc:
            raise UnreadableRecord(exc, committed) from None
        if not marked:
            marked, wrote = _mark_killed(store, keys, job_kv, time.time() if now is None else now)
            if wrote:
                committed += 1
                revision = wrote
            elif not marked:  # the job changed identity under us: read again (JobNotFound if gone)
                conflicts += 1
                if conflicts >= attempts:
                    raise KillConflict(f"job {job_id!r} changed during {attempts} kill attempts")
            if not wrote or wrote != read_at + 1:
                continue  # (read again: from the marker on, no placement lands without the record)
            # (nothing was written between the read of the allocs and the marker: the read is current)
        record = record.with_allocs(alloc for _, alloc in allocs.values())
        # A gang reservation in progress (gangs/{job}) adds allocations without writing the job
        # record: the kill deletes the gang key, so none can land afterwards, and reads again.
        gang = store.get(keys.gang(job_id))
        if recheck and not allocs and gang is None:
            return revision
        compares, ops, deleted = _kill_step(keys, job_kv, record, allocs, machines,
                                            store.max_txn_ops - (gang is not None))
        if gang is not None:
            ops.append(Delete(gang.key))
            recheck = True
        result = store.txn(compares, ops, [])
        if not result.succeeded:
            conflicts += 1
            if conflicts >= attempts:
                raise KillConflict(f"job {job_id!r} changed during {attempts} kill attempts")
            continue
        conflicts = 0
        committed += 1
        revision = result.revision
        if released is not None:
            released.extend(deleted)
        if len(ops) - 1 - (gang is not None) >= _live_count(allocs, machines) and not recheck:
            return result.revision


def _mark_killed(store: Store, keys: CellKeys, job_kv: KeyValue, now: float) -> tuple[bool, int]:
    """Put the kill marker of the job read as ``job_kv`` unless it exists; (marked, the revision
    of the txn that put it, 0 if none). Compares the job's create_revision (the job still
    exists, whatever changed in it) and the marker missing; False when the job is gone."""
    job_id = keys.parse(job_kv.key)[1][0]
    marker = keys.kill(job_id)
    result = store.txn([Compare(job_kv.key, CompareTarget.CREATE, CompareOp.EQ, job_kv.create_revision),
                        Compare(marker, CompareTarget.CREATE, CompareOp.EQ, 0)],
                       [Put(marker, encode_kill(KillMarker(job_id, float(now))))], [Get(marker)])
    if result.succeeded:
        return True, result.revision
    return bool(result.reads and result.reads[0]), 0


def _read_job_state(store: Store, keys: CellKeys, job_id: str):
    """The job's kv and record, its allocs (key -> (kv, Alloc)), their machines (key -> (kv,
    Machine), or None when absent) and the store's revision when the allocs were read;
    CodecError when any of them does not decode."""
    job_kv = store.get(keys.job(job_id))
    if job_kv is None:
        raise JobNotFound(job_id)
    record = decode_job_record(job_kv.key, job_kv.value)
    alloc_range = store.range(keys.job_allocs(job_id))
    allocs = {kv.key: (kv, decode_alloc(kv.key, kv.value)) for kv in alloc_range.kvs}
    machine_keys = sorted({keys.machine(a.machine_id) for _, a in allocs.values()})
    _, present = store.get_many(machine_keys) if machine_keys else (0, {})
    machines = {key: (kv, decode_machine(kv.key, kv.value)) if (kv := present.get(key)) else None
                for key in machine_keys}
    return job_kv, record, allocs, machines, alloc_range.revision


def _live_count(allocs: dict, machines: dict) -> int:
    """Ops needed to release everything: one delete per alloc and one put per present machine."""
    return len(allocs) + sum(1 for entry in machines.values() if entry is not None)


def _kill_step(keys: CellKeys, job_kv: KeyValue, record: JobRecord, allocs: dict, machines: dict,
               max_ops: int) -> tuple[list[Compare], list[Op], list[Alloc]]:
    """Compares and ops of one kill txn (the job record plus as many whole machines as fit),
    and the allocs it deletes."""
    by_machine: dict[str, list[tuple[str, KeyValue, Alloc]]] = {}
    for key, (kv, alloc) in sorted(allocs.items()):
        by_machine.setdefault(keys.machine(alloc.machine_id), []).append((key, kv, alloc))
    compares: list[Compare] = [mod_revision_is(job_kv.key, job_kv.mod_revision)]
    ops: list[Op] = []
    released: list[int] = []
    deleted: list[Alloc] = []
    for machine_key, group in sorted(by_machine.items()):
        machine = machines[machine_key]
        need = len(group) + (machine is not None)
        if ops and 1 + len(ops) + need > max_ops:
            break
        compares.append(mod_revision_is(machine_key, machine[0].mod_revision if machine else 0))
        ops.extend(_release_ops(machine, group))
        compares.extend(mod_revision_is(key, kv.mod_revision) for key, kv, _ in group)
        released.extend(alloc.task_index for _, _, alloc in group)
        deleted.extend(alloc for _, _, alloc in group)
    ops.insert(0, Put(job_kv.key, encode_job_record(_killed(record, released, allocs))))
    return compares, ops, deleted


def _release_ops(machine_entry: tuple[KeyValue, Machine] | None, group: list) -> list[Op]:
    ops: list[Op] = [Delete(key) for key, _, _ in group]
    if machine_entry is not None:
        machine_kv, machine = machine_entry
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
