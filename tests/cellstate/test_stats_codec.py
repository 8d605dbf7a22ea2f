"""Stats codec: round trips of any valid SchedulerStats, strict rejections naming key and field."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import ids, texts, times

from cellstate.codec.records import SCHEMA_VERSION
from cellstate.codec.stats import CodecError, decode_stats, encode_stats
from cellstate.scheduler_stats import (
    ConflictNote, HOT_MACHINES_MAX, HotMachine, RECENT_CONFLICTS_MAX, SchedulerStats,
)
from omega.stats import StatsRecorder

KINDS = ("batch", "service", "borg", "solver", "firstfit")  # any name without "/" is a kind (registered above omega)

KEY = "/omega/cells/c/stats/s1"
counts = st.integers(min_value=0, max_value=2**62)


@st.composite
def hot_machines(draw) -> HotMachine:
    winners = draw(st.dictionaries(texts, st.integers(min_value=1, max_value=2**40), max_size=3))
    return HotMachine(draw(ids), draw(counts), tuple(winners.items()))


@st.composite
def conflict_notes(draw) -> ConflictNote:
    machines = draw(st.lists(ids, max_size=4))
    winners = draw(st.lists(texts, min_size=len(machines), max_size=len(machines)))
    return ConflictNote(draw(times), draw(ids), tuple(machines), tuple(winners))


@st.composite
def scheduler_stats(draw) -> SchedulerStats:
    p50, p90, p99 = sorted(draw(st.lists(times, min_size=3, max_size=3)))
    return SchedulerStats(
        name=draw(ids), kind=draw(st.sampled_from(KINDS)), pid=draw(counts), host=draw(texts),
        started_at=draw(times), updated_at=draw(times), conflict_mode=draw(texts), commit_mode=draw(texts),
        attempts=draw(counts), txns=draw(counts), commits=draw(counts), conflicts=draw(counts),
        retries=draw(counts), jobs_placed=draw(counts), tasks_placed=draw(counts), tasks_unplaced=draw(counts),
        jobs_per_s=draw(times), placements_per_s=draw(times),
        busyness=draw(st.floats(min_value=0.0, max_value=1.0)),
        decision_ms_p50=p50, decision_ms_p90=p90, decision_ms_p99=p99,
        hot_machines=tuple(draw(st.lists(hot_machines(), max_size=HOT_MACHINES_MAX))),
        recent_conflicts=tuple(draw(st.lists(conflict_notes(), max_size=RECENT_CONFLICTS_MAX))),
    )


@given(scheduler_stats())
def test_round_trip(stats):
    raw = encode_stats(stats)
    assert decode_stats(KEY, raw) == stats
    stored = msgpack.unpackb(raw)
    assert (stored["v"], stored["t"]) == (SCHEMA_VERSION, "stats")


def test_recorder_snapshot_round_trips():
    rec = StatsRecorder("s1", "service", pid=1, host="h", started_at=100.0)
    rec.record_attempt(0.02, 0.03, 2, 1, 1, 1, 2, 1, False, {"m1": "s2", "m2": ""}, "j1", 101.0)
    rec.record_attempt(0.01, 0.01, 1, 1, 0, 0, 1, 0, True, {}, "j2", 102.0)
    stats = rec.snapshot(103.0)
    assert decode_stats(KEY, encode_stats(stats)) == stats


def valid_map() -> dict:
    stats = SchedulerStats(
        "s1", "batch", pid=3, host="h", started_at=1.0, updated_at=2.0, commits=4, conflicts=1,
        decision_ms_p50=1.0, decision_ms_p90=2.0, decision_ms_p99=3.0, busyness=0.5,
        hot_machines=(HotMachine("m1", 2, (("s2", 2),)),),
        recent_conflicts=(ConflictNote(1.5, "j1", ("m1",), ("s2",)),))
    return msgpack.unpackb(encode_stats(stats))


def _set(path: str, value):
    def mutate(d):
        target, *rest = path.split(".")
        if not rest:
            d[target] = value
            return
        name, index = target.split("[")
        item = d[name][int(index.rstrip("]"))]
        item[rest[0]] = value
    return mutate


def _drop(name: str):
    return lambda d: d.pop(name)


REJECTIONS = [
    ("missing-field", _drop("commits"), "commits", "missing"),
    ("unknown-field", _set("colour", 1), "colour", "unknown field"),
    ("bool-count", _set("txns", True), "txns", "non-negative integer"),
    ("negative-count", _set("retries", -1), "retries", "non-negative integer"),
    ("float-count", _set("pid", 1.0), "pid", "non-negative integer"),
    ("slash-kind", _set("kind", "gpu/a"), "kind", "without"),
    ("empty-kind", _set("kind", ""), "kind", "without"),
    ("slash-name", _set("name", "a/b"), "name", "without"),
    ("empty-name", _set("name", ""), "name", "without"),
    ("bytes-host", _set("host", b"h"), "host", "a string"),
    ("negative-time", _set("updated_at", -1.0), "updated_at", "non-negative finite"),
    ("nan-rate", _set("jobs_per_s", float("nan")), "jobs_per_s", "non-negative finite"),
    ("inf-percentile", _set("decision_ms_p99", float("inf")), "decision_ms_p99", "non-negative finite"),
    ("busyness-above-one", _set("busyness", 1.5), "busyness", "between 0 and 1"),
    ("percentiles-unordered", _set("decision_ms_p50", 2.5), "decision_ms_p90", "out of order"),
    ("p99-below-p90", _set("decision_ms_p99", 1.5), "decision_ms_p99", "out of order"),
    ("hot-not-list", _set("hot_machines", {}), "hot_machines", "a list"),
    ("too-many-hot", _set("hot_machines", [{"machine": f"m{i}", "conflicts": 1, "winners": {}}
                                           for i in range(HOT_MACHINES_MAX + 1)]), "hot_machines", "at most"),
    ("hot-bad-machine", _set("hot_machines[0].machine", ""), "hot_machines[0].machine", "id"),
    ("hot-zero-winner", _set("hot_machines[0].winners", {"s2": 0}), "hot_machines[0].winners.s2", ">= 1"),
    ("hot-winners-list", _set("hot_machines[0].winners", [["s2", 1]]), "hot_machines[0].winners", "a map"),
    ("hot-extra", _set("hot_machines[0].x", 1), "hot_machines[0].x", "unknown"),
    ("note-missing-job", lambda d: d["recent_conflicts"][0].pop("job"), "recent_conflicts[0].job", "missing"),
    ("note-negative-at", _set("recent_conflicts[0].at", -2), "recent_conflicts[0].at", "non-negative"),
    ("note-winners-not-parallel", _set("recent_conflicts[0].winners", []), "recent_conflicts[0].winners",
     "one winner per machine"),
    ("note-bad-machine", _set("recent_conflicts[0].machines", ["a/b"]), "recent_conflicts[0].machines[0]", "id"),
    ("too-many-notes", _set("recent_conflicts", [{"at": 1, "job": "j", "machines": [], "winners": []}]
                            * (RECENT_CONFLICTS_MAX + 1)), "recent_conflicts", "at most"),
    ("wrong-tag", _set("t", "machine"), "t", "type tag"),
    ("wrong-version", _set("v", SCHEMA_VERSION + 1), "v", "schema version"),
]


@pytest.mark.parametrize("mutate,field,message", [r[1:] for r in REJECTIONS], ids=[r[0] for r in REJECTIONS])
def test_decode_rejects(mutate, field, message):
    d = valid_map()
    decode_stats(KEY, msgpack.packb(d))  # the unmutated map is valid
    mutate(d)
    with pytest.raises(CodecError, match=message) as info:
        decode_stats(KEY, msgpack.packb(d))
    assert (info.value.key, info.value.field) == (KEY, field)


@pytest.mark.parametrize("raw,message", [(b"\xc1", "not a msgpack"), (msgpack.packb([1]), "a msgpack map")],
                         ids=["garbage", "not-map"])
def test_decode_rejects_non_maps(raw, message):
    with pytest.raises(CodecError, match=message):
        decode_stats(KEY, raw)


@pytest.mark.parametrize("stats,field", [
    (SchedulerStats("s", "batch", busyness=2.0), "busyness"),
    (SchedulerStats("s", "batch", hot_machines=(HotMachine("m", 1, (("a", 1), ("a", 2))),)), "hot_machines"),
    (SchedulerStats("s", "batch", recent_conflicts=(ConflictNote(1.0, "j", ("m",), ()),)),
     "recent_conflicts[0].winners"),
    (SchedulerStats("s", "no/pe"), "kind"),
], ids=["busyness", "duplicate-winner", "unparallel-note", "kind"])
def test_encode_rejects_invalid(stats, field):
    with pytest.raises(CodecError) as info:
        encode_stats(stats)
    assert info.value.field == field
