"""``encode_job_record``'s common-shape path (``codec_job._common_spec_map``: field checks
instead of the decode-back): the same bytes as the generic path for every valid record, and the
same CodecError for every invalid one (it falls back to the generic path when unsure)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from strategies import job_records

from cellstate.codec import envelope as codec_envelope
from cellstate.codec import job as codec_job
from cellstate.codec import job_fast as codec_job_fast
from cellstate.codec.records import RECORD_MEMO, CodecError, decode_job_record, encode_job_record
from cellstate.codec.memo import wake_codec_memos
from cellstate.model import Constraint, ConstraintOp, Job, JobKind, JobRecord
from cellstate.resources import Resources

J = Job("j", JobKind.BATCH, 3, Resources(250, 512), priority=2, owner="o", duration_s=30.0,
        package="pkg", max_per_machine=2)
R = JobRecord(J, "paf", submitted_at=1.5, reason="no fit", first_attempt_at=2.0, placed_at=3.0)


class Owner(str):
    pass


def spec(**changes) -> JobRecord:
    return replace(R, job=replace(J, **changes))


RECORDS = {
    "common": R,
    "fresh": JobRecord.new(J, 0.0),
    "killed": replace(R, killed=True),
    "service": spec(kind=JobKind.SERVICE, duration_s=None),
    "gang-different-machine": spec(gang=True, different_machine=True),
    "negative-priority": spec(priority=-5),
    "constraints": spec(constraints=(Constraint("zone", ConstraintOp.EQ, ("a",)),)),
    "bad-constraint": spec(constraints=(Constraint("zone", ConstraintOp.EQ, ()),)),
    "extra-resources": spec(request=Resources(1, 1, 1, (("gpu", 1),))),
    "int-submitted": replace(R, submitted_at=5),
    "int-duration": spec(duration_s=30),
    "nan-time": replace(R, placed_at=float("nan")),
    "inf-duration": spec(duration_s=float("inf")),
    "negative-time": replace(R, first_attempt_at=-1.0),
    "negative-zero-time": replace(R, placed_at=-0.0),
    "short-tasks": replace(R, tasks="pa"),
    "unknown-state": replace(R, tasks="paz"),
    "non-ascii-state": replace(R, tasks="pa\u00e9"),
    "space-state": replace(R, tasks="p a"),
    "slash-id": spec(id="a/b"),
    "empty-id": spec(id=""),
    "kind-as-text": spec(kind="batch"),
    "zero-tasks": replace(R, job=replace(J, tasks=0), tasks=""),
    "bool-priority": spec(priority=True),
    "float-priority": spec(priority=1.0),
    "huge-priority": spec(priority=1 << 70),
    "str-subclass-owner": spec(owner=Owner("o")),
    "negative-per-machine": spec(max_per_machine=-1),
    "text-gang": spec(gang="yes"),
    "negative-cpu": spec(request=Resources(-1, 1, 1)),
    "bytes-reason": replace(R, reason=b"x"),
    "int-killed": replace(R, killed=1),
    "not-a-record": "j",
}


def generic(record) -> bytes:
    """The generic path: the map, packed, decoded back and compared."""
    job_id = getattr(getattr(record, "job", None), "id", "?")
    return codec_envelope.encode(f"job {job_id}", record, codec_job._record_map, codec_job._record_from_map)


def shape_ok(r) -> bool:
    """Whether ``encode_job_record`` packs ``r`` without the decode-back (the common shape)."""
    return codec_job._common_spec_map(r) is not None

def outcome(encode, value):
    """The bytes, or the error message."""
    try:
        return encode(value)
    except CodecError as exc:
        return f"CodecError: {exc}"


@pytest.mark.parametrize("name", list(RECORDS), ids=list(RECORDS))
def test_the_common_shape_path_encodes_as_the_generic_path(name):
    assert outcome(encode_job_record, RECORDS[name]) == outcome(generic, RECORDS[name])


@given(job_records())
def test_generated_records_encode_as_the_generic_path(record):
    assert encode_job_record(record) == generic(record)


@pytest.mark.parametrize("name, trusted", [
    ("common", True), ("fresh", True), ("killed", True), ("service", True), ("gang-different-machine", True),
    ("constraints", True), ("int-submitted", False), ("negative-zero-time", False), ("extra-resources", False),
    ("kind-as-text", False),
], ids=lambda x: str(x))
def test_the_common_shapes_skip_the_decode_back(name, trusted):
    assert shape_ok(RECORDS[name]) is trusted


def test_a_packed_record_decodes_to_itself_from_its_bytes():
    wake_codec_memos()  # as a MemoryStore does: the memos are dormant on the etcd path
    raw = encode_job_record(R)
    assert decode_job_record("/cell/jobs/j", raw) is R
    assert RECORD_MEMO.get(bytes(bytearray(raw))) is R  # equal bytes of another object: the same value


def test_a_negative_zero_time_is_not_remembered():
    record = RECORDS["negative-zero-time"]
    decoded = decode_job_record("/cell/jobs/j", encode_job_record(record))
    assert decoded == record and decoded is not record


def test_a_checked_spec_is_remembered_only_when_it_passed():
    good, bad = RECORDS["service"], RECORDS["slash-id"]
    assert [shape_ok(good) for _ in range(2)] == [True, True]
    assert codec_job_fast._SHAPED_SPECS[id(good.job)][0] is good.job
    assert [shape_ok(bad) for _ in range(2)] == [False, False]
    assert id(bad.job) not in codec_job_fast._SHAPED_SPECS
    assert shape_ok(replace(good, tasks="z" * good.job.tasks)) is False  # the rest still checked
