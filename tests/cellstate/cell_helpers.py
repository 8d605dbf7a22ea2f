"""Test helpers that write cell state the way schedulers do (import as ``from cell_helpers import …``)."""

from __future__ import annotations

from cellstate.codec.records import decode_job_record, decode_machine, encode_alloc, encode_job_record, encode_machine
from cellstate.keys import CellKeys
from cellstate.model import Alloc, Machine, TaskState
from cellstate.resources import Resources
from cellstate.store import Put, Store, mod_revision_is
from cellstate.plan import MachineEntry

SMALL = Resources.of(16_000, 65_536, 100_000)


def seed_machine(store: Store, keys: CellKeys, machine_id: str, cpu: int = 4000) -> MachineEntry:
    """An unloaded up machine with ``cpu`` millicores, 16 GiB, 100 GiB disk; its entry."""
    m = Machine(machine_id, Resources(cpu, 16384, 100_000))
    return MachineEntry(m, store.put(keys.machine(machine_id), encode_machine(m)))


def add_machines(store: Store, keys: CellKeys, count: int, capacity: Resources = SMALL) -> list[str]:
    """Machines m0..m{count-1} in zone-a, unloaded; returns their ids."""
    ids = [f"m{i}" for i in range(count)]
    for machine_id in ids:
        store.put(keys.machine(machine_id), encode_machine(Machine(machine_id, capacity, zone="zone-a")))
    return ids


def place(store: Store, keys: CellKeys, job_id: str, placements: list[tuple[int, str]]) -> int:
    """Place tasks on machines in one txn (as a placement commit); returns the revision."""
    job_kv = store.get(keys.job(job_id))
    record = decode_job_record(job_kv.key, job_kv.value)
    machine_keys = sorted({keys.machine(m) for _, m in placements})
    _, machine_kvs = store.get_many(machine_keys)
    machines = {k: decode_machine(k, kv.value) for k, kv in machine_kvs.items()}
    ops = []
    for task, machine_id in placements:
        key = keys.machine(machine_id)
        machines[key] = machines[key].with_claim(record.job.request)
        ops.append(Put(keys.alloc(job_id, task), encode_alloc(Alloc(job_id, task, machine_id, record.job.request))))
    ops += [Put(k, encode_machine(m)) for k, m in machines.items()]
    ops.append(Put(job_kv.key, encode_job_record(record.with_tasks([t for t, _ in placements], TaskState.PLACED))))
    compares = [mod_revision_is(job_kv.key, job_kv.mod_revision)]
    compares += [mod_revision_is(k, machine_kvs[k].mod_revision) for k in machine_keys]
    result = store.txn(compares, ops, [])
    assert result.succeeded
    return result.revision
