"""One owner per job: a job is served by the scheduler class it names (else its kind's), split
among the live peers of that class by rendezvous hashing, never stolen by age; conflicts are
counted by cause (machine or job)."""

from __future__ import annotations

import threading
from dataclasses import replace

import anyio
import pytest

from fakeview import FakeClock, ReplicaView, batch_job, least_loaded, machine, seed
from runtime_helpers import add_machines, batch_jobs, job_records, submit, wait_for
from cellstate.codec.records import decode_alloc
from cellstate.committer import StoreCommitter
from cellstate.keys import CellKeys
from cellstate.memory.store import MemoryStore
from cellstate.model import Job, JobKind, JobRecord
from cellstate.replica.view import ReplicaView as LiveView
from cellstate.resources import Resources
from cellstate.stats_sink import LeasedStatsSink
from omega.modes import CommitMode, ConflictMode
from omega.occ import OptimisticPlacer
from cellstate.plan import JobEntry
from omega.queue import JobQueue, rendezvous_owner
from omega.retry import RetryPolicy
from omega.runtime import RuntimeOptions, SchedulerProcess
from omega.stats import StatsRecorder
from schedulers.chains import make_scheduler, retry_policy_for


def entry(job_id: str, submitted: float = 0.0) -> JobEntry:
    job = Job(id=job_id, kind=JobKind.BATCH, tasks=1, request=Resources(100, 100))
    return JobEntry(JobRecord.new(job, submitted), mod_revision=1)


def test_without_stealing_an_old_job_stays_with_its_owner():
    jobs = [entry(f"j{i}", submitted=0.0) for i in range(60)]
    crew = ["s1", "s2", "s3"]
    chosen = {me: {e.id for e in JobQueue(me, steal_after_s=None).select(jobs, crew, now=1e6, limit=100)}
              for me in crew}
    assert set().union(*chosen.values()) == {e.id for e in jobs}
    assert sum(map(len, chosen.values())) == len(jobs)  # disjoint: no job is worked on twice
    for me, ids in chosen.items():
        assert all(rendezvous_owner(job_id, crew) == me for job_id in ids)
    # the old rule (stealing after a fixed age) makes every peer take every job
    assert len(JobQueue("s1", steal_after_s=2.0).select(jobs, crew, now=1e6, limit=100)) == len(jobs)


def test_a_gone_peers_jobs_move_to_the_live_peers_only():
    jobs = [entry(f"j{i}") for i in range(60)]
    before = {e.id for e in JobQueue("s1", steal_after_s=None).select(jobs, ["s1", "s2"], now=1.0, limit=100)}
    after = {e.id for e in JobQueue("s1", steal_after_s=None).select(jobs, ["s1"], now=1.0, limit=100)}
    assert before < after == {e.id for e in jobs}
    q = JobQueue("s1", steal_after_s=None)
    q.track(jobs[0])
    assert q.next_steal_at(0.0) is None


def test_scheduler_class_is_the_named_one_else_the_kind():
    job = Job("a", JobKind.SERVICE, 1, Resources(1, 1))
    assert job.scheduler_class == "service"
    assert replace(job, scheduler="borg").scheduler_class == "borg"


@pytest.mark.parametrize("rival_takes, job_conflicts, machine_conflicts", [
    ("the job", 1, 0),        # the rival placed the same job's tasks: only the job record changed
    ("the room", 0, 1),       # the rival filled the machines: a machine conflict
], ids=["job", "machine"])
def test_conflicts_are_counted_by_cause(rival_takes, job_conflicts, machine_conflicts):
    store, keys = MemoryStore(), CellKeys("cause")
    seed(store, keys, [machine("m1"), machine("m2")], [batch_job("A", 2, cpu=3500), batch_job("B", 2, cpu=1000)])
    rival_view, our_view = ReplicaView(store, keys), ReplicaView(store, keys)

    def placer(name, attempts):
        return OptimisticPlacer(name, StoreCommitter(store, keys), ConflictMode.RESOURCE_FIT, CommitMode.INCREMENTAL,
                                RetryPolicy(max_attempts=4), FakeClock(), on_attempt=attempts.append)

    placer("rival", []).place("B" if rival_takes == "the job" else "A", rival_view, least_loaded)
    attempts = []
    placer("us", attempts).place("B", our_view, least_loaded)
    first = attempts[0]
    assert first.failed_transactions == 1 and first.stale_retries == 0
    assert first.job_conflicts == job_conflicts
    assert first.conflict_transactions - first.job_conflicts == machine_conflicts
    assert bool(first.conflicting_machines) == bool(machine_conflicts)
    rec = StatsRecorder("us", "batch")
    rec.record_attempt(0.0, 0.0, txns=first.transactions, commits=first.transactions - first.failed_transactions,
                       conflicts=first.conflict_transactions, retries=0, tasks_placed=0, tasks_unplaced=0,
                       job_placed=False, conflict_machines={}, job_id="B", now=1.0,
                       job_conflicts=first.job_conflicts)
    assert rec.snapshot(2.0).job_conflicts == job_conflicts


def _start(store, keys, kind: str, name: str):
    process = SchedulerProcess(make_scheduler(kind, name, 1), LiveView(store, keys), StoreCommitter(store, keys),
                               LeasedStatsSink(store, keys, name), retry=retry_policy_for(kind),
                               options=RuntimeOptions(stats_interval_s=0.2))
    thread = threading.Thread(target=lambda: anyio.run(process.run, False), daemon=True)
    thread.start()
    return process, thread


def test_a_process_serves_only_the_jobs_of_its_class(etcd_store, cell_keys):
    add_machines(etcd_store, cell_keys, 4)
    plain = batch_jobs("plain", 2, tasks=2, cpu=500)
    routed = [replace(job, scheduler="borg") for job in batch_jobs("routed", 2, tasks=2, cpu=500)]
    submit(etcd_store, cell_keys, plain + routed)

    def tasks() -> dict[str, str]:
        return {r.job.id: r.tasks for r in job_records(etcd_store, cell_keys)}

    batch, batch_thread = _start(etcd_store, cell_keys, "batch", "batch-a")
    try:
        wait_for(lambda: all(tasks()[j.id] == "aa" for j in plain), 10, "the batch-class jobs placed")
        batch.view.pump(0.5)  # a few more rounds: the borg-class jobs stay pending
        assert all(tasks()[j.id] == "pp" for j in routed)
        borg, borg_thread = _start(etcd_store, cell_keys, "borg", "borg-a")
        try:
            wait_for(lambda: all(tasks()[j.id] == "aa" for j in routed), 10, "the borg-class jobs placed")
        finally:
            borg.stop()
            borg_thread.join(10)
    finally:
        batch.stop()
        batch_thread.join(10)
    allocs = [decode_alloc(kv.key, kv.value) for kv in etcd_store.range(cell_keys.kind_prefix("allocs")).kvs]
    schedulers = {a.job_id: a.scheduler for a in allocs}
    assert len(allocs) == 8
    assert {schedulers[j.id] for j in plain} == {"batch-a"} and {schedulers[j.id] for j in routed} == {"borg-a"}
