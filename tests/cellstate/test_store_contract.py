"""The Store contract: every test runs against MemoryStore and a real etcd (EtcdStore).

Behaviour that etcd shows here is what MemoryStore must copy. Tests on the shared etcd
write only under their own uuid prefix; revision arithmetic assumes no concurrent writer
(pytest runs tests of one session one after another).
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from cellstate.memory.store import MemoryStore
from cellstate.store import (
    Compacted, Compare, CompareOp, CompareTarget, Delete, EventKind, Get, Put, StoreError,
    TxnTooLarge, Unavailable, exists, missing, mod_revision_is,
)

BACKENDS = ["memory", "etcd"]


class FakeClock:
    """A clock the test moves by hand (MemoryStore lease expiry)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture(params=BACKENDS, ids=BACKENDS)
def store(request):
    if request.param == "etcd":
        yield request.getfixturevalue("etcd_store")
        return
    memory = MemoryStore(clock=FakeClock())
    yield memory
    memory.close()


@pytest.fixture
def p():
    """A key prefix no other test uses (the etcd is shared)."""
    return f"/contract/{uuid.uuid4().hex}/"


@pytest.fixture
def elapse(store):
    """Let ``seconds`` pass for the store's leases: the fake clock, or real time for etcd."""
    if isinstance(store, MemoryStore):
        return store.clock.advance
    return time.sleep


@pytest.fixture
def own_store(store, request):
    """A second store of the same kind, the test's own (it may close it), with etcd's default
    limits (128 ops, 1.5 MiB); for etcd a client of the same server."""
    if isinstance(store, MemoryStore):
        yield MemoryStore()
        return
    from cellstate.etcd.store import EtcdStore

    limited = EtcdStore(request.getfixturevalue("etcd_server").endpoints)
    yield limited
    limited.close()


def drain(stream, want_events: int, timeout: float = 10.0):
    """Batches of ``stream`` until ``want_events`` events arrived (fails after ``timeout``)."""
    batches, seen = [], 0
    deadline = time.monotonic() + timeout
    while seen < want_events:
        left = deadline - time.monotonic()
        assert left > 0, f"watch delivered {seen} of {want_events} events: {batches}"
        batch = stream.next(timeout=left)
        if batch is not None and batch.events:
            batches.append(batch)
            seen += len(batch.events)
    return batches


def flat(batches):
    return [ev for batch in batches for ev in batch.events]


# -- keys and revisions ------------------------------------------------------------------


def test_empty_memory_store_starts_at_revision_1():
    store = MemoryStore()
    assert store.revision() == 1
    assert store.range("").kvs == ()
    assert store.delete("/nothing") == 1


def test_put_sets_create_mod_and_version(store, p):
    first = store.put(p + "a", b"1")
    second = store.put(p + "a", b"2")
    kv = store.get(p + "a")
    assert second == first + 1
    assert (kv.key, kv.value, kv.create_revision, kv.mod_revision, kv.version, kv.lease) == \
        (p + "a", b"2", first, second, 2, 0)
    assert store.get(p + "missing") is None


def test_delete_then_put_resets_create_revision_and_version(store, p):
    store.put(p + "a", b"1")
    store.put(p + "a", b"2")
    deleted_at = store.delete(p + "a")
    assert store.get(p + "a") is None
    again = store.put(p + "a", b"3")
    kv = store.get(p + "a")
    assert again == deleted_at + 1
    assert (kv.create_revision, kv.mod_revision, kv.version) == (again, again, 1)


WRITES = [
    ("one-put", lambda p: [Put(p + "n", b"x")], [], ["n"]),
    ("three-puts", lambda p: [Put(p + "n", b"x"), Put(p + "m", b"y"), Put(p + "a", b"z")], [], ["n", "m", "a"]),
    ("put-and-delete-missing", lambda p: [Put(p + "n", b"x"), Delete(p + "nothing")], [], ["n"]),
    ("delete-existing", lambda p: [Delete(p + "a")], ["a"], []),
    ("delete-prefix", lambda p: [Delete(p + "d/", prefix=True)], ["d/1", "d/2", "d/3"], []),
    ("put-and-read", lambda p: [Put(p + "n", b"x"), Get(p + "n")], [], ["n"]),
]


