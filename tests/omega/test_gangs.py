"""Gangs larger than one transaction (omega/gangs.py, cellstate/gang_commit.py): a 1,024-task gang
at etcd's default 128 ops per txn is reserved in chunks (its tasks stay pending) and placed by
one last txn; a rival filling machines between chunks; releases on giving up, on a kill and
after the reserving scheduler died (its lease expired: ``omega check`` names the orphaned
reservation until the next holder releases it). Each on the memory store and a real etcd."""

from __future__ import annotations

import time

import pytest

from cellstate.check import check_cell
from cellstate.codec.records import decode_alloc, decode_job_record, decode_machine
from cellstate.committer import StoreCommitter
from cellstate.gang_commit import GangCommits
from cellstate.keys import CellKeys
from cellstate.memory.store import MemoryStore
from cellstate.store import EventKind
from cellstate.submit import kill_job
from fakeview import FakeClock, ReplicaView, batch_job, least_loaded, machine, seed
from omega.modes import CommitMode, ConflictMode
from omega.occ import OptimisticPlacer
from cellstate.plan import Claim, Plan
from omega.protocols import Decision
from omega.retry import RetryPolicy

TASKS = 1024
OPS = 128  # etcd's default --max-txn-ops
CHUNK = (OPS - 1) // 2  # 63 claims per chunk
TTL = 2  # the test gang leases (seconds)


@pytest.fixture(params=["memory", "etcd"])
def cell(request):
    """(store, keys, clock): the memory store's leases run on ``clock``; etcd's on wall time."""
    if request.param == "memory":
        clock = FakeClock()
        return MemoryStore(clock=clock.now), CellKeys("gangs"), clock
    return request.getfixturevalue("etcd_store"), request.getfixturevalue("cell_keys"), FakeClock()


def gang_cell(store, keys, machines: int = 80, tasks: int = TASKS) -> int:
    """``machines`` machines of 16 cores and one gang of ``tasks`` one-core tasks; the revision."""
    return seed(store, keys, [machine(f"m{i:03d}", cpu=16_000) for i in range(machines)],
                [batch_job("g", tasks, gang=True)])


class Gangs:
    """``GangCommits`` with a hook before each chunk (``before(n, plan)``, n from 1) and a
    ``dead`` switch: once set, nothing is released or ended (a scheduler that died)."""

    def __init__(self, committer: StoreCommitter, before=None):
        self.inner = GangCommits(committer, ttl=TTL)
        self.max_claims_per_txn = self.inner.max_claims_per_txn
        self.before = before
        self.chunks = 0
        self.dead = False

    def begin(self, job, scheduler, now, ttl=None):
        return self.inner.begin(job, scheduler, now, ttl)

    def keep_alive(self, hold):
        return self.inner.keep_alive(hold)

    def reserve(self, hold, plan):
        self.chunks += 1
        if self.before is not None:
            self.before(self.chunks, plan)
        if self.dead:
            raise RuntimeError("the scheduler died")
        return self.inner.reserve(hold, plan)

    def finish(self, hold, plan):
        return self.inner.finish(hold, plan)

    def release(self, hold):
        return [] if self.dead else self.inner.release(hold)

    def end(self, hold):
        if not self.dead:
            self.inner.end(hold)


def placer_on(store, keys, clock, before=None, name="s", attempts=None):
    committer = StoreCommitter(store, keys, max_txn_ops=OPS)
    committer.gangs = gangs = Gangs(committer, before)
    placer = OptimisticPlacer(name, committer, ConflictMode.RESOURCE_FIT, CommitMode.INCREMENTAL,
                              RetryPolicy(max_attempts=4), clock,
                              on_attempt=None if attempts is None else attempts.append)
    return placer, gangs


