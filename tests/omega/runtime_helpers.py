"""Cells and workloads for the scheduler-process tests: uniform machines, batch jobs, waiting."""

from __future__ import annotations

import time

from cellstate.codec.records import decode_alloc, decode_job_record, encode_machine
from cellstate.model import Job, JobKind, Machine
from cellstate.resources import Resources
from cellstate.store import Put
from cellstate.submit import submit_jobs

CAPACITY = Resources.of(4_000, 16_384, 100_000)


def add_machines(store, keys, count: int, capacity: Resources = CAPACITY) -> list[str]:
    """``count`` up machines m00, m01… in one txn; their ids."""
    machines = [Machine(f"m{i:02d}", capacity, zone=f"zone-{i % 3}") for i in range(count)]
    store.txn((), [Put(keys.machine(m.id), encode_machine(m)) for m in machines])
    return [m.id for m in machines]


def batch_jobs(prefix: str, count: int, tasks: int, cpu: int, kind: JobKind = JobKind.BATCH) -> list[Job]:
    return [Job(f"{prefix}{i:03d}", kind, tasks, Resources.of(cpu, 256)) for i in range(count)]


def submit(store, keys, jobs: list[Job]) -> int:
    return submit_jobs(store, keys, jobs, time.time())


def job_records(store, keys) -> list:
    """The effective job records (placements that wrote no record applied: ``with_allocs``)."""
    jobs = store.range(keys.kind_prefix("jobs"))
    allocs: dict[str, list] = {}
    for kv in store.range(keys.kind_prefix("allocs"), jobs.revision).kvs:
        alloc = decode_alloc(kv.key, kv.value)
        allocs.setdefault(alloc.job_id, []).append(alloc)
    records = [decode_job_record(kv.key, kv.value) for kv in jobs.kvs]
    return [r.with_allocs(allocs.get(r.id, ())) for r in records]


def settled(store, keys, expected_placed: int) -> bool:
    """True when ``expected_placed`` tasks are placed and every pending task has a reason."""
    records = job_records(store, keys)
    placed = sum(r.tasks.count("a") for r in records)
    return placed == expected_placed and all(r.reason for r in records if "p" in r.tasks)


def wait_for(predicate, timeout: float, what: str, interval: float = 0.05):
    """Poll ``predicate`` until it returns a truthy value; AssertionError naming ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