@pytest.mark.parametrize("ops, gone, written", [w[1:] for w in WRITES], ids=[w[0] for w in WRITES])
def test_a_write_txn_raises_the_revision_by_exactly_one(store, p, ops, gone, written):
    for name in ("a", "d/1", "d/2", "d/3", "e"):
        store.put(p + name, b"old")
    before = store.revision()
    result = store.txn([], ops(p))
    assert result.succeeded and result.revision == before + 1 == store.revision()
    for name in written:
        assert store.get(p + name).mod_revision == result.revision
    for name in gone:
        assert store.get(p + name) is None
    assert store.get(p + "e").mod_revision < result.revision


NO_CHANGE = [
    ("empty-txn", lambda p: ([], [], [])),
    ("read-only", lambda p: ([], [Get(p + "a"), Get(p, prefix=True)], [])),
    ("failed-compare-reads", lambda p: ([missing(p + "a")], [Put(p + "a", b"x")], [Get(p + "a")])),
    ("delete-missing", lambda p: ([], [Delete(p + "nothing")], [])),
    ("delete-empty-prefix", lambda p: ([], [Delete(p + "none/", prefix=True)], [])),
]


@pytest.mark.parametrize("txn", [n[1] for n in NO_CHANGE], ids=[n[0] for n in NO_CHANGE])
def test_a_txn_that_changes_nothing_keeps_the_revision(store, p, txn):
    store.put(p + "a", b"1")
    before = store.revision()
    assert store.txn(*txn(p)).revision == before
    assert store.revision() == before
    assert store.delete(p + "also-missing") == before


def test_get_many_reads_present_keys_at_one_revision(store, p):
    store.put(p + "a", b"1")
    rev = store.put(p + "b", b"2")
    revision, found = store.get_many([p + "a", p + "b", p + "c"])
    assert revision == rev
    assert {k: kv.value for k, kv in found.items()} == {p + "a": b"1", p + "b": b"2"}


def test_range_returns_keys_under_the_prefix_sorted(store, p):
    for name in ("m/2", "m/10", "m/1", "mz", "n/1"):
        store.put(p + name, name.encode())
    result = store.range(p + "m/")
    assert [kv.key for kv in result.kvs] == [p + "m/1", p + "m/10", p + "m/2"]
    assert result.revision == store.revision()
    assert store.range(p + "x/").kvs == ()


def test_range_at_an_old_revision_shows_the_state_then(store, p):
    store.put(p + "a", b"a1")
    store.put(p + "b", b"b1")
    then = store.revision()
    store.put(p + "a", b"a2")
    store.delete(p + "b")
    store.put(p + "c", b"c1")
    old = store.range(p, revision=then)
    assert old.revision == then
    assert [(kv.key, kv.value, kv.version) for kv in old.kvs] == [(p + "a", b"a1", 1), (p + "b", b"b1", 1)]
    assert [(kv.key, kv.value) for kv in store.range(p).kvs] == [(p + "a", b"a2"), (p + "c", b"c1")]


def test_range_at_a_future_revision_is_refused(store, p):
    future = store.put(p + "a", b"1") + 5
    with pytest.raises(StoreError, match="future revision") as info:
        store.range(p, revision=future)
    assert not isinstance(info.value, Compacted)


# -- transactions ------------------------------------------------------------------------


def _compare_cases():
    """(id, target, op, value, expected) against key "k": put at C, updated at M, version 2, value b"v2"."""
    cases = []
    for op, results in ((CompareOp.EQ, (False, True, False)), (CompareOp.NE, (True, False, True)),
                        (CompareOp.LT, (False, False, True)), (CompareOp.GT, (True, False, False))):
        for target in (CompareTarget.MOD, CompareTarget.CREATE, CompareTarget.VERSION, CompareTarget.VALUE):
            for rel, expected in zip(("below", "equal", "above"), results):
                cases.append((f"{target.value}-{op.name}-{rel}", target, op, rel, expected))
    return cases


_RELATIVE = {"below": -1, "equal": 0, "above": 1}
_VALUES = {"below": b"v1", "equal": b"v2", "above": b"v3"}


