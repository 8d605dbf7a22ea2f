"""Fuzzing decoders beyond tests/cellstate/test_codec.py: the stats codec, and corrupt values
reaching a ``Replica`` (quarantined and reported, never fatal; placement views skip them)."""

from __future__ import annotations

import itertools
import os
import sys

import msgpack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.dirname(__file__))
from fuzzlib import msgpack_values, mutated  # noqa: E402

from cellstate.codec.records import encode_alloc, encode_job_record, encode_machine  # noqa: E402
from cellstate.codec.fields import CodecError  # noqa: E402
from cellstate.keys import CellKeys  # noqa: E402
from cellstate.memory.store import MemoryStore  # noqa: E402
from cellstate.model import Alloc, Job, JobKind, JobRecord, Machine  # noqa: E402
from cellstate.replica.view import ReplicaView  # noqa: E402
from cellstate.replica.watched import Replica  # noqa: E402
from cellstate.resources import Resources  # noqa: E402
from cellstate.codec.stats import decode_stats, encode_stats  # noqa: E402
from cellstate.scheduler_stats import ConflictNote, HotMachine, SchedulerStats

STATS = SchedulerStats(
    name="b1", kind="batch", pid=7, host="h", started_at=1.0, updated_at=2.0, conflict_mode="sequence",
    commit_mode="incremental", attempts=5, txns=4, commits=3, conflicts=1, retries=1, jobs_placed=2,
    tasks_placed=6, tasks_unplaced=1, jobs_per_s=0.5, placements_per_s=1.5, busyness=0.25,
    decision_ms_p50=1.0, decision_ms_p90=2.0, decision_ms_p99=3.0,
    hot_machines=(HotMachine("m1", 2, (("b2", 2),)),),
    recent_conflicts=(ConflictNote(1.5, "j1", ("m1",), ("b2",)),))
STATS_MAP = msgpack.unpackb(encode_stats(STATS))
KEY = "/omega/cells/c/stats/b1"


def _decodes_or_codec_error(raw: bytes) -> None:
    try:
        stats = decode_stats(KEY, raw)
    except CodecError:
        return
    assert decode_stats(KEY, encode_stats(stats)) == stats


@given(raw=st.binary(max_size=80))
def test_stats_random_bytes(raw):
    _decodes_or_codec_error(raw)


@settings(max_examples=300, deadline=None)
@given(doc=mutated(STATS_MAP, values=msgpack_values))
def test_stats_mutated_valid_maps(doc):
    _decodes_or_codec_error(msgpack.packb(doc))


# ------------------------------------------------------------------ through a replica

MACHINE = Machine(id="m2", capacity=Resources(4000, 8192))
JOB = JobRecord.new(Job(id="j1", kind=JobKind.BATCH, tasks=2, request=Resources(100, 10)), 1.0)
ALLOC = Alloc("j1", 0, "m2", Resources(100, 10))
_cells = itertools.count()


def _good_values(keys: CellKeys) -> dict[str, bytes]:
    return {keys.machine("m2"): encode_machine(MACHINE), keys.job("j1"): encode_job_record(JOB),
            keys.alloc("j1", 0): encode_alloc(ALLOC)}


corrupt_values = st.one_of(
    st.binary(max_size=40),
    msgpack_values.map(msgpack.packb),
    mutated(msgpack.unpackb(encode_machine(Machine(id="m1", capacity=Resources(4000, 8192)))),
            values=msgpack_values).map(msgpack.packb),
)


def _check_quarantine(store, keys: CellKeys, raw: bytes, watched: bool) -> None:
    """Put a possibly corrupt machine m1 beside good values; the replica reports it or decodes it."""
    errors: list[str] = []
    view = None
    if watched:
        view = ReplicaView(store, keys, on_decode_error=lambda key, exc: errors.append(key))
    for key, value in _good_values(keys).items():
        store.put(key, value)
    store.put(keys.machine("m1"), raw)
    if view is None:
        view = ReplicaView(store, keys, on_decode_error=lambda key, exc: errors.append(key))
    else:
        target = store.revision()
        while view.revision < target:
            view.pump(1.0)
    replica: Replica = view.replica
    assert replica.machine("m2") is not None and replica.job("j1") is not None
    assert len(list(replica.allocs_on("m2"))) == 1
    m1 = replica.machine("m1")
    if m1 is None:
        assert errors == [keys.machine("m1")] and keys.machine("m1") in replica.quarantine
        assert [e.id for e in replica.machines()] == ["m2"]  # a placement view skips it
    else:
        assert m1.machine.id == "m1" and not errors and not replica.quarantine
    view.close()


@settings(max_examples=150, deadline=None)
@given(raw=corrupt_values, watched=st.booleans())
def test_corrupt_values_are_quarantined_by_the_replica(raw, watched):
    store = MemoryStore()
    _check_quarantine(store, CellKeys(cell=f"fuzz-{next(_cells)}"), raw, watched)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=corrupt_values, watched=st.booleans())
def test_corrupt_values_in_etcd_are_quarantined(etcd_store, raw, watched):
    _check_quarantine(etcd_store, CellKeys(cell=f"fuzz-etcd-{os.getpid()}-{next(_cells)}"), raw, watched)