def fill_up(machine_ids):
    """A decide that claims every free core of ``machine_ids`` (one-core tasks)."""
    def decide(job, tasks, view):
        spots = [m for m in machine_ids for _ in range(view.machine(m).machine.free.cpu // 1000)]
        return Decision([Claim(t, m, job.record.job.request) for t, m in zip(tasks, spots)])
    return decide


def job_of(store, keys, job_id="g"):
    kv = store.get(keys.job(job_id))
    return decode_job_record(kv.key, kv.value)


def allocs_of(store, keys, job_id="g"):
    return [decode_alloc(kv.key, kv.value) for kv in store.range(keys.job_allocs(job_id)).kvs]


def events_since(store, keys, start: int, until: int):
    """Every event of the cell from ``start`` to ``until`` (the watch's history)."""
    stream = store.watch(keys.prefix, start)
    events = []
    try:
        while not events or events[-1].mod_revision < until:
            batch = stream.next(5.0)
            assert batch is not None, "the watch stopped short"
            events.extend(batch.events)
    finally:
        stream.cancel()
    return events


def test_a_1024_task_gang_is_reserved_in_chunks_and_placed_by_one_txn(cell):
    store, keys, clock = cell
    start = gang_cell(store, keys)
    view = ReplicaView(store, keys)
    mid = []
    placer, gangs = placer_on(store, keys, clock, before=lambda n, plan: mid.append(store.revision()))
    result = placer.place("g", view, least_loaded)
    assert len(result.placed) == TASKS and result.pending == ()
    assert gangs.chunks == -(-TASKS // CHUNK)  # 17 chunks, none failed
    record = job_of(store, keys)
    assert record.tasks == "a" * TASKS and record.placed_at is not None
    end = store.revision()
    events = events_since(store, keys, start + 1, end)
    job_puts = [e for e in events if e.key == keys.job("g")]
    alloc_revisions = sorted({e.mod_revision for e in events if e.key.startswith(keys.job_allocs("g"))})
    # the job record was written once, by the last txn; every alloc was reserved before it
    assert [e.kind for e in job_puts] == [EventKind.PUT]
    final = job_puts[-1].mod_revision
    assert len(alloc_revisions) == gangs.chunks and alloc_revisions[-1] < final
    assert decode_job_record(job_puts[-1].key, job_puts[-1].value).tasks == "a" * TASKS
    gang_events = [e for e in events if e.key == keys.gang("g")]
    assert gang_events[0].kind is EventKind.PUT and gang_events[-1].kind is EventKind.DELETE
    assert gang_events[-1].mod_revision == final  # the gang key goes with the last txn
    # between chunks: tasks pending, reservations legal while the gang key is there
    for revision in mid[1:]:
        at = check_cell(store, keys, revision)
        assert at.ok, at.violations
        kv = store.range(keys.job("g"), revision).kvs[0]
        assert decode_job_record(kv.key, kv.value).tasks == "p" * TASKS
    assert check_cell(store, keys).ok
    assert store.get(keys.gang("g")) is None


def test_a_rival_filling_machines_between_chunks_is_worked_around(cell):
    store, keys, clock = cell
    gang_cell(store, keys)
    seed(store, keys, jobs=[batch_job("filler", 48, cpu=1000)])
    view = ReplicaView(store, keys)
    rival = OptimisticPlacer("rival", StoreCommitter(store, keys), ConflictMode.RESOURCE_FIT,
                             CommitMode.INCREMENTAL, RetryPolicy(max_attempts=4), clock)
    taken = []

    def fill(n, plan):  # before chunk 3: the rival takes what is free on three of its machines
        if n != 3:
            return
        rival_view = ReplicaView(store, keys)
        targets = list(dict.fromkeys(c.machine_id for c in plan.claims))[:3]
        taken.extend(targets)
        assert len(rival.place("filler", rival_view, fill_up(targets)).placed) > 0
        rival_view.close()

    attempts = []
    placer, _ = placer_on(store, keys, clock, before=fill, attempts=attempts)
    result = placer.place("g", view, least_loaded)
    assert len(result.placed) == TASKS and job_of(store, keys).tasks == "a" * TASKS
    assert attempts[-1].failed_transactions >= 1  # the chunk on the filled machines failed once
    for machine_id in taken:  # full, by the rival and the gang's earlier chunks
        kv = store.get(keys.machine(machine_id))
        assert decode_machine(kv.key, kv.value).free.cpu == 0
    report = check_cell(store, keys)
    assert report.ok, report.violations


def test_giving_up_releases_every_reservation(cell):
    """The rival takes 40 of the 80 machines after 3 chunks: the gang no longer fits."""
    store, keys, clock = cell
    gang_cell(store, keys)
    seed(store, keys, jobs=[batch_job("filler", 640, cpu=1000)])
    view = ReplicaView(store, keys)
    rival = OptimisticPlacer("rival", StoreCommitter(store, keys), ConflictMode.RESOURCE_FIT,
                             CommitMode.INCREMENTAL, RetryPolicy(max_attempts=4), clock)
    reserved_before = []

    def fill(n, plan):  # before chunk 4: the rival takes every free core of half the machines
        if n != 4:
            return
        reserved_before.append(len(allocs_of(store, keys)))
        rival_view = ReplicaView(store, keys)
        half = sorted(m.id for m in rival_view.machines())[:40]
        assert len(rival.place("filler", rival_view, fill_up(half)).placed) > 400
        rival_view.close()

    placer, _ = placer_on(store, keys, clock, before=fill)
    result = placer.place("g", view, least_loaded)
    assert reserved_before == [3 * CHUNK]
    assert result.placed == () and len(result.pending) == TASKS
    record = job_of(store, keys)
    assert record.tasks == "p" * TASKS and "gang of 1024 tasks: only" in record.reason
    assert allocs_of(store, keys) == [] and store.get(keys.gang("g")) is None
    report = check_cell(store, keys)
    assert report.ok, report.violations


def test_a_kill_between_chunks_releases_every_reservation(cell):
    store, keys, clock = cell
    gang_cell(store, keys)
    view = ReplicaView(store, keys)

    def kill(n, plan):
        if n == 5:
            kill_job(store, keys, "g")

    placer, _ = placer_on(store, keys, clock, before=kill)
    result = placer.place("g", view, least_loaded)
    assert result.placed == ()
    record = job_of(store, keys)
    assert record.killed and record.tasks == "k" * TASKS
    assert allocs_of(store, keys) == [] and store.get(keys.gang("g")) is None
    report = check_cell(store, keys)
    assert report.ok, report.violations


def test_a_dead_schedulers_reservation_expires_and_the_next_holder_releases_it(cell):
    store, keys, clock = cell
    gang_cell(store, keys)
    died = {}

    def die(n, plan):
        if n == 6:
            died["reserved"] = len(allocs_of(store, keys))
            gangs.dead = True

    placer, gangs = placer_on(store, keys, clock, before=die)
    with pytest.raises(RuntimeError, match="died"):
        placer.place("g", ReplicaView(store, keys), least_loaded)
    assert died == {"reserved": 5 * CHUNK}
    assert job_of(store, keys).tasks == "p" * TASKS and store.get(keys.gang("g")) is not None
    assert check_cell(store, keys).ok  # a reservation in progress, as far as anyone can tell
    clock.sleep(TTL + 1)  # the memory store's leases run on the clock
    if isinstance(store, MemoryStore):
        store.expire_leases()
    deadline = time.monotonic() + 5 * TTL + 10
    while store.get(keys.gang("g")) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert store.get(keys.gang("g")) is None, "the gang key outlived its lease"
    report = check_cell(store, keys)
    assert report.kinds() == {"orphaned-reservation"} and len(report.violations) == 1
    assert "orphaned gang reservation" in report.violations[0].message
    # no agent starts these tasks: they are pending, and the ledgers still hold them
    assert sum(1 for _ in allocs_of(store, keys)) == 5 * CHUNK
    successor, _ = placer_on(store, keys, clock, name="s2")
    result = successor.place("g", ReplicaView(store, keys), least_loaded)
    assert len(result.placed) == TASKS and job_of(store, keys).tasks == "a" * TASKS
    assert all(a.scheduler == "s2" for a in allocs_of(store, keys))  # the orphans were released first
    report = check_cell(store, keys)
    assert report.ok, report.violations


def test_a_gang_held_by_another_waits_without_writing(cell):
    store, keys, clock = cell
    gang_cell(store, keys, tasks=200)
    committer = StoreCommitter(store, keys, max_txn_ops=OPS)
    view = ReplicaView(store, keys)
    hold = committer.gangs.begin(view.job("g"), "other", 1.0)
    assert hold is not None
    before = store.get(keys.job("g")).mod_revision
    placer, _ = placer_on(store, keys, clock)
    result = placer.place("g", view, least_loaded)
    assert result.placed == () and store.get(keys.job("g")).mod_revision == before
    committer.gangs.end(hold)
    assert store.get(keys.gang("g")) is None
    assert len(placer.place("g", view, least_loaded).placed) == 200


def test_a_gang_that_fits_one_txn_commits_as_before(cell):
    """No gang key, one txn: the placement path is unchanged for gangs within the limit."""
    store, keys, clock = cell
    start = gang_cell(store, keys, tasks=CHUNK)
    placer, gangs = placer_on(store, keys, clock)
    result = placer.place("g", ReplicaView(store, keys), least_loaded)
    assert len(result.placed) == CHUNK and gangs.chunks == 0
    assert store.revision() == start + 1


class _ChunkAfterRead:
    """A store whose first range of the gang's allocs lets a reservation chunk land right after
    the read (a kill racing a chunk)."""

    def __init__(self, store, keys, land):
        self._store, self._prefix, self._land = store, keys.job_allocs("g"), land

    def __getattr__(self, name):
        return getattr(self._store, name)

    def range(self, prefix, revision=None):
        result = self._store.range(prefix, revision)
        if prefix == self._prefix and self._land is not None:
            land, self._land = self._land, None
            land()
        return result


def test_a_kill_racing_a_chunk_releases_what_landed_after_its_read():
    store, keys = MemoryStore(), CellKeys("race")
    gang_cell(store, keys, machines=4, tasks=100)
    committer = StoreCommitter(store, keys, max_txn_ops=OPS)
    view = ReplicaView(store, keys)
    entry = view.job("g")
    hold = committer.gangs.begin(entry, "s", 1.0)
    plan = Plan(entry, (Claim(0, "m000", entry.record.job.request),), {"m000": view.machine("m000")}, "s")
    landed = []
    kill_job(_ChunkAfterRead(store, keys, lambda: landed.append(committer.gangs.reserve(hold, plan)[0].committed)),
             keys, "g")
    assert landed == [True]
    assert job_of(store, keys).tasks == "k" * 100 and allocs_of(store, keys) == []
    assert store.get(keys.gang("g")) is None
    report = check_cell(store, keys)
    assert report.ok, report.violations
