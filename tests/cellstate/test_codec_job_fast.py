"""The job-record fast paths: the same bytes, values (with the same types) and errors as the
codec's generic paths, for valid and invalid records and maps alike."""

from __future__ import annotations

from dataclasses import replace

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import job_records

from cellstate.codec import records as codec
from cellstate.codec import envelope as codec_envelope
from cellstate.codec import job as codec_job
from cellstate.codec import job_fast as codec_job_fast
from cellstate.codec.records import CodecError, decode_job_record, encode_job_record
from cellstate.codec.job_fast import fast_record
from cellstate.model import Constraint, ConstraintOp, Job, JobKind, JobRecord
from cellstate.resources import Resources

SPEC = Job("j1", JobKind.BATCH, 3, Resources(250, 512), priority=2, owner="o", duration_s=30.0,
           constraints=(Constraint("zone", ConstraintOp.IN, ("a", "b")),))
REC = JobRecord(SPEC, "paf", 1.5, "1 task: nothing fits", False, 2.0, None)


def generic_encode(r) -> bytes:
    return codec_envelope.encode("job " + getattr(getattr(r, "job", None), "id", "?"), r, codec_job._record_map,
                         codec_job._record_from_map)


def shape_ok(r) -> bool:
    """Whether ``encode_job_record`` packs ``r`` without the decode-back (the common shape)."""
    return codec_job._common_spec_map(r) is not None

def outcome(fn, value):
    """The result with its repr (types show: 5 vs 5.0), or the error message."""
    try:
        result = fn(value)
    except CodecError as exc:
        return f"CodecError: {exc}"
    return result, repr(result)


RECORDS = {
    "common": REC,
    "bare": JobRecord.new(Job("j2", JobKind.SERVICE, 1, Resources(1, 1)), 0.0),
    "killed-placed": replace(REC, killed=True, placed_at=9.0),
    "no-constraints": replace(REC, job=replace(SPEC, constraints=())),
    "exists-constraint": replace(REC, job=replace(SPEC, constraints=(Constraint("rack", ConstraintOp.EXISTS),))),
    "eq-two-values": replace(REC, job=replace(SPEC, constraints=(Constraint("rack", ConstraintOp.EQ, ("a", "b")),))),
    "constraint-values-list": replace(REC, job=replace(SPEC, constraints=(Constraint("rack", ConstraintOp.IN, ["a"]),))),
    "int-submitted": replace(REC, submitted_at=3),
    "int-first-attempt": replace(REC, first_attempt_at=3),
    "int-duration": replace(REC, job=replace(SPEC, duration_s=30)),
    "negative-time": replace(REC, placed_at=-1.0),
    "nan-time": replace(REC, first_attempt_at=float("nan")),
    "wrong-task-count": replace(REC, tasks="pa"),
    "bad-task-char": replace(REC, tasks="paz"),
    "slash-id": replace(REC, job=replace(SPEC, id="a/b")),
    "kind-as-text": replace(REC, job=replace(SPEC, kind="batch")),
    "extra-resources": replace(REC, job=replace(SPEC, request=Resources(1, 1, 1, (("gpu", 1),)))),
    "negative-request": replace(REC, job=replace(SPEC, request=Resources(-1, 1, 1))),
    "huge-priority": replace(REC, job=replace(SPEC, priority=1 << 70)),
    "bool-priority": replace(REC, job=replace(SPEC, priority=True)),
    "gang-as-int": replace(REC, job=replace(SPEC, gang=1)),
    "negative-max-per-machine": replace(REC, job=replace(SPEC, max_per_machine=-1)),
    "not-a-record": "j1",
}


@pytest.mark.parametrize("name", list(RECORDS), ids=list(RECORDS))
def test_encode_job_record_is_the_generic_encoder(name):
    assert outcome(encode_job_record, RECORDS[name]) == outcome(generic_encode, RECORDS[name])


@given(job_records())
def test_generated_records_encode_and_decode_as_the_generic_paths(record):
    raw = encode_job_record(record)
    assert raw == generic_encode(record)
    d = msgpack.unpackb(raw)
    assert outcome(lambda m: decode_job_record("k", raw), d) == outcome(lambda m: codec_job._record_from_map("k", m), d)


def test_the_common_shapes_take_the_fast_paths():
    assert shape_ok(REC) and shape_ok(RECORDS["bare"])
    assert not shape_ok(RECORDS["int-submitted"])  # the generic encoder decides
    assert fast_record(msgpack.unpackb(encode_job_record(REC))) == REC


def _map(**changes) -> dict:
    d = msgpack.unpackb(encode_job_record(REC))
    for path, value in changes.items():
        where, *rest = path.split("__")
        target = d["spec"] if rest else d
        name = rest[0] if rest else where
        if value is KeyError:
            del target[name]
        else:
            target[name] = value
    return d


