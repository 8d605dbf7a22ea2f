"""A replica's job entries are the effective records (issue 19.2): after any sequence of
writes, whatever path applied them (watch batches, the owner's own commits, a listing), each
job's entry equals its stored record with ``JobRecord.with_allocs`` of its stored allocations
(at the stored record's mod_revision), and the pending indexes (by kind and by class) hold
exactly the jobs the effective records leave pending."""

from __future__ import annotations

import random

import pytest
from replica_helpers import REQUEST, catch_up

from cellstate.codec.records import decode_alloc, decode_job_record, encode_alloc, encode_job_record
from cellstate.keys import CellKeys
from cellstate.memory.store import MemoryStore
from cellstate.model import Alloc, Job, JobKind, JobRecord
from cellstate.replica.watched import Replica
from cellstate.store import Delete, Put
from cellstate.plan import JobEntry

JOBS = ("j0", "j1", "j2", "g3", "j4")  # g3 is a gang: its records are never derived
TASKS = 6


def _record(rng: random.Random, job_id: str, tasks: int = TASKS) -> JobRecord:
    kind = JobKind.SERVICE if job_id == "j4" else JobKind.BATCH
    states = "".join(rng.choice("ppppaarfk") for _ in range(tasks))
    return JobRecord(Job(job_id, kind, tasks, REQUEST, gang=job_id.startswith("g")), states,
                     killed=rng.random() < 0.1)


def _ops(rng: random.Random, keys: CellKeys, tasks: int = TASKS) -> tuple[list[Put], list[Delete]]:
    """One txn's writes: a few record puts, alloc puts (running or not) and deletes."""
    puts: dict[str, bytes] = {}
    deletes: set[str] = set()
    for _ in range(rng.randrange(1, 6)):
        roll, job_id, task = rng.random(), rng.choice(JOBS), rng.randrange(tasks + 1)  # (the last: out of range)
        if roll < 0.25:
            key, value = keys.job(job_id), encode_job_record(_record(rng, job_id, tasks))
        elif roll < 0.75:
            key = keys.alloc(job_id, task)
            value = encode_alloc(Alloc(job_id, task, f"m{rng.randrange(3)}", REQUEST, running=rng.random() < 0.3))
        else:
            key = keys.alloc(job_id, task) if roll < 0.95 else keys.job(job_id)
            if key not in puts:
                deletes.add(key)
            continue
        if key not in deletes:
            puts[key] = value
    return [Put(k, v) for k, v in puts.items()], [Delete(k) for k in sorted(deletes)]


def _expected(store, keys: CellKeys):
    """{job: (effective record, mod_revision)} and the pending ids by kind, from a listing."""
    listed = store.range(keys.prefix)
    allocs: dict[str, list[Alloc]] = {}
    jobs = {}
    for kv in listed.kvs:
        if kv.key.startswith(keys.kind_prefix("allocs")):
            alloc = decode_alloc(kv.key, kv.value)
            allocs.setdefault(alloc.job_id, []).append(alloc)
    for kv in listed.kvs:
        if kv.key.startswith(keys.kind_prefix("jobs")):
            record = decode_job_record(kv.key, kv.value)
            jobs[record.id] = (record.with_allocs(allocs.get(record.id, ())), kv.mod_revision)
    pending = {kind: {j for j, (r, _) in jobs.items() if r.job.kind is kind and not r.killed and "p" in r.tasks}
               for kind in JobKind}
    return listed.revision, jobs, pending


def _assert_equal(replica: Replica, store, keys: CellKeys) -> None:
    revision, jobs, pending = _expected(store, keys)
    catch_up(replica, revision)
    assert {e.id: (e.record, e.mod_revision) for e in replica.jobs()} == jobs
    assert {kind: {e.id for e in replica.pending_jobs(kind)} for kind in JobKind} == pending
    lookup = replica.pending_class_lookup("batch")
    assert {j for j in jobs if lookup(j) is not None} == pending[JobKind.BATCH]


def _run(store, keys: CellKeys, seed: int, txns: int, tasks: int = TASKS) -> None:
    rng = random.Random(seed)
    replica = Replica(store, keys)
    replica.sync()
    replica.pending_class_lookup("batch")  # the class index kept from the start
    for n in range(txns):
        puts, deletes = _ops(rng, keys, tasks)
        revision = store.txn((), puts + deletes).revision
        if rng.random() < 0.3:  # the owner applies its own commit before the watch brings it
            replica.apply_local(revision, [(p.key, p.value) for p in puts], [d.key for d in deletes])
        if rng.random() < 0.2 or n == txns - 1:
            _assert_equal(replica, store, keys)
    listed = Replica(store, keys)  # the listing path (allocs come before jobs in key order)
    listed.sync()
    listed.pending_class_lookup("batch")
    _assert_equal(listed, store, keys)
    replica.close()
    listed.close()


@pytest.mark.parametrize("seed", range(6))
def test_the_replica_holds_the_rule_after_random_writes(seed):
    _run(MemoryStore(), CellKeys("derived"), seed, 300)


@pytest.mark.parametrize(("seed", "tasks", "txns"), [(0, 40, 1500), (1, 40, 1500), (2, 40, 1500), (3, 300, 1500),
                                                   (4, 5000, 600)])
def test_the_replica_holds_the_rule_with_many_allocs_per_job(seed, tasks, txns):
    """Jobs of 40, 300 or 5,000 tasks: records put of a job with 16 allocs or more test its
    tasks against the job's alloc mask (kept as allocs come and go, dropped with the last one),
    as ints or, from 4,096 tasks, by numpy."""
    _run(MemoryStore(), CellKeys("derived"), seed, txns, tasks=tasks)


def test_the_replica_holds_the_rule_on_etcd(etcd_store, cell_keys):
    _run(etcd_store, cell_keys, 99, 150)


def test_a_record_taken_ahead_of_the_watch_derives_nothing_from_older_allocs(store, keys):
    """A failed commit hands the replica a job record newer than its watch. An alloc the replica
    still holds may have been deleted meanwhile (an eviction: the record back to ``p``, the
    alloc gone); it must not place its task again until the watch brings the delete. Allocs
    written after the record's read (the owner's own commit) do count."""
    record = JobRecord(Job("j", JobKind.BATCH, 3, REQUEST), "ppp", first_attempt_at=1.0)
    store.txn((), [Put(keys.job("j"), encode_job_record(record)),
                   Put(keys.alloc("j", 0), encode_alloc(Alloc("j", 0, "m0", REQUEST)))])
    replica = Replica(store, keys)
    replica.sync()
    assert replica.job("j").record.tasks == "app"
    evicted = JobRecord(record.job, "ppp", reason="machine m0 failed", first_attempt_at=1.0)
    revision = store.txn((), [Delete(keys.alloc("j", 0)), Put(keys.job("j"), encode_job_record(evicted))]).revision
    replica.apply_entries(jobs=[JobEntry(evicted, revision)], revision=revision)
    assert replica.job("j").record.tasks == "ppp" and replica.pending_lookup(JobKind.BATCH)("j") is not None
    own = store.put(keys.alloc("j", 2), encode_alloc(Alloc("j", 2, "m1", REQUEST)))
    replica.apply_local(own, [(keys.alloc("j", 2), encode_alloc(Alloc("j", 2, "m1", REQUEST)))])
    assert replica.job("j").record.tasks == "ppa"
    catch_up(replica, own)
    assert replica.job("j").record.tasks == "ppa" and replica.alloc_entry("j", 0) is None
    replica.close()
