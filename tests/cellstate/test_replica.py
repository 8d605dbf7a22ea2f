"""Replica: listing, watching, indexes, local applies, quarantine, resume and relist.

Every store-facing test runs on MemoryStore and on the session's real etcd; outages of a
real server are in ``test_replica_outage.py`` (they need their own etcd).
"""

from __future__ import annotations

import time

import pytest

from cellstate.memory.store import MemoryStore
from cellstate.model import JobKind
from cellstate.replica.watched import Replica
from cellstate.replica.thread import ReplicaThread
from cellstate.store import Delete, Put, Unavailable
from cellstate.plan import AllocEntry, JobEntry, MachineEntry
from replica_helpers import alloc, assert_matches_store, catch_up, job, machine, raw, write

BACKENDS = ["memory", "etcd"]


@pytest.fixture(params=BACKENDS, ids=BACKENDS)
def store(request):
    if request.param == "etcd":
        yield request.getfixturevalue("etcd_store")
        return
    memory = MemoryStore(max_txn_ops=10_000, max_request_bytes=32 << 20)
    yield memory
    memory.close()


@pytest.fixture
def errors():
    """Decode errors reported to the replica's handler, as (key, error) pairs."""
    return []


@pytest.fixture
def replica(store, cell_keys, errors):
    r = Replica(store, cell_keys, on_decode_error=lambda key, exc: errors.append((key, exc)))
    yield r
    r.close()


def populate(store, keys) -> int:
    write(store, keys, *(machine(i, tasks=1) for i in range(4)),
          job("pending"), job("placed", "aa"), job("killed", "pp", killed=True),
          job("svc", "pa", kind=JobKind.SERVICE),
          alloc("placed", 0, "m0"), alloc("placed", 1, "m1"), alloc("svc", 1, "m2"), alloc("gone", 0, "m3"))
    store.put(keys.stats("batch-1"), b"\x81\xa1n\x01")
    return store.put(keys.conflict("batch-1", 7), b"\x80")


# -- listing and watching ------------------------------------------------------------------


def test_sync_equals_the_store_content(store, cell_keys, replica, errors):
    revision = populate(store, cell_keys)
    assert replica.sync() == revision == replica.revision
    assert_matches_store(replica, store, cell_keys)
    assert replica.machine_count() == 4 and replica.machine("m2").mod_revision == revision - 2
    assert {e.id for e in replica.pending_jobs(JobKind.BATCH)} == {"pending"}
    assert {e.id for e in replica.pending_jobs(JobKind.SERVICE)} == {"svc"}
    batch, service = replica.pending_lookup(JobKind.BATCH), replica.pending_lookup(JobKind.SERVICE)
    assert batch("pending") is replica.job("pending") and service("svc") is replica.job("svc")
    assert batch("placed") is batch("killed") is batch("svc") is service("pending") is None
    assert replica.stats() == {cell_keys.stats("batch-1"): b"\x81\xa1n\x01"}
    assert not errors and not replica.quarantine


def test_watch_applies_events_in_revision_order(store, cell_keys, replica):
    replica.sync()
    revisions = [write(store, cell_keys, machine(0, tasks=n)) for n in (1, 2, 3)]
    write(store, cell_keys, machine(1), job("j", "pp"))
    write(store, cell_keys, deletes=[cell_keys.machine("m1")])
    write(store, cell_keys, job("j", "ap"), alloc("j", 0, "m0"))
    last = write(store, cell_keys, machine(1, cpu=8000))
    assert catch_up(replica, last) == 9
    assert replica.revision == last
    assert replica.machine("m0") == MachineEntry(machine(0, tasks=3), revisions[-1])
    assert replica.machine("m1") == MachineEntry(machine(1, cpu=8000), last)
    assert replica.job("j").record.tasks == "ap"
    assert_matches_store(replica, store, cell_keys)
    assert replica.pump() == 0


def test_pump_honours_max_batches_and_timeout(store, cell_keys, replica):
    replica.sync()
    last = [write(store, cell_keys, machine(i)) for i in range(3)][-1]
    applied = 0
    deadline = time.monotonic() + 10
    while applied < 1:  # an etcd watch delivers asynchronously
        applied = replica.pump(0.5, max_batches=1)
        assert time.monotonic() < deadline
    assert applied == 1 and replica.revision < last
    catch_up(replica, last)
    start = time.monotonic()
    assert replica.pump(0.2) == 0
    assert 0.15 <= time.monotonic() - start < 2.0