MAPS = {
    "common": _map(),
    "int-times": _map(submitted_at=2, first_attempt_at=3, placed_at=4, spec__duration_s=5),
    "unknown-field": _map(colour="red"),
    "missing-spec": _map(spec=KeyError),
    "spec-not-map": _map(spec=[1]),
    "tasks-not-text": _map(tasks=b"paf"),
    "bool-time": _map(placed_at=True),
    "inf-time": _map(placed_at=float("inf")),
    "killed-int": _map(killed=1),
    "reason-bytes": _map(reason=b"x"),
    "spec-unknown-field": _map(spec__colour="red"),
    "spec-missing-kind": _map(spec__kind=KeyError),
    "spec-unknown-kind": _map(spec__kind="cron"),
    "spec-zero-tasks": _map(spec__tasks=0, tasks=""),
    "spec-bool-tasks": _map(spec__tasks=True),
    "spec-too-many-tasks": _map(spec__tasks=10**7),
    "spec-request-extra": _map(spec__request={"cpu": 1, "memory": 1, "disk": 1, "gpu": 2}),
    "spec-request-partial": _map(spec__request={"cpu": 1}),
    "spec-request-negative": _map(spec__request={"cpu": -1, "memory": 1, "disk": 1}),
    "spec-request-bool": _map(spec__request={"cpu": True, "memory": 1, "disk": 1}),
    "spec-float-priority": _map(spec__priority=1.0),
    "spec-owner-int": _map(spec__owner=3),
    "spec-gang-int": _map(spec__gang=0),
    "spec-negative-max": _map(spec__max_per_machine=-2),
    "spec-negative-duration": _map(spec__duration_s=-1.0),
    "spec-constraints-not-list": _map(spec__constraints={"attribute": "zone"}),
    "constraint-unknown-field": _map(spec__constraints=[{"attribute": "zone", "op": "exists", "x": 1}]),
    "constraint-empty-attribute": _map(spec__constraints=[{"attribute": "", "op": "exists"}]),
    "constraint-unknown-op": _map(spec__constraints=[{"attribute": "zone", "op": "near"}]),
    "constraint-eq-without-value": _map(spec__constraints=[{"attribute": "zone", "op": "eq"}]),
    "constraint-in-without-value": _map(spec__constraints=[{"attribute": "zone", "op": "in", "values": []}]),
    "constraint-exists-with-value": _map(spec__constraints=[{"attribute": "zone", "op": "exists", "values": ["a"]}]),
    "constraint-value-int": _map(spec__constraints=[{"attribute": "zone", "op": "eq", "values": [1]}]),
    "constraint-not-map": _map(spec__constraints=["zone"]),
}


@pytest.mark.parametrize("name", list(MAPS), ids=list(MAPS))
def test_decode_job_record_is_the_generic_decoder(name):
    raw = msgpack.packb(MAPS[name])
    generic = outcome(lambda d: codec_job._record_from_map("jobs/j1", d), MAPS[name])
    assert outcome(lambda r: decode_job_record("jobs/j1", r), raw) == generic
    if isinstance(generic, str):
        assert fast_record(MAPS[name]) is None  # only the generic path reports errors


@pytest.mark.parametrize("name", [n for n, d in MAPS.items() if isinstance(d.get("spec"), dict)])
def test_a_bare_spec_decodes_as_the_generic_decoder(name):
    """``job_from_map`` (a trace's submissions) tries ``fast_spec`` first: same Job, same errors."""
    spec = {"v": codec.SCHEMA_VERSION, "t": "spec", **MAPS[name]["spec"]}
    generic = outcome(lambda d: codec_job._spec_from_map("job", {k: v for k, v in d.items() if k not in "vt"}), spec)
    assert outcome(lambda d: codec.job_from_map("job", d), spec) == generic
    assert outcome(lambda r: codec.decode_job("job", r), msgpack.packb(spec)) == generic


@pytest.mark.parametrize("duration", [None, 0, 5, 0.0, -0.0, 30.5])
@pytest.mark.parametrize("name", [n for n, d in MAPS.items() if isinstance(d.get("spec"), dict)])
def test_a_bare_spec_is_marked_checked_only_when_its_shape_passes(name, duration):
    """``fast_bare_spec`` marks the Job it builds as shape-checked exactly when
    ``_spec_shape_ok`` accepts it (so ``shape_ok`` answers as without the mark)."""
    d = {**MAPS[name]["spec"], "duration_s": duration}
    codec_job_fast._SHAPED_SPECS.clear()
    job = codec_job_fast.fast_bare_spec(d)
    marked = job is not None and codec_job_fast._SHAPED_SPECS.get(id(job), (None,))[0] is job
    assert marked == (job is not None and codec_job_fast._spec_shape_ok(job))


@given(st.text(alphabet="parfxkPq é\x00", max_size=80))
def test_task_states_ok_is_every_character_a_task_state(states):
    assert codec_job_fast.task_states_ok(states) is all(c in "parfxk" for c in states)
