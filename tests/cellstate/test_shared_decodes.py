"""Replicas of one process sharing decoded values (``cellstate.replica.shared_decodes``)."""

from __future__ import annotations

import pytest

from cellstate.codec.records import encode_machine
from cellstate.keys import CellKeys
from cellstate.memory.store import MemoryStore
from cellstate.model import Machine
from cellstate.replica.watched import Replica
from cellstate.resources import Resources
from cellstate.replica.shared_decodes import SharedDecodes
from cellstate.store import Put

KEYS = CellKeys("shared")


def put_machine(store, machine_id: str, cpu: int) -> None:
    store.txn([], [Put(KEYS.machine(machine_id), encode_machine(Machine(machine_id, Resources(cpu, 1024))))], [])


def test_two_replicas_decode_each_value_once_and_hold_equal_content(monkeypatch):
    import cellstate.codec.records as codec
    decoded = []
    real = codec._machine_from_map
    monkeypatch.setattr(codec, "_machine_from_map", lambda key, d: decoded.append(key) or real(key, d))
    store, shared = MemoryStore(), SharedDecodes()
    put_machine(store, "m1", 1000)
    a, b = Replica(store, KEYS, shared_decodes=shared), Replica(store, KEYS, shared_decodes=shared)
    a.sync()
    b.sync()
    put_machine(store, "m2", 2000)
    put_machine(store, "m1", 3000)
    a.pump()
    b.pump()
    decoded = [key for key in decoded if key.startswith(KEYS.prefix)]  # not the encoder's decode-back
    assert len(decoded) == 3  # each stored value once: the codec's memo answers the other replica
    for machine_id in ("m1", "m2"):
        assert a.machine(machine_id) is not b.machine(machine_id)  # entries are each replica's own
        assert a.machine(machine_id).machine is b.machine(machine_id).machine
    assert a.machine("m1").machine.capacity.cpu == 3000
    alone = Replica(store, KEYS)
    alone.sync()
    assert {e.machine for e in alone.machines()} == {e.machine for e in a.machines()}


def test_the_codecs_memoized_decoders_are_not_wrapped_others_are():
    from cellstate.codec.records import decode_alloc, decode_job_record, decode_machine
    shared = SharedDecodes()
    for decode in (decode_machine, decode_job_record, decode_alloc):
        assert shared.decoder(decode) is decode
    other = shared.decoder(lambda key, raw: key)
    raw = b"some bytes"
    assert (other("k", raw), other("k", raw)) == ("k", "k")
    assert (shared.misses, shared.hits) == (1, 1)


def test_a_value_under_another_key_is_decoded_again():
    shared = SharedDecodes()
    decode = shared.decoder(lambda key, raw: (key, raw))
    raw = b"same bytes"
    assert decode("k1", raw) == ("k1", raw)
    assert decode("k2", raw) == ("k2", raw)
    assert (shared.misses, shared.hits) == (2, 0)


def test_old_generations_are_dropped():
    shared = SharedDecodes(generation=2)
    decode = shared.decoder(lambda key, raw: key)
    values = [bytes([i]) * 8 for i in range(5)]
    for i, raw in enumerate(values):
        decode(f"k{i}", raw)
    decode("k0", values[0])  # two generations later: decoded again
    assert shared.hits == 0
    decode("k4", values[4])
    assert shared.hits == 1


@pytest.mark.parametrize("generation", [0, -3], ids=["zero", "negative"])
def test_bad_generation_is_refused(generation):
    with pytest.raises(ValueError, match="generation"):
        SharedDecodes(generation)


@pytest.mark.parametrize("now", [5.0, 5], ids=["float-time", "int-time"])
def test_a_views_own_commit_reaches_the_other_replica_as_the_committers_objects(now):
    """The codec remembers what the committer encoded (cellstate.codec.memo): the other
    replica's decode of those bytes answers with the committer's objects, unless decoding
    would give other types (an int time comes back a float: then it is decoded)."""
    from cellstate.codec.records import encode_job_record
    from cellstate.committer import StoreCommitter
    from cellstate.model import Job, JobKind, JobRecord
    from cellstate.replica.view import ReplicaView
    from cellstate.plan import Claim, Plan

    store, shared = MemoryStore(history=False), SharedDecodes()
    put_machine(store, "m1", 4000)
    job = JobRecord.new(Job("j1", JobKind.BATCH, 2, Resources(100, 10)), 1.0)
    store.txn([], [Put(KEYS.job("j1"), encode_job_record(job))], [])
    mine, peer = ReplicaView(store, KEYS, shared_decodes=shared), ReplicaView(store, KEYS, shared_decodes=shared)
    plan = Plan(mine.job("j1"), (Claim(0, "m1", Resources(100, 10)),), {"m1": mine.machine("m1")}, "s", now=now)
    outcome = StoreCommitter(store, KEYS).commit(plan)
    mine.apply_outcome(outcome)
    assert peer.pump() == 3  # machine, alloc, job
    assert peer.machine("m1").machine is mine.machine("m1").machine
    same_types = type(now) is float
    assert (peer.job("j1").record is mine.job("j1").record) is same_types
    assert (next(iter(peer.allocs())) is next(iter(mine.allocs()))) is same_types
    alone = Replica(store, KEYS)
    alone.sync()
    # the peer holds what decoding gives, types included (repr tells 5 from 5.0)
    assert repr(list(peer.jobs())) == repr(list(alone.jobs()))
    assert repr(list(peer.machines())) == repr(list(alone.machines()))
    assert repr(list(peer.allocs())) == repr(list(alone.allocs()))
