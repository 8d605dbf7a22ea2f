"""EtcdStore behavior that only a real etcd shows: pagination, big values, limits,
server loss and restart, failover, watch errors. The shared semantics are in
test_store_contract.py."""

from __future__ import annotations

import threading
import time

import pytest

from cellstate.etcd import wire as etcd_wire
from cellstate.etcd.cluster import EtcdCluster
from cellstate.etcd.options import EtcdOptions
from cellstate.etcd.store import EtcdStore, parse_endpoint
from cellstate.store import (
    Compacted, Delete, EventKind, Get, Put, StoreError, TxnTooLarge, Unavailable, mod_revision_is,
)

MIB = 1024 * 1024


@pytest.fixture
def own_etcd():
    """A private single-member etcd that tests may kill and restart."""
    cluster = EtcdCluster(size=1, options=EtcdOptions(unsafe_no_fsync=True)).start()
    yield cluster
    cluster.stop()


def wait_until(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Unavailable:
            pass
        time.sleep(0.1)
    raise AssertionError("condition not reached in time")


# -- pure helpers ---------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("127.0.0.1:2379", ("127.0.0.1", 2379)),
    ("http://127.0.0.1:2379", ("127.0.0.1", 2379)),
    ("https://localhost:12/", ("localhost", 12)),
], ids=["bare", "http-url", "https-url"])
def test_parse_endpoint_accepts(text, expected):
    assert parse_endpoint(text) == expected


@pytest.mark.parametrize("text", ["127.0.0.1", ":2379", "host:port", "host:0", "host:70000"],
                         ids=["no-port", "no-host", "port-not-number", "port-zero", "port-too-big"])
def test_parse_endpoint_rejects(text):
    with pytest.raises(ValueError, match="not host:port"):
        parse_endpoint(text)


@pytest.mark.parametrize("prefix, end", [
    (b"/a/", b"/a0"), (b"a\xff", b"b"), (b"\xff\xff", b"\0"), (b"", b"\0"),
], ids=["slash", "trailing-ff", "all-ff", "empty"])
def test_prefix_end_bytes(prefix, end):
    assert etcd_wire.prefix_end_bytes(prefix) == end


@pytest.mark.parametrize("kwargs, message", [
    ({"endpoints": []}, "non-empty list"),
    ({"endpoints": "127.0.0.1:2379"}, "non-empty list"),
    ({"endpoints": ["127.0.0.1:1"], "user": "root"}, "both user and password"),
    ({"endpoints": ["127.0.0.1:1"], "page_size": 0}, "page_size"),
    ({"endpoints": ["127.0.0.1:1"], "max_txn_ops": -1}, "max_txn_ops"),
    ({"endpoints": ["127.0.0.1:1"], "ca_cert": "/nonexistent/ca.pem"}, "CA certificate"),
], ids=["empty", "string", "user-only", "page-size", "txn-ops", "missing-ca"])
def test_constructor_rejects_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        EtcdStore(**kwargs)


def test_unreachable_endpoint_is_unavailable():
    from cellstate.etcd.ports import free_port

    store = EtcdStore([f"127.0.0.1:{free_port()}"], timeout=2.0)
    try:
        with pytest.raises(Unavailable):
            store.get("/x")
    finally:
        store.close()


# -- pagination and big values ----------------------------------------------------------------

def small_page_store(server, page_size=7):
    opts = server.options
    return EtcdStore(server.endpoints, max_txn_ops=opts.max_txn_ops, max_request_bytes=opts.max_request_bytes,
                     page_size=page_size)


def test_range_reads_many_pages_in_key_order(etcd_server, cell_keys):
    store = small_page_store(etcd_server)
    try:
        keys = [cell_keys.machine(f"m{i:03d}") for i in range(23)]
        store.txn([], [Put(k, k.encode()) for k in reversed(keys)])
        store.put(cell_keys.job("outside"), b"j")
        result = store.range(cell_keys.kind_prefix("machines"))
        assert [kv.key for kv in result.kvs] == keys
        assert [kv.value for kv in result.kvs] == [k.encode() for k in keys]
    finally:
        store.close()


