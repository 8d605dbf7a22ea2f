"""MemoryStore(history=False), the replays' store: no version history, no revision log, yet
watches see every event in order; old revisions raise Compacted."""

from __future__ import annotations

import pytest

from cellstate.keys import CellKeys
from cellstate.memory.store import MemoryStore
from cellstate.replica.watched import Replica
from cellstate.store import (
    Compacted, Compare, CompareOp, CompareTarget, Delete, EventKind, Get, KeyValue, Put, Unavailable,
)
from replica_helpers import alloc, assert_matches_store, job, machine, write


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def light():
    store = MemoryStore(clock=Clock(), history=False)
    yield store
    store.close()


def events_of(stream) -> list[tuple[EventKind, str, bytes, int]]:
    out = []
    while (batch := stream.next(timeout=0)) is not None:
        assert all(ev.mod_revision <= batch.revision for ev in batch.events)
        out.extend((ev.kind, ev.key, ev.value, ev.mod_revision) for ev in batch.events)
    return out


def test_a_live_watch_sees_every_event_in_revision_order(light):
    light.put("/w/a", b"0")
    stream = light.watch("/w/", light.revision() + 1)
    r1 = light.txn([], [Put("/w/a", b"1"), Put("/w/b", b"1"), Put("/x/c", b"1")]).revision
    r2 = light.delete("/w/a")
    r3 = light.put("/w/b", b"2")
    assert events_of(stream) == [
        (EventKind.PUT, "/w/a", b"1", r1), (EventKind.PUT, "/w/b", b"1", r1),
        (EventKind.DELETE, "/w/a", b"", r2), (EventKind.PUT, "/w/b", b"2", r3)]
    r4 = light.put("/w/c", b"1")
    assert events_of(stream) == [(EventKind.PUT, "/w/c", b"1", r4)]
    assert stream.next(timeout=0) is None


@pytest.mark.parametrize("start_behind", [0, 1, 3], ids=["at-current", "one-behind", "three-behind"])
def test_a_watch_from_a_revision_not_kept_raises_compacted(light, start_behind):
    for i in range(4):
        light.put(f"/k{i}", b"v")
    stream = light.watch("/", light.revision() - start_behind)
    with pytest.raises(Compacted) as info:
        stream.next(timeout=0)
    assert info.value.compact_revision == light.revision()


def test_a_watch_from_a_future_revision_skips_the_revisions_before_it(light):
    stream = light.watch("/", light.revision() + 3)
    light.put("/a", b"1")
    light.put("/a", b"2")
    later = light.put("/a", b"3")
    assert events_of(stream) == [(EventKind.PUT, "/a", b"3", later)]


def test_only_the_current_revision_is_readable(light):
    light.put("/a", b"1")
    now = light.put("/b", b"1")
    assert [kv.key for kv in light.range("/", now).kvs] == ["/a", "/b"]
    with pytest.raises(Compacted):
        light.range("/", now - 1)


@pytest.mark.parametrize("distinct", [1500, 9000], ids=["unsorted-tail", "merged"])
def test_range_is_sorted_and_skips_deleted_keys_after_many_writes(light, distinct):
    live = set()
    for i in range(2 * distinct):
        key = f"/k/{(i * 7919) % distinct:05d}"
        if key in live and i % 3 == 0:
            light.delete(key)
            live.discard(key)
        else:
            light.put(key, str(i).encode())
            live.add(key)
    assert [kv.key for kv in light.range("/k/").kvs] == sorted(live)
    assert [kv.key for kv in light.range("/k/0001").kvs] == sorted(k for k in live if k.startswith("/k/0001"))


def test_expired_lease_deletes_reach_the_watch(light):
    lease = light.grant_lease(5)
    light.put("/l/a", b"1", lease)
    stream = light.watch("/l/", light.revision() + 1)
    light.clock.now += 6
    assert light.expire_leases() == [lease]
    assert [(kind, key) for kind, key, _, _ in events_of(stream)] == [(EventKind.DELETE, "/l/a")]


def test_a_zero_wait_on_an_empty_stream_still_reports_expiry_breaks_and_close(light):
    lease = light.grant_lease(5)
    light.put("/l/a", b"1", lease)
    stream = light.watch("/l/", light.revision() + 1)
    assert stream.next(timeout=0) is None
    light.clock.now += 6  # nothing queued, but a lease is due: its deletes come out of this very call
    assert [ev.kind for ev in stream.next(timeout=0).events] == [EventKind.DELETE]
    assert stream.next(timeout=0) is None
    light.disconnect_watches()
    with pytest.raises(Unavailable):
        stream.next(timeout=0)
    other = light.watch("/", light.revision() + 1)
    light.close()
    with pytest.raises(Unavailable):
        other.next(timeout=0)