# -- indexes -------------------------------------------------------------------------------

# (id, steps: each step is (values to put, key names to delete), expectations)
INDEX_CASES = [
    ("two-tasks-one-machine", [([alloc("j", 0, "m0"), alloc("j", 1, "m0")], [])],
     {"on": {"m0": {("j", 0), ("j", 1)}}, "of": {"j": {0, 1}}}),
    ("delete-one-alloc", [([alloc("j", 0, "m0"), alloc("j", 1, "m0")], []), ([], [("j", 1)])],
     {"on": {"m0": {("j", 0)}}, "of": {"j": {0}}}),
    ("delete-last-alloc", [([alloc("j", 0, "m0")], []), ([], [("j", 0)])],
     {"on": {"m0": set()}, "of": {"j": set()}}),
    ("alloc-moves-machine", [([alloc("j", 0, "m0")], []), ([alloc("j", 0, "m1")], [])],
     {"on": {"m0": set(), "m1": {("j", 0)}}, "of": {"j": {0}}}),
    ("job-fully-placed-leaves-pending", [([job("a", "pp"), job("b")], []), ([job("a", "aa")], [])],
     {"pending": {JobKind.BATCH: {"b"}, JobKind.SERVICE: set()}}),
    ("killed-job-leaves-pending", [([job("a", "pp")], []), ([job("a", "pp", killed=True)], [])],
     {"pending": {JobKind.BATCH: set()}}),
    ("deleted-job-leaves-pending", [([job("a", "pp"), job("s", "p", JobKind.SERVICE)], []), ([], ["a"])],
     {"pending": {JobKind.BATCH: set(), JobKind.SERVICE: {"s"}}}),
    ("task-back-to-pending", [([job("a", "aa")], []), ([job("a", "pa")], [])],
     {"pending": {JobKind.BATCH: {"a"}}}),
]


def _delete_key(keys, name):
    return keys.alloc(*name) if isinstance(name, tuple) else keys.job(name)


@pytest.mark.parametrize("path", ["watch", "sync"])
@pytest.mark.parametrize("steps, want", [c[1:] for c in INDEX_CASES], ids=[c[0] for c in INDEX_CASES])
def test_indexes_follow_puts_and_deletes(store, cell_keys, replica, path, steps, want):
    if path == "watch":
        replica.sync()
    for values, deletes in steps:
        last = write(store, cell_keys, *values, deletes=[_delete_key(cell_keys, d) for d in deletes])
    if path == "sync":
        replica.sync()
    catch_up(replica, last)
    for mid, expected in want.get("on", {}).items():
        assert {(a.job_id, a.task_index) for a in replica.allocs_on(mid)} == expected
    for job_id, expected in want.get("of", {}).items():
        assert {a.task_index for a in replica.allocs_of(job_id)} == expected
    for kind, expected in want.get("pending", {}).items():
        assert {e.id for e in replica.pending_jobs(kind)} == expected
    assert_matches_store(replica, store, cell_keys)


# -- the owner's own commits ------------------------------------------------------------------


def test_local_apply_is_idempotent_with_the_watch(store, cell_keys, replica):
    write(store, cell_keys, machine(0), job("j", "pp"), alloc("old", 0, "m0"))
    replica.sync()
    puts = dict([raw(cell_keys, machine(0, tasks=1)), raw(cell_keys, alloc("j", 0, "m0")),
                 raw(cell_keys, job("j", "ap"))])
    gone = cell_keys.alloc("old", 0)
    result = store.txn((), [Put(k, v) for k, v in puts.items()] + [Delete(gone)])
    assert replica.apply_local(result.revision, puts, [gone]) == 4
    assert replica.machine("m0") == MachineEntry(machine(0, tasks=1), result.revision)
    assert [a.job_id for a in replica.allocs_on("m0")] == ["j"]
    assert replica.pending_jobs() == [JobEntry(job("j", "ap"), result.revision)]
    assert replica.apply_local(result.revision, puts.items(), [gone]) == 0
    assert catch_up(replica, result.revision) == 0  # the watch's copy is skipped
    assert_matches_store(replica, store, cell_keys)
    later = write(store, cell_keys, machine(0, tasks=2))
    assert catch_up(replica, later) == 1