def test_range_pages_all_read_at_first_page_revision(etcd_server, cell_keys, monkeypatch):
    store = small_page_store(etcd_server, page_size=5)
    writer = EtcdStore(etcd_server.endpoints)
    try:
        prefix = cell_keys.kind_prefix("machines")
        store.txn([], [Put(cell_keys.machine(f"m{i:02d}"), b"old") for i in range(12)])
        real_call = store._call
        pages = []

        def call_then_write(stub, method, request, *args):
            response = real_call(stub, method, request, *args)
            if method == "Range" and request.limit:
                pages.append(response.header.revision)
                writer.txn([], [Put(cell_keys.machine("m00"), b"new"), Put(cell_keys.machine("m99"), b"new"),
                                Delete(cell_keys.machine("m11"))])
            return response

        monkeypatch.setattr(store, "_call", call_then_write)
        result = store.range(prefix)
        assert len(pages) == 3
        assert result.revision == pages[0]
        assert len(result.kvs) == 12 and {kv.value for kv in result.kvs} == {b"old"}
    finally:
        writer.close()
        store.close()


def test_range_at_historical_revision_across_pages(etcd_store, cell_keys):
    prefix = cell_keys.kind_prefix("jobs")
    before = etcd_store.txn([], [Put(cell_keys.job(f"j{i:02d}"), b"v1") for i in range(9)]).revision
    etcd_store.txn([], [Delete(prefix, prefix=True)])
    etcd_store.put(cell_keys.job("late"), b"v2")
    store = EtcdStore(etcd_store_endpoints(etcd_store), page_size=2)
    try:
        old = store.range(prefix, revision=before)
        assert old.revision == before
        assert [kv.key for kv in old.kvs] == [cell_keys.job(f"j{i:02d}") for i in range(9)]
        assert [kv.key for kv in store.range(prefix).kvs] == [cell_keys.job("late")]
    finally:
        store.close()


def etcd_store_endpoints(store: EtcdStore) -> list[str]:
    return list(store._client.endpoints)


def test_range_of_values_beyond_grpc_default_4mib(etcd_store, cell_keys):
    values = {cell_keys.alloc("big", i): bytes([i]) * MIB for i in range(6)}
    for key, value in values.items():
        etcd_store.put(key, value)
    result = etcd_store.range(cell_keys.job_allocs("big"))
    assert {kv.key: kv.value for kv in result.kvs} == values
    assert etcd_store.get(cell_keys.alloc("big", 5)).value == values[cell_keys.alloc("big", 5)]


def test_get_many_beyond_txn_op_limit_reads_one_revision(etcd_server, cell_keys):
    store = EtcdStore(etcd_server.endpoints, max_txn_ops=4)
    try:
        keys = [cell_keys.machine(f"m{i}") for i in range(10)]
        for key in keys[:7]:
            store.put(key, key.encode())
        revision, found = store.get_many(keys + [cell_keys.machine("absent")])
        assert revision == store.revision()
        assert sorted(found) == sorted(keys[:7])
        assert all(found[k].value == k.encode() for k in found)
    finally:
        store.close()


# -- transaction limits -------------------------------------------------------------------------

@pytest.mark.parametrize("branch", ["compares", "success", "failure"])
def test_txn_over_op_limit_refused_before_sending(etcd_server, cell_keys, branch):
    store = EtcdStore(etcd_server.endpoints, max_txn_ops=3)
    try:
        keys = [cell_keys.machine(f"m{i}") for i in range(4)]
        parts = {"compares": [], "success": [], "failure": []}
        parts[branch] = ([mod_revision_is(k, 0) for k in keys] if branch == "compares"
                         else [Put(k, b"x") for k in keys])
        with pytest.raises(TxnTooLarge, match="limit is 3"):
            store.txn(parts["compares"], parts["success"], parts["failure"])
        assert store.get_many(keys)[1] == {}
    finally:
        store.close()