def test_every_read_returns_the_key_values_of_plain_puts(light):
    """A plain put's entry is its Event until read: each read path returns a KeyValue."""
    r1 = light.txn([], [Put("/r/a", b"1"), Put("/r/b", b"1"), Put("/r/c", b"1")]).revision
    r2 = light.put("/r/a", b"2")
    a, b = KeyValue("/r/a", b"2", r1, r2, 2, 0), KeyValue("/r/b", b"1", r1, r1, 1, 0)
    c = KeyValue("/r/c", b"1", r1, r1, 1, 0)
    assert light.get_many(["/r/b", "/r/x"]) == (r2, {"/r/b": b})
    value_compares = [Compare("/r/a", CompareTarget.VALUE, CompareOp.EQ, b"2"),
                      Compare("/r/c", CompareTarget.VERSION, CompareOp.EQ, 1),
                      Compare("/r/c", CompareTarget.CREATE, CompareOp.EQ, r1)]
    result = light.txn(value_compares, [Get("/r/c"), Get("/r/", prefix=True)], [])
    assert result.succeeded and result.reads == ((c,), (a, b, c))
    assert light.get("/r/a") == a and light.range("/r/").kvs == (a, b, c)
    every = [light.get("/r/a"), *light.range("/r/").kvs, *light.get_many(["/r/b"])[1].values(), *result.reads[1]]
    assert {type(kv) for kv in every} == {KeyValue}
    r3 = light.put("/r/a", b"3")  # a read key written again: its next read is that put's
    assert light.get("/r/a") == KeyValue("/r/a", b"3", r1, r3, 3, 0)
    assert not light.txn([Compare("/r/b", CompareTarget.VALUE, CompareOp.EQ, b"2")], [Put("/r/b", b"x")]).succeeded


def test_leases_granted_after_plain_puts_take_over_their_keys(light):
    light.put("/l/a", b"1")
    light.put("/l/b", b"1")
    lease = light.grant_lease(5)
    light.put("/l/a", b"2", lease)  # over an entry a plain put left
    light.delete("/l/b")
    light.put("/l/c", b"1")
    assert light.get("/l/a").lease == lease and light.get("/l/c").lease == 0
    light.revoke_lease(lease)
    assert [kv.key for kv in light.range("/l/").kvs] == ["/l/c"]


def test_streams_take_the_events_under_their_prefix_of_every_revision_since_their_last_take(light):
    w, x = light.watch("/w/", light.revision() + 1), light.watch("/x/", light.revision() + 1)
    r1 = light.txn([], [Put("/w/a", b"1"), Put("/x/a", b"1"), Put("/w/b", b"1")]).revision
    late = light.watch("/w/", r1 + 1)
    r2 = light.put("/x/b", b"1")
    r3 = light.delete("/w/a")
    light.put("/y/a", b"1")
    batch = w.next(timeout=0)
    assert batch.revision == r3 and [(ev.key, ev.mod_revision) for ev in batch.events] == [
        ("/w/a", r1), ("/w/b", r1), ("/w/a", r3)]
    assert [(ev.key, ev.mod_revision) for ev in x.next(timeout=0).events] == [("/x/a", r1), ("/x/b", r2)]
    assert [(ev.kind, ev.key) for ev in late.next(timeout=0).events] == [(EventKind.DELETE, "/w/a")]
    assert w.next(timeout=0) is None and x.next(timeout=0) is None
    r5 = light.put("/w/c", b"1")
    assert w.next(timeout=0).revision == r5 and x.next(timeout=0) is None


def test_a_cancelled_watch_gets_nothing(light):
    stream = light.watch("/", light.revision() + 1)
    light.put("/a", b"1")
    stream.cancel()
    light.put("/a", b"2")
    assert stream.next(timeout=0) is None


def test_a_replica_on_a_store_without_history_follows_it():
    store, keys = MemoryStore(history=False), CellKeys("light")
    replica = Replica(store, keys)
    replica.sync()
    write(store, keys, machine(1), machine(2), job("j", "pp"))
    write(store, keys, alloc("j", 0, "m1"), machine(1, tasks=1), job("j", "ap"))
    write(store, keys, deletes=[keys.machine("m2")])
    replica.pump()
    assert replica.revision == store.revision()
    assert_matches_store(replica, store, keys)
    stale = Replica(store, keys)
    stale.sync()
    stale._stream.cancel()
    stale._stream = store.watch(keys.prefix, 2)  # a watch behind the store: relists on Compacted
    store.txn([], [Delete(keys.alloc("j", 0))])
    stale.pump()
    assert stale.relists == 1
    assert_matches_store(stale, store, keys)


def test_history_must_be_a_bool():
    with pytest.raises(ValueError, match="history must be a bool"):
        MemoryStore(history="no")


@pytest.mark.parametrize("seed", range(5))
def test_live_keys_list_every_live_key_in_order_across_merges_and_prunes(seed):
    """Small merge sizes: keys move tail -> middle -> main list and deleted ones are pruned,
    yet a prefix scan lists each live key under it once, sorted."""
    import random

    from cellstate.memory.history import LiveKeys
    rng = random.Random(seed)
    listed, live = LiveKeys(), {}
    listed.MERGE_AT, listed.MIDDLE_AT = 4, 16
    for step in range(3000):
        key = f"k/{rng.randrange(8)}/{rng.randrange(1000)}"
        if live and rng.random() < 0.5:
            live.pop(rng.choice(list(live)))
        else:
            live[key] = step
            listed.add(key, live)
        if step % 37 == 0:
            for prefix in ("k/", f"k/{rng.randrange(8)}/", "k/9", ""):
                found = [key for key in listed.under(prefix) if key in live]
                assert found == sorted(key for key in live if key.startswith(prefix))