def test_a_commit_applied_as_objects_matches_the_store(store, cell_keys, replica):
    write(store, cell_keys, machine(0), job("j", "pp"), alloc("old", 0, "m0"))
    replica.sync()
    values = (machine(0, tasks=1), alloc("j", 0, "m0"), job("j", "ap"))
    gone = cell_keys.alloc("old", 0)
    result = store.txn((), [Put(*raw(cell_keys, v)) for v in values] + [Delete(gone)])
    rev = result.revision
    entries = dict(machines=[MachineEntry(values[0], rev)], jobs=[JobEntry(values[2], rev)],
                   allocs={cell_keys.alloc("j", 0): values[1]}, deletes=[gone])
    assert replica.apply_commit(rev, **entries) == 4
    assert replica.machine("m0") == MachineEntry(machine(0, tasks=1), rev) and replica.mod_revision(gone) == rev
    assert [a.job_id for a in replica.allocs_on("m0")] == ["j"] and list(replica.allocs_of("old")) == []
    assert replica.pending_jobs() == [JobEntry(job("j", "ap"), rev)]
    assert replica.apply_commit(rev, **entries) == 0
    assert catch_up(replica, rev) == 0  # the watch's copy is skipped
    assert_matches_store(replica, store, cell_keys)


@pytest.mark.parametrize("revision, allocs, error", [
    (0, {}, "positive int"),
    (99, {"/omega/cells/other/allocs/j/0": None}, "not in cell"),
], ids=["revision-zero", "key-of-another-cell"])
def test_apply_commit_refuses_misuse(store, cell_keys, replica, revision, allocs, error):
    replica.sync()
    with pytest.raises(ValueError, match=error):
        replica.apply_commit(revision, allocs=allocs)


def test_a_local_delete_is_not_undone_by_an_older_watch_event(store, cell_keys, replica):
    replica.sync()
    key = cell_keys.alloc("j", 0)
    write(store, cell_keys, alloc("j", 0, "m0"))  # not pumped yet
    revision = store.txn((), [Delete(key)]).revision
    assert replica.apply_local(revision, deletes=[key]) == 1
    assert catch_up(replica, revision) == 0
    assert list(replica.allocs()) == [] and replica.mod_revision(key) == 0
    assert_matches_store(replica, store, cell_keys)


def test_apply_entries_takes_only_newer_entries(store, cell_keys, replica):
    first = write(store, cell_keys, machine(0), machine(1), job("j"))
    replica.sync()
    newer = write(store, cell_keys, machine(0, tasks=1), job("j", "app"))
    gone = write(store, cell_keys, deletes=[cell_keys.machine("m1")])
    stale = MachineEntry(machine(0, tasks=9), first)
    applied = replica.apply_entries([stale, MachineEntry(machine(0, tasks=1), newer)],
                                    [JobEntry(job("j", "app"), newer)], revision=gone, deleted_machines=["m1"])
    assert applied == 3
    assert replica.machine("m0").machine.task_count == 1 and replica.machine("m1") is None
    assert replica.pending_jobs() == [JobEntry(job("j", "app"), newer)]
    assert replica.apply_entries([stale]) == 0
    assert catch_up(replica, gone) == 0
    assert_matches_store(replica, store, cell_keys)


def test_local_apply_refuses_keys_of_another_cell(store, cell_keys, replica):
    replica.sync()
    with pytest.raises(ValueError, match="not in cell"):
        replica.apply_local(replica.revision + 1, {"/omega/cells/other/machines/m0": b""})


# -- values that do not decode -------------------------------------------------------------------

BAD_VALUES = [
    ("garbage-bytes", "machines/x", b"\xc1garbage", "not a msgpack value"),
    ("job-under-machines", "machines/x", None, "type tag"),
    ("machine-id-not-its-key", "machines/x", "m9", "does not match its key"),
    ("alloc-task-not-its-key", "allocs/j/1", "j/0", "does not match its key"),
    ("unknown-kind", "bogus/x", b"\x80", "unknown kind"),
]