def test_txn_over_byte_limit_refused_before_sending(etcd_server, cell_keys):
    store = EtcdStore(etcd_server.endpoints, max_request_bytes=int(1.5 * MIB))
    try:
        ops = [Put(cell_keys.alloc("j", i), b"x" * (MIB // 2)) for i in range(3)]
        with pytest.raises(TxnTooLarge, match="bytes"):
            store.txn([], ops)
        assert store.range(cell_keys.job_allocs("j")).kvs == ()
    finally:
        store.close()


def test_server_side_op_limit_maps_to_txn_too_large(etcd_server, cell_keys):
    limit = etcd_server.options.max_txn_ops
    store = EtcdStore(etcd_server.endpoints, max_txn_ops=limit * 2)
    try:
        with pytest.raises(TxnTooLarge, match="too many operations"):
            store.txn([], [Get(cell_keys.machine(f"m{i}")) for i in range(limit + 1)])
    finally:
        store.close()


def test_duplicate_put_in_txn_is_store_error(etcd_store, cell_keys):
    key = cell_keys.machine("dup")
    with pytest.raises(StoreError, match="duplicate key"):
        etcd_store.txn([], [Put(key, b"a"), Put(key, b"b")])


# -- leases -----------------------------------------------------------------------------------

def test_revoked_lease_removes_its_keys_and_cannot_be_refreshed(etcd_store, cell_keys):
    lease = etcd_store.grant_lease(30)
    key = cell_keys.stats("sched")
    etcd_store.put(key, b"s", lease)
    assert etcd_store.get(key).lease == lease
    etcd_store.refresh_lease(lease)
    etcd_store.revoke_lease(lease)
    assert etcd_store.get(key) is None
    with pytest.raises(StoreError, match="not found"):
        etcd_store.refresh_lease(lease)


# -- watches ----------------------------------------------------------------------------------

def test_watch_replay_of_many_revisions_reports_exact_batch_revisions(etcd_store, cell_keys):
    prefix = cell_keys.kind_prefix("jobs")
    start = etcd_store.revision() + 1
    for i in range(1500):  # more than etcd's 1000-revision catch-up batch
        etcd_store.put(cell_keys.job(f"j{i}"), b"v")
    stream = etcd_store.watch(prefix, start)
    seen, last = [], start - 1
    try:
        while len(seen) < 1500:
            batch = stream.next(timeout=5)
            assert batch is not None, f"stalled after {len(seen)} events"
            assert batch.revision == batch.events[-1].mod_revision > last
            last = batch.revision
            seen.extend(ev.mod_revision for ev in batch.events)
    finally:
        stream.cancel()
    assert seen == list(range(start, start + 1500))


def test_watch_of_compacted_start_raises_compacted(etcd_store, cell_keys):
    key = cell_keys.machine("m")
    first = etcd_store.put(key, b"1")
    latest = etcd_store.put(key, b"2")
    etcd_store.compact(latest)
    stream = etcd_store.watch(cell_keys.prefix, first)
    try:
        with pytest.raises(Compacted) as info:
            stream.next(timeout=5)
        assert info.value.compact_revision >= latest and info.value.requested == first
        with pytest.raises(Compacted):  # the error stays
            stream.next(timeout=0)
    finally:
        stream.cancel()


def test_live_watch_survives_compaction(etcd_store, cell_keys):
    key = cell_keys.machine("m")
    stream = etcd_store.watch(cell_keys.prefix, etcd_store.revision() + 1)
    try:
        put1 = etcd_store.put(key, b"1")
        assert stream.next(timeout=5).revision == put1
        etcd_store.compact(etcd_store.put(key, b"2"))
        put3 = etcd_store.put(key, b"3")
        assert stream.next(timeout=5).events[0].value == b"2"
        assert [ev.mod_revision for ev in stream.next(timeout=5).events] == [put3]
        with pytest.raises(Compacted):
            etcd_store.range(cell_keys.prefix, revision=put1)
    finally:
        stream.cancel()


def test_watch_delete_event(etcd_store, cell_keys):
    key = cell_keys.machine("m")
    created = etcd_store.put(key, b"1")
    deleted = etcd_store.delete(key)
    stream = etcd_store.watch(cell_keys.prefix, created)
    try:
        events = []
        while len(events) < 2:
            events.extend(stream.next(timeout=5).events)
        assert [(e.kind, e.value, e.mod_revision) for e in events] == [
            (EventKind.PUT, b"1", created), (EventKind.DELETE, b"", deleted)]
    finally:
        stream.cancel()


def test_cancel_wakes_a_blocked_next_and_ends_the_thread(etcd_store, cell_keys):
    stream = etcd_store.watch(cell_keys.prefix, etcd_store.revision() + 1)
    results = []
    waiter = threading.Thread(target=lambda: results.append(stream.next()))
    waiter.start()
    time.sleep(0.2)
    stream.cancel()
    waiter.join(timeout=2)
    assert results == [None]
    assert not stream._thread.is_alive()
    assert list(stream) == []


def test_close_cancels_open_watches(etcd_server, cell_keys):
    store = EtcdStore(etcd_server.endpoints)
    stream = store.watch(cell_keys.prefix, store.revision() + 1)
    store.close()
    assert stream.next(timeout=1) is None and not stream._thread.is_alive()
    with pytest.raises(StoreError, match="closed"):
        store.get("/x")


# -- server loss, restart, failover -------------------------------------------------------------

def test_stopped_server_is_unavailable_and_store_recovers_after_restart(own_etcd):
    store = EtcdStore(own_etcd.endpoints, timeout=2.0)
    try:
        revision = store.put("/k", b"before")
        own_etcd.members[0].kill()
        with pytest.raises(Unavailable):
            store.get("/k")
        with pytest.raises(Unavailable):
            store.put("/k", b"during")
        own_etcd.restart_member(0)
        wait_until(lambda: store.get("/k") is not None)
        assert store.get("/k").mod_revision == revision
        assert store.put("/k", b"after") > revision
    finally:
        store.close()


def test_store_reconnects_promptly_after_a_long_outage(own_etcd):
    store = EtcdStore(own_etcd.endpoints, timeout=2.0)
    try:
        store.put("/k", b"v")
        own_etcd.members[0].kill()
        outage_end = time.monotonic() + 6.0  # long enough for gRPC's default backoff to exceed 2 s
        while time.monotonic() < outage_end:
            with pytest.raises(Unavailable):
                store.get("/k")
            time.sleep(0.2)
        own_etcd.restart_member(0)
        back = time.monotonic()
        wait_until(lambda: store.get("/k") is not None, timeout=10.0)
        assert time.monotonic() - back < 1.5
    finally:
        store.close()


def test_watch_raises_unavailable_when_server_dies(own_etcd):
    store = EtcdStore(own_etcd.endpoints, timeout=2.0)
    try:
        stream = store.watch("/w/", store.revision() + 1)
        put = store.put("/w/a", b"1")
        assert stream.next(timeout=5).revision == put
        own_etcd.members[0].kill()
        with pytest.raises(Unavailable):
            stream.next(timeout=5)
        with pytest.raises(Unavailable):  # sticky, no silent reconnect
            stream.next(timeout=0)
        own_etcd.restart_member(0)
        wait_until(lambda: store.revision() >= put)
        resumed = store.watch("/w/", put + 1)
        later = store.put("/w/b", b"2")
        assert resumed.next(timeout=5).revision == later
        resumed.cancel()
    finally:
        store.close()


def test_failover_to_another_member_after_unavailable():
    with EtcdCluster(size=3, options=EtcdOptions(unsafe_no_fsync=True)) as cluster:
        store = EtcdStore(cluster.endpoints, timeout=3.0)
        try:
            store.put("/f", b"1")
            used = store._client._current_endpoint_label
            member = next(m for m in cluster.members if m.endpoint == used)
            member.kill()
            with pytest.raises(Unavailable):
                store.get("/f")
            try:
                store.get("/f")
            except Unavailable:
                pass  # a live member answers "leader changed" while the cluster elects a new leader
            assert store._client._current_endpoint_label != used
            wait_until(lambda: store.get("/f").value == b"1")
        finally:
            store.close()



def test_failover_holds_when_the_retry_comes_after_time_retry(etcd_server):
    from cellstate.etcd.ports import free_port

    # the dead endpoint first: after its failure the store moves on, though the retry comes
    # when the dead one is no longer marked failed
    dead = f"127.0.0.1:{free_port()}"
    store = EtcdStore([dead, *etcd_server.endpoints], timeout=2.0, time_retry=0.05)
    store._client._current_endpoint_label = dead  # the client starts on a random one
    try:
        with pytest.raises(Unavailable):
            store.get("/failover-order")
        time.sleep(0.2)  # past time_retry
        assert store.get("/failover-order") is None
        assert store._client._current_endpoint_label != dead
    finally:
        store.close()