@pytest.mark.parametrize("target, op, rel, expected", [c[1:] for c in _compare_cases()],
                         ids=[c[0] for c in _compare_cases()])
def test_compare_on_an_existing_key(store, p, target, op, rel, expected):
    store.put(p + "k", b"v1")
    store.put(p + "k", b"v2")
    kv = store.get(p + "k")
    actual = {CompareTarget.MOD: kv.mod_revision, CompareTarget.CREATE: kv.create_revision,
              CompareTarget.VERSION: kv.version}
    value = _VALUES[rel] if target is CompareTarget.VALUE else actual[target] + _RELATIVE[rel]
    assert store.txn([Compare(p + "k", target, op, value)], []).succeeded is expected


MISSING = [
    ("mod-eq-0", CompareTarget.MOD, CompareOp.EQ, 0, True),
    ("create-eq-0", CompareTarget.CREATE, CompareOp.EQ, 0, True),
    ("version-lt-1", CompareTarget.VERSION, CompareOp.LT, 1, True),
    ("version-gt-0", CompareTarget.VERSION, CompareOp.GT, 0, False),
    ("mod-ne-0", CompareTarget.MOD, CompareOp.NE, 0, False),
    ("value-eq-empty", CompareTarget.VALUE, CompareOp.EQ, b"", False),
    ("value-ne", CompareTarget.VALUE, CompareOp.NE, b"x", False),
    ("value-lt", CompareTarget.VALUE, CompareOp.LT, b"x", False),
    ("value-gt", CompareTarget.VALUE, CompareOp.GT, b"", False),
]


@pytest.mark.parametrize("target, op, value, expected", [m[1:] for m in MISSING], ids=[m[0] for m in MISSING])
def test_compare_on_a_missing_key(store, p, target, op, value, expected):
    assert store.txn([Compare(p + "none", target, op, value)], []).succeeded is expected


def test_helpers_exists_missing_and_mod_revision(store, p):
    rev = store.put(p + "a", b"1")
    assert store.txn([exists(p + "a"), missing(p + "b"), mod_revision_is(p + "a", rev),
                      mod_revision_is(p + "b", 0)], []).succeeded
    assert not store.txn([exists(p + "b")], []).succeeded
    assert not store.txn([mod_revision_is(p + "a", rev - 1)], []).succeeded


def test_failed_compare_runs_the_failure_branch_with_fresh_reads(store, p):
    seen = store.put(p + "m", b"old")
    store.put(p + "m", b"new")
    result = store.txn([mod_revision_is(p + "m", seen)], [Put(p + "m", b"mine")], [Get(p + "m"), Get(p + "x")])
    assert not result.succeeded
    assert [[kv.value for kv in read] for read in result.reads] == [[b"new"], []]
    assert store.get(p + "m").value == b"new"


def test_reads_in_a_txn_see_the_earlier_writes_of_the_branch(store, p):
    store.put(p + "a", b"1")
    store.put(p + "d/1", b"1")
    result = store.txn([], [Get(p + "a"), Put(p + "a", b"2"), Get(p + "a"), Put(p + "d/2", b"2"),
                            Get(p + "d/", prefix=True), Delete(p + "d/1"), Get(p + "d/", prefix=True)])
    first, after_put, prefix_before, prefix_after = result.reads
    assert [(kv.value, kv.version) for kv in first] == [(b"1", 1)]
    assert [(kv.value, kv.version, kv.mod_revision) for kv in after_put] == [(b"2", 2, result.revision)]
    assert [kv.key for kv in prefix_before] == [p + "d/1", p + "d/2"]
    assert [kv.key for kv in prefix_after] == [p + "d/2"]


DUPLICATES = [
    ("put-put", lambda p: ([Put(p + "a", b"1"), Put(p + "a", b"2")], [])),
    ("put-delete", lambda p: ([Put(p + "a", b"1"), Delete(p + "a")], [])),
    ("delete-prefix-over-put", lambda p: ([Put(p + "d/1", b"1"), Delete(p + "d/", prefix=True)], [])),
    ("in-the-branch-not-taken", lambda p: ([Put(p + "b", b"1")], [Put(p + "a", b"1"), Put(p + "a", b"2")])),
]