def _bad_value(keys, spec):
    if spec is None:
        return raw(keys, job("x"))[1]
    if spec == "m9":
        return raw(keys, machine("m9"))[1]
    if spec == "j/0":
        return raw(keys, alloc("j", 0, "m0"))[1]
    return spec


def _good_value(keys, name):
    """A value that decodes for ``name``; None where none can (the key is deleted instead)."""
    if name.startswith("bogus/"):
        return None
    if name.startswith("allocs/"):
        return raw(keys, alloc("j", 1, "m0"))[1]
    return raw(keys, machine("x"))[1] if name.startswith("machines/") else b"\x80"


@pytest.mark.parametrize("path", ["watch", "sync"])
@pytest.mark.parametrize("name, bad, message", [b[1:] for b in BAD_VALUES], ids=[b[0] for b in BAD_VALUES])
def test_a_bad_value_is_quarantined_then_cleared(store, cell_keys, replica, errors, path, name, bad, message):
    key = cell_keys.prefix + name
    write(store, cell_keys, machine("x"), alloc("j", 1, "m0"))
    replica.sync()
    if path == "sync":
        store.put(key, _bad_value(cell_keys, bad))
        replica.sync()
    else:
        catch_up(replica, store.put(key, _bad_value(cell_keys, bad)))
    assert [k for k, _ in errors] == [key] and message in str(errors[0][1])
    assert message in replica.quarantine[key]
    if name == "machines/x":
        assert replica.machine("x") is None and all(e.id != "x" for e in replica.machines())
    if name.startswith("allocs/"):
        assert list(replica.allocs_of("j")) == [] and list(replica.allocs_on("m0")) == []
    assert_matches_store(replica, store, cell_keys)
    good = _good_value(cell_keys, name)
    catch_up(replica, store.delete(key) if good is None else store.put(key, good))
    assert key not in replica.quarantine and len(errors) == 1
    assert_matches_store(replica, store, cell_keys)


def test_deleting_a_quarantined_key_clears_it(store, cell_keys, replica):
    replica.sync()
    key = cell_keys.machine("x")
    catch_up(replica, store.put(key, b"\xc1"))
    assert key in replica.quarantine
    catch_up(replica, store.delete(key))
    assert replica.quarantine == {}


# -- broken streams, compaction --------------------------------------------------------------------


def test_memory_disconnect_resumes_without_loss_or_duplicates(cell_keys):
    store = MemoryStore()
    replica = Replica(store, cell_keys)
    replica.sync()
    write(store, cell_keys, machine(0))
    store.disconnect_watches()
    last = write(store, cell_keys, machine(1), machine(2))
    assert replica.pump() == 3 and replica.revision == last and replica.resumes == 1
    store.disconnect_watches()
    assert replica.pump() == 0 and replica.resumes == 2
    assert replica.pump() == 0 and replica.resumes == 2
    last = write(store, cell_keys, machine(3))
    assert replica.pump() == 1 and replica.revision == last
    assert_matches_store(replica, store, cell_keys)


def test_compaction_while_watching_relists_and_converges(store, cell_keys, replica):
    write(store, cell_keys, machine(0), machine(1), alloc("j", 0, "m1"))
    replica.sync()
    write(store, cell_keys, machine(0, tasks=1), alloc("j", 0, "m0"))
    write(store, cell_keys, machine(2), deletes=[cell_keys.machine("m1")])
    last = write(store, cell_keys, job("j", "a"))
    store.compact(last)
    # A memory watch is a cursor and meets the compaction itself; a current etcd watch already
    # holds the events, so reopen it as after a disconnect, from the replica's revision + 1.
    replica.reconnect()
    catch_up(replica, last)
    assert replica.relists == 1 and replica.revision == last
    assert_matches_store(replica, store, cell_keys)
    after = write(store, cell_keys, machine(3))
    assert catch_up(replica, after) == 1


def test_memory_compaction_without_reconnect_relists(cell_keys):
    store = MemoryStore()
    replica = Replica(store, cell_keys)
    replica.sync()
    write(store, cell_keys, machine(0))
    last = write(store, cell_keys, machine(1))
    store.compact(last)
    replica.pump()
    assert replica.relists == 1 and replica.revision == last and replica.machine_count() == 2


