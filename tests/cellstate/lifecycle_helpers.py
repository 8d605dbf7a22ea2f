"""Helpers of the lifecycle tests: a cell written by hand with the codec, ledgers charged,
and readers returning the entries the txn builders take (import as ``from lifecycle_helpers import …``)."""

from __future__ import annotations

from cellstate.codec.records import decode_alloc, decode_job_record, decode_machine, encode_alloc, encode_job_record, \
    encode_machine
from cellstate.keys import CellKeys
from cellstate.model import Alloc, Job, JobKind, JobRecord, Machine
from cellstate.resources import Resources
from cellstate.store import Put, Store
from cellstate.plan import JobEntry, MachineEntry

CAPACITY = Resources.of(8_000, 16_384, 100_000)
REQUEST = Resources.of(500, 1_024, 10)


def write_placed(store: Store, keys: CellKeys, machines: dict[str, list[tuple[str, int]]],
                 jobs: dict[str, tuple[JobKind, int, str]], placed_at: float = 1.0) -> int:
    """Write machines with charged ledgers, job records and allocs in one txn.

    ``machines``: machine id -> [(job id, task)] placed on it; ``jobs``: job id -> (kind, tasks,
    task-state string). Every alloc holds REQUEST. Returns the revision."""
    ops = []
    for machine_id, placed in machines.items():
        ledger = Machine(machine_id, CAPACITY, zone="zone-a").with_claim(REQUEST.scaled(len(placed)), len(placed))
        ops.append(Put(keys.machine(machine_id), encode_machine(ledger)))
        for job_id, task in placed:
            alloc = Alloc(job_id, task, machine_id, REQUEST, scheduler="hand", placed_at=placed_at)
            ops.append(Put(keys.alloc(job_id, task), encode_alloc(alloc)))
    for job_id, (kind, tasks, states) in jobs.items():
        job = Job(job_id, kind, tasks, REQUEST, duration_s=5.0 if kind is JobKind.BATCH else None)
        ops.append(Put(keys.job(job_id), encode_job_record(JobRecord(job, states))))
    result = store.txn([], ops, [])
    assert result.succeeded
    return result.revision


def machine_entry(store: Store, keys: CellKeys, machine_id: str) -> MachineEntry:
    kv = store.get(keys.machine(machine_id))
    return MachineEntry(decode_machine(kv.key, kv.value), kv.mod_revision)


def job_entry(store: Store, keys: CellKeys, job_id: str) -> JobEntry:
    kv = store.get(keys.job(job_id))
    return JobEntry(decode_job_record(kv.key, kv.value), kv.mod_revision)


def allocs_of(store: Store, keys: CellKeys, job_id: str) -> list[Alloc]:
    return [decode_alloc(kv.key, kv.value) for kv in store.range(keys.job_allocs(job_id)).kvs]


def all_allocs(store: Store, keys: CellKeys) -> list[Alloc]:
    return [decode_alloc(kv.key, kv.value) for kv in store.range(keys.kind_prefix("allocs")).kvs]