@pytest.mark.parametrize("branches", [d[1] for d in DUPLICATES], ids=[d[0] for d in DUPLICATES])
def test_a_txn_writing_a_key_twice_is_refused(store, p, branches):
    before = store.revision()
    success, failure = branches(p)
    with pytest.raises(StoreError, match="duplicate key") as info:
        store.txn([], success, failure)
    assert not isinstance(info.value, TxnTooLarge)
    assert store.revision() == before and store.range(p).kvs == ()


def test_two_deletes_of_one_key_are_allowed(store, p):
    store.put(p + "a", b"1")
    result = store.txn([], [Delete(p + "a"), Delete(p + "a"), Delete(p, prefix=True)])
    assert result.succeeded and store.get(p + "a") is None


LIMITS = [
    ("too-many-success-ops", lambda p, n: ([], [Put(f"{p}{i}", b"") for i in range(n + 1)], [])),
    ("too-many-failure-ops", lambda p, n: ([], [], [Get(f"{p}{i}") for i in range(n + 1)])),
    ("too-many-compares", lambda p, n: ([missing(f"{p}{i}") for i in range(n + 1)], [], [])),
    ("request-too-large", lambda p, n: ([], [Put(p + "big", b"x" * (1572864 + 1))], [])),
]


@pytest.mark.parametrize("txn", [t[1] for t in LIMITS], ids=[t[0] for t in LIMITS])
def test_a_txn_beyond_the_default_limits_is_refused(own_store, p, txn):
    store = own_store
    assert (store.max_txn_ops, store.max_request_bytes) == (128, 1572864)
    before = store.revision()
    with pytest.raises(TxnTooLarge):
        store.txn(*txn(p, store.max_txn_ops))
    assert store.revision() == before


def test_a_txn_at_the_default_limits_runs(own_store, p):
    store = own_store
    ops = [Put(f"{p}{i:03d}", b"v") for i in range(store.max_txn_ops)]
    compares = [missing(f"{p}{i:03d}") for i in range(store.max_txn_ops)]
    assert store.txn(compares, ops).succeeded
    assert len(store.range(p).kvs) == 128
    store.put(p + "big", b"x" * (store.max_request_bytes - 4096))
    assert len(store.get(p + "big").value) == store.max_request_bytes - 4096


def test_a_closed_store_refuses_work(own_store, p):
    own_store.put(p + "a", b"1")
    own_store.close()
    for call in (lambda: own_store.get(p + "a"), lambda: own_store.put(p + "a", b"2"),
                 lambda: own_store.range(p), own_store.revision):
        with pytest.raises(StoreError):
            call()


def test_get_many_refuses_a_single_string(store, p):
    with pytest.raises(TypeError, match="not a str"):
        store.get_many(p + "a")


def test_memory_store_enforces_its_configured_limits():
    store = MemoryStore(max_txn_ops=3, max_request_bytes=1000)
    store.txn([missing("/a")] * 3, [Put("/a", b"1"), Put("/b", b"1"), Get("/a")])
    with pytest.raises(TxnTooLarge, match="too many operations"):
        store.txn([], [Put(f"/{i}", b"") for i in range(4)])
    with pytest.raises(TxnTooLarge, match="too large"):
        store.put("/big", b"x" * 1000)
    with pytest.raises(ValueError, match="max_txn_ops"):
        MemoryStore(max_txn_ops=0)


BAD_INPUT = [
    ("value-not-bytes", lambda p: ([], [Put(p + "a", "text")], [])),
    ("value-compare-with-int", lambda p: ([Compare(p + "a", CompareTarget.VALUE, CompareOp.EQ, 1)], [], [])),
    ("revision-compare-with-bytes", lambda p: ([Compare(p + "a", CompareTarget.MOD, CompareOp.EQ, b"1")], [], [])),
    ("unknown-op", lambda p: ([], [("put", p + "a")], [])),
]


@pytest.mark.parametrize("txn", [b[1] for b in BAD_INPUT], ids=[b[0] for b in BAD_INPUT])
def test_malformed_txn_input_is_refused_clearly(store, p, txn):
    with pytest.raises((TypeError, ValueError)):
        store.txn(*txn(p))