class FakeTime:
    """A clock that only moves when the replica sleeps."""

    def __init__(self):
        self.now, self.sleeps = 0.0, []

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


def test_pump_gives_up_after_the_configured_outage(cell_keys):
    store, fake = MemoryStore(), FakeTime()
    replica = Replica(store, cell_keys, clock=fake.clock, sleep=fake.sleep, give_up_after=5.0)
    replica.sync()
    store.close()
    with pytest.raises(Unavailable):
        replica.pump()
    assert 5.0 <= fake.now < 7.0
    assert fake.sleeps[:3] == [0.05, 0.1, 0.2] and max(fake.sleeps) == 1.0


@pytest.mark.parametrize("call, error", [
    (lambda r: r.pump(), RuntimeError),
    (lambda r: r.pump(-1.0), ValueError),
    (lambda r: r.apply_local(0, {}), ValueError),
], ids=["pump-before-sync", "negative-timeout", "revision-zero"])
def test_misuse_is_refused_clearly(cell_keys, call, error):
    with pytest.raises(error):
        call(Replica(MemoryStore(), cell_keys))


def test_replica_thread_keeps_a_locked_view_current(store, cell_keys):
    thread = ReplicaThread(Replica(store, cell_keys), poll_interval=0.01).start()
    try:
        last = write(store, cell_keys, machine(0), job("j"))
        deadline = time.monotonic() + 10
        while True:
            with thread.locked() as view:
                if view.revision >= last:
                    assert view.machine("m0") is not None and [e.id for e in view.pending_jobs()] == ["j"]
                    break
            assert time.monotonic() < deadline, "replica thread did not catch up"
            time.sleep(0.01)
        assert thread.error is None
    finally:
        thread.stop()


@pytest.mark.parametrize("path", ["apply_local", "apply_commit", "apply_entries", "apply_quarantined"])
def test_a_change_applied_ahead_of_the_watch_is_not_undone_by_an_older_batch(cell_keys, path):
    """Whatever path applied the owner's newer values (its commit as bytes or as objects, a
    failed commit's fresh entries or its quarantined reads), the watch's older batch, pumped
    alone, changes nothing, and the watch's copy of the newer txn is skipped."""
    store = MemoryStore()
    replica = Replica(store, cell_keys)
    replica.sync()
    older = write(store, cell_keys, machine(0, tasks=1), job("j", "pp"), alloc("j", 0, "m0"))
    newer_values = (machine(0, tasks=2), job("j", "ap"), alloc("j", 0, "m1"))
    newer = write(store, cell_keys, *newer_values)
    m0, job_key, alloc_key = cell_keys.machine("m0"), cell_keys.job("j"), cell_keys.alloc("j", 0)
    if path == "apply_local":
        assert replica.apply_local(newer, [raw(cell_keys, v) for v in newer_values]) == 3
    elif path == "apply_commit":
        assert replica.apply_commit(newer, [MachineEntry(newer_values[0], newer)], [JobEntry(newer_values[1], newer)],
                                    {alloc_key: newer_values[2]}) == 3
    elif path == "apply_entries":
        assert replica.apply_entries([MachineEntry(newer_values[0], newer)], [JobEntry(newer_values[1], newer)],
                                     revision=newer, allocs=[AllocEntry(newer_values[2], newer)]) == 3
    else:
        assert replica.apply_quarantined({key: (newer, "bad") for key in (m0, job_key, alloc_key)}) == 3
    held = ({m0: replica.machine("m0"), job_key: replica.job("j"), alloc_key: replica.alloc_entry("j", 0)},
            [replica.mod_revision(k) for k in (m0, job_key, alloc_key)])
    assert replica.pump(1.0, max_batches=1) == 0 and replica.revision == older  # the older batch: skipped
    assert ({m0: replica.machine("m0"), job_key: replica.job("j"), alloc_key: replica.alloc_entry("j", 0)},
            [replica.mod_revision(k) for k in (m0, job_key, alloc_key)]) == held
    assert held[1] == [newer] * 3
    assert catch_up(replica, newer) == 0  # the watch's copy of the newer txn: skipped too
    replica.close()