def test_concurrent_compare_and_swap_loses_no_update(store, p):
    key = p + "counter"
    store.put(key, b"0")
    wins: list[int] = []
    lock = threading.Lock()

    def worker():
        for _ in range(12):
            kv = store.get(key)
            result = store.txn([mod_revision_is(key, kv.mod_revision)], [Put(key, str(int(kv.value) + 1).encode())])
            if result.succeeded:
                with lock:
                    wins.append(result.revision)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert int(store.get(key).value) == len(wins) > 0
    assert len(set(wins)) == len(wins)
    assert store.get(key).version == len(wins) + 1


# -- watches -----------------------------------------------------------------------------


def test_watch_replays_history_then_delivers_live_events(store, p):
    start = store.put(p + "a", b"1")
    store.put(p + "other-prefix-sibling", b"x")
    store.txn([], [Put(p + "w/a", b"1"), Put(p + "w/b", b"1")])
    store.delete(p + "w/a")
    stream = store.watch(p + "w/", start)
    try:
        replay = drain(stream, 3)
        live_rev = store.put(p + "w/b", b"2")
        live = drain(stream, 1)
    finally:
        stream.cancel()
    events = flat(replay) + flat(live)
    assert [(e.kind, e.key[len(p):], e.value) for e in events] == [
        (EventKind.PUT, "w/a", b"1"), (EventKind.PUT, "w/b", b"1"), (EventKind.DELETE, "w/a", b""),
        (EventKind.PUT, "w/b", b"2")]
    put_a, put_b, delete_a, put_b2 = events
    assert put_a.mod_revision == put_b.mod_revision == delete_a.mod_revision - 1
    assert (put_a.create_revision, put_a.version) == (put_a.mod_revision, 1)
    assert (delete_a.create_revision, delete_a.version) == (0, 0)
    assert (put_b2.mod_revision, put_b2.create_revision, put_b2.version) == (live_rev, put_b.mod_revision, 2)
    assert all(batch.revision >= max(e.mod_revision for e in batch.events) for batch in replay + live)


def test_watch_next_times_out_and_cancel_ends_the_stream(store, p):
    stream = store.watch(p, store.revision() + 1)
    started = time.monotonic()
    assert stream.next(timeout=0.2) is None
    assert time.monotonic() - started >= 0.15
    stream.cancel()
    store.put(p + "a", b"1")
    assert stream.next(timeout=0.2) is None
    assert list(stream) == []


def test_concurrent_writers_are_watched_in_revision_order(store, p):
    stream = store.watch(p, store.revision() + 1)

    def writer(n):
        for i in range(15):
            store.put(f"{p}{n}", str(i).encode())

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        batches = drain(stream, 60)
    finally:
        stream.cancel()
    revisions = [e.mod_revision for e in flat(batches)]
    assert revisions == sorted(set(revisions))
    for n in range(4):
        values = [e.value for e in flat(batches) if e.key == f"{p}{n}"]
        assert values == [str(i).encode() for i in range(15)]


def test_memory_disconnect_breaks_watches_and_resume_continues():
    store = MemoryStore()
    store.put("/w/a", b"1")
    stream = store.watch("/w/", 2)
    last = stream.next(timeout=1).revision
    store.disconnect_watches()
    store.put("/w/a", b"2")
    with pytest.raises(Unavailable):
        stream.next(timeout=1)
    resumed = store.watch("/w/", last + 1)
    assert [e.value for e in resumed.next(timeout=1).events] == [b"2"]


# -- compaction --------------------------------------------------------------------------


def test_compaction_drops_history_below_the_compact_revision(store, p):
    first = store.put(p + "a", b"1")
    store.put(p + "a", b"2")
    compact_at = store.put(p + "b", b"1")
    store.put(p + "a", b"3")
    store.compact(compact_at)
    with pytest.raises(Compacted) as info:
        store.range(p, revision=compact_at - 1)
    assert info.value.compact_revision >= compact_at
    assert [kv.value for kv in store.range(p, revision=compact_at).kvs] == [b"2", b"1"]
    with pytest.raises(Compacted):
        store.watch(p, first).next(timeout=5)
    with pytest.raises(Compacted):
        store.compact(compact_at)


def test_a_watch_from_the_compact_revision_replays_what_survived(store, p):
    store.put(p + "a", b"1")
    compact_at = store.put(p + "b", b"1")
    later = store.put(p + "a", b"2")
    store.compact(compact_at)
    stream = store.watch(p, compact_at)
    try:
        events = flat(drain(stream, 2))
    finally:
        stream.cancel()
    assert [(e.key[len(p):], e.mod_revision) for e in events] == [("b", compact_at), ("a", later)]


def test_compacting_a_future_revision_is_refused(store, p):
    future = store.put(p + "a", b"1") + 10
    with pytest.raises(StoreError, match="future revision") as info:
        store.compact(future)
    assert not isinstance(info.value, Compacted)


# -- leases ------------------------------------------------------------------------------


def test_put_with_an_unknown_lease_is_refused(store, p):
    lease = store.grant_lease(30)
    store.revoke_lease(lease)
    before = store.revision()
    with pytest.raises(StoreError, match="lease not found"):
        store.put(p + "a", b"1", lease=lease)
    with pytest.raises(StoreError, match="lease not found"):
        store.txn([], [Put(p + "b", b"1"), Put(p + "a", b"1", lease=lease)])
    assert store.revision() == before and store.range(p).kvs == ()
    for call in (store.refresh_lease, store.revoke_lease):
        with pytest.raises(StoreError):
            call(lease)


def test_revoke_deletes_the_attached_keys_in_one_revision(store, p):
    lease = store.grant_lease(30)
    store.put(p + "a", b"1", lease=lease)
    store.put(p + "b", b"1", lease=lease)
    store.put(p + "c", b"1", lease=lease)
    store.put(p + "c", b"2")  # a put without the lease detaches the key
    assert store.get(p + "a").lease == lease and store.get(p + "c").lease == 0
    before = store.revision()
    stream = store.watch(p, before + 1)
    store.revoke_lease(lease)
    try:
        events = flat(drain(stream, 2))
    finally:
        stream.cancel()
    assert store.revision() == before + 1
    assert sorted((e.kind, e.key[len(p):], e.mod_revision) for e in events) == [
        (EventKind.DELETE, "a", before + 1), (EventKind.DELETE, "b", before + 1)]
    assert [kv.key for kv in store.range(p).kvs] == [p + "c"]


def test_revoking_a_lease_without_keys_keeps_the_revision(store):
    lease = store.grant_lease(30)
    before = store.revision()
    store.revoke_lease(lease)
    assert store.revision() == before


def test_an_expired_lease_deletes_its_keys(store, p, elapse):
    lease = store.grant_lease(1)
    rev = store.txn([], [Put(p + "a", b"1", lease=lease), Put(p + "b", b"1", lease=lease)]).revision
    stream = store.watch(p, rev + 1)
    elapse(3)
    try:
        events = flat(drain(stream, 2))
    finally:
        stream.cancel()
    assert {(e.kind, e.key[len(p):]) for e in events} == {(EventKind.DELETE, "a"), (EventKind.DELETE, "b")}
    assert len({e.mod_revision for e in events}) == 1
    assert store.range(p).kvs == ()
    with pytest.raises(StoreError, match="lease not found"):
        store.put(p + "c", b"1", lease=lease)


def test_refreshing_a_lease_keeps_its_keys(store, p, elapse):
    lease = store.grant_lease(2)
    store.put(p + "a", b"1", lease=lease)
    elapse(1.5)
    store.refresh_lease(lease)
    elapse(1.5)
    assert store.get(p + "a") is not None
    store.revoke_lease(lease)
    assert store.get(p + "a") is None


def test_memory_leases_expire_on_the_injected_clock():
    clock = FakeClock()
    store = MemoryStore(clock=clock)
    lease = store.grant_lease(5)
    store.put("/a", b"1", lease=lease)
    clock.advance(4.9)
    assert store.expire_leases() == [] and store.get("/a") is not None
    clock.advance(0.1)
    assert store.expire_leases() == [lease]
    assert store.get("/a") is None and store.revision() == 3
    with pytest.raises(ValueError, match="ttl"):
        store.grant_lease(0)
