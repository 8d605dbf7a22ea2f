"""The omega-trace file format: round trips, strict reading naming the record, fuzzing."""

from __future__ import annotations

import gzip
import io
import os
import re
import sys
import tempfile

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "cellstate"))
from strategies import ids, jobs, machines, times  # noqa: E402

from cellstate.codec.records import CodecError, job_from_map, job_to_map, machine_to_map  # noqa: E402
from cellstate.model import Job, JobKind, Machine  # noqa: E402
from cellstate.resources import Resources  # noqa: E402
from tools.trace.events import (  # noqa: E402
    JobKill,
    JobSubmit,
    MachineAdd,
    MachineFail,
    MachineRemove,
    TaskEnd,
    TaskEndStatus,
    TaskPlaced,
)
from tools.trace.format import TraceError, TraceHeader, TraceWriter, read_trace  # noqa: E402
from tools.trace.records import _nested, event_from_record  # noqa: E402

HEADER = TraceHeader(source="test", created_at="2024-01-01T00:00:00+00:00", capacity_model="none",
                     cell="c1", notes="n")
MACHINE = Machine(id="m1", capacity=Resources(1000, 1024))
JOB = Job(id="j1", kind=JobKind.BATCH, tasks=3, request=Resources(100, 10))


def event_at(draw, t):
    kind = draw(st.integers(0, 6))
    if kind == 0:
        return MachineAdd(t, draw(machines()))
    if kind == 1:
        return MachineRemove(t, draw(ids))
    if kind == 2:
        return MachineFail(t, draw(ids))
    if kind == 3:
        return JobSubmit(t, draw(jobs()))
    if kind == 4:
        return TaskEnd(t, draw(ids), draw(st.integers(0, 10**6)), draw(st.sampled_from(TaskEndStatus)))
    if kind == 5:
        return TaskPlaced(t, draw(ids), draw(st.integers(0, 10**6)), draw(ids))
    return JobKill(t, draw(ids))


@st.composite
def event_lists(draw):
    """Events of every type at non-decreasing times."""
    stamps = sorted(draw(st.lists(times, max_size=12)))
    return [event_at(draw, t) for t in stamps]


def read_all(path):
    header, events = read_trace(path)
    with events:
        return header, list(events)


@pytest.mark.parametrize("name", ["x.omt", "x.omt.gz"], ids=["plain", "gzip"])
@settings(max_examples=60, deadline=None)
@given(events=event_lists())
def test_round_trip_of_every_event_type(name, events):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, name)
        with TraceWriter(path, HEADER) as writer:
            for event in events:
                writer.write(event)
        with open(path, "rb") as f:
            assert (f.read(2) == b"\x1f\x8b") == name.endswith(".gz")
        assert read_all(path) == (HEADER, events)


def test_every_event_type_survives():
    events = [MachineAdd(0.0, MACHINE), JobSubmit(0.0, JOB), TaskEnd(1.5, "j1", 2, TaskEndStatus.FAILED),
              TaskPlaced(1.5, "j1", 0, "m1"), MachineFail(2.0, "m1"), MachineRemove(2.0, "m1"),
              JobKill(3.0, "j1")]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "all.omt")
        with TraceWriter(path, HEADER) as writer:
            for event in events:
                writer.write(event)
        assert read_all(path) == (HEADER, events)


def test_version_1_files_still_read(tmp_path):
    """A file written before task_placed existed (version 1) reads, and says it is version 1."""
    path = tmp_path / "v1.omt"
    path.write_bytes(packed(header_map(version=1), submit(0.0), end(1)))
    header, events = read_all(path)
    assert (header.version, events) == (1, [JobSubmit(0.0, JOB)])


def test_events_across_read_chunks_read_back_as_written(tmp_path):
    """Records the reader's 64 KiB chunks cut in two read whole, in order; an error after
    them still names its record."""
    events = [JobSubmit(float(i), JOB) if i % 5 == 0 else TaskEnd(float(i), "j1", i, TaskEndStatus.FINISHED)
              for i in range(6000)]
    path = tmp_path / "long.omt"
    with TraceWriter(path, HEADER) as writer:
        for event in events:
            writer.write(event)
    assert path.stat().st_size > 4 * 65536
    assert read_all(path) == (HEADER, events)
    records = [{"type": "task_end", "t": float(i), "job": "j", "task": i, "status": "finished"} for i in range(5000)]
    path.write_bytes(packed(header_map(), *records, dict(records[0], t=1.5), end(5001)))
    with pytest.raises(TraceError, match=r"record 5001: field 't': time goes backwards \(1.5 < previous 4999.0\)"):
        read_all(path)


def header_map(**changes):
    d = {"format": "omega-trace", "version": 1, "source": "s", "created_at": "c", "capacity_model": "m",
         "cell": "", "time_unit": "s", "notes": ""}
    d.update(changes)
    return {k: v for k, v in d.items() if v is not ...}


def submit(t, job_map=None):
    return {"type": "job_submit", "t": t, "job": job_map or job_to_map(JOB)}


def end(n):
    return {"type": "end", "events": n}


def packed(*records):
    return b"".join(msgpack.packb(r) for r in records)


BAD_MACHINE = dict(machine_to_map(MACHINE), capacity={"cpu": -1, "memory": 0, "disk": 0})
GOOD = [submit(float(i)) for i in range(100)]
CASES = [
    ("empty-file", b"", "truncated before its first record (no end record)"),
    ("no-end-record", packed(header_map(), *GOOD), "truncated after record 100 (no end record)"),
    ("cut-inside-record", packed(header_map(), *GOOD)[:-5], "truncated after record 99 (record 100 is incomplete)"),
    ("cut-inside-header", packed(header_map())[:10], "truncated before its first record (record 0 is incomplete)"),
    ("corrupt-byte", packed(header_map(), submit(0.0)) + b"\xc1" + packed(end(1)), "record 2: not msgpack"),
    ("unknown-version", packed(header_map(version=99), end(0)), "record 0: field 'version': unknown version 99"),
    ("task-placed-in-v1", packed(header_map(), {"type": "task_placed", "t": 0.0, "job": "j", "task": 0,
                                                 "machine": "m"}, end(1)), "record 1: field 'type'"),
    ("task-placed-negative-task", packed(header_map(version=2), {"type": "task_placed", "t": 0.0, "job": "j",
                                                                 "task": -1, "machine": "m"}, end(1)),
     "record 1: field 'task'"),
    ("not-a-trace", packed({"format": "other"}), "record 0: field 'format': not an omega-trace file"),
    ("header-not-map", packed([1, 2]), "record 0: expected a map, got [1, 2]"),
    ("header-missing-field", packed(header_map(notes=...)), "record 0: field 'notes': missing required field"),
    ("header-unknown-field", packed(header_map(extra=1)), "record 0: field 'extra': unknown field"),
    ("time-unit", packed(header_map(time_unit="ms")), "record 0: field 'time_unit'"),
    ("time-backwards", packed(header_map(), submit(5.0), submit(4.0), end(2)),
     "record 2: field 't': time goes backwards (4.0 < previous 5.0)"),
    ("negative-time", packed(header_map(), submit(-1.0), end(1)), "record 1: field 't': expected a non-negative"),
    ("time-not-number", packed(header_map(), submit("x"), end(1)), "record 1: field 't'"),
    ("unknown-type", packed(header_map(), {"type": "reboot", "t": 0.0}), "record 1: field 'type'"),
    ("missing-payload", packed(header_map(), {"type": "job_kill", "t": 0.0}),
     "record 1: field 'job': missing required field"),
    ("extra-field", packed(header_map(), {"type": "job_kill", "t": 0.0, "job": "j", "x": 1}),
     "record 1: field 'x': unknown field"),
    ("bad-machine", packed(header_map(), {"type": "machine_add", "t": 0.0, "machine": BAD_MACHINE}),
     "record 1: field 'machine.capacity.cpu'"),
    ("bad-job", packed(header_map(), submit(0.0, dict(job_to_map(JOB), tasks=0))), "record 1: field 'job.tasks'"),
    ("bad-status", packed(header_map(), {"type": "task_end", "t": 0.0, "job": "j", "task": 0, "status": "ok"}),
     "record 1: field 'status'"),
    ("id-with-slash", packed(header_map(), {"type": "machine_fail", "t": 0.0, "machine": "a/b"}),
     "record 1: field 'machine'"),
    ("end-count-wrong", packed(header_map(), submit(0.0), end(5)), "record 2: end record says 5 events, read 1"),
    ("data-after-end", packed(header_map(), end(0), submit(0.0)), "record 2: data after the end record"),
]


@pytest.mark.parametrize("data, message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
def test_invalid_files_name_the_record(tmp_path, data, message, compress):
    path = tmp_path / "x.omt"
    path.write_bytes(gzip.compress(data) if compress else data)
    with pytest.raises(TraceError) as info:
        read_all(path)
    assert str(info.value).startswith("trace x.omt: ")
    assert message in str(info.value)


def test_truncated_gzip_stream(tmp_path):
    path = tmp_path / "x.omt.gz"
    path.write_bytes(gzip.compress(packed(header_map(), *GOOD, end(100)))[:-30])
    with pytest.raises(TraceError, match=r"trace x.omt.gz: truncated after record \d+"):
        read_all(path)


def test_writer_rejects_time_going_backwards_and_invalid_events(tmp_path):
    with TraceWriter(tmp_path / "x.omt", HEADER) as writer:
        writer.write(JobKill(2.0, "j"))
        with pytest.raises(TraceError, match=r"record 2: field 't': time goes backwards"):
            writer.write(JobKill(1.0, "j"))
        with pytest.raises(TraceError, match=r"record 2: field 'job'"):
            writer.write(JobKill(3.0, "a/b"))
        with pytest.raises(TraceError, match=r"record 2: field 'tasks'"):
            writer.write(JobSubmit(3.0, Job(id="j", kind=JobKind.BATCH, tasks=0, request=Resources())))
        writer.write(JobKill(3.0, "j"))
    assert read_all(tmp_path / "x.omt")[1] == [JobKill(2.0, "j"), JobKill(3.0, "j")]


def test_writer_left_by_an_exception_leaves_a_truncated_file(tmp_path):
    with pytest.raises(RuntimeError):
        with TraceWriter(tmp_path / "x.omt", HEADER) as writer:
            writer.write(JobKill(0.0, "j"))
            raise RuntimeError("import failed")
    with pytest.raises(TraceError, match="truncated after record 1"):
        read_all(tmp_path / "x.omt")


@pytest.mark.parametrize("name", ["x.omt", "x.omt.gz"], ids=["plain", "gzip"])
def test_atomic_writer_shows_a_trace_only_when_complete(tmp_path, name):
    out = tmp_path / name
    out.write_bytes(b"older")
    with pytest.raises(RuntimeError):
        with TraceWriter(out, HEADER, atomic=True) as writer:
            writer.write(JobKill(0.0, "j"))
            raise RuntimeError("import failed")
    assert [p.name for p in tmp_path.iterdir()] == [name] and out.read_bytes() == b"older"
    with TraceWriter(out, HEADER, atomic=True) as writer:
        writer.write(JobKill(0.0, "j"))
        assert out.read_bytes() == b"older"  # written beside it until closed
    assert [p.name for p in tmp_path.iterdir()] == [name]
    assert read_all(out)[1] == [JobKill(0.0, "j")]


def test_atomic_writer_needs_a_path():
    with pytest.raises(ValueError, match="needs a path"):
        TraceWriter(io.BytesIO(), HEADER, atomic=True)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=200), prefix=st.sampled_from([b"", packed(header_map())]),
       compress=st.booleans())
def test_fuzz_only_trace_error_escapes(data, prefix, compress):
    blob = prefix + data
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "fuzz.omt")
        with open(path, "wb") as f:
            f.write(gzip.compress(blob)[: len(blob) + 20] if compress else blob)
        try:
            read_all(path)
        except TraceError:
            pass


@settings(max_examples=200, deadline=None)
@given(job=jobs(), int_duration=st.booleans(), extra_field=st.booleans())
def test_job_submit_records_decode_as_job_from_map(job, int_duration, extra_field):
    """The reader's straight-line spec decoding gives exactly ``job_from_map``'s Job (or error)."""
    job_map = job_to_map(job)
    if int_duration and job_map.get("duration_s") is not None:
        job_map["duration_s"] = int(job_map["duration_s"])
    if extra_field:
        job_map["colour"] = "red"

    def outcome(decode):
        try:
            return repr(decode())
        except CodecError as exc:
            return f"CodecError {exc.field}: {exc.message}"

    from_record = outcome(lambda: event_from_record("k", submit(1.0, job_map)).job)
    assert from_record == outcome(lambda: _nested("k", "job", job_from_map, job_map))


def placed(t, job="j", task=0, machine="m"):
    return {"type": "task_placed", "t": t, "job": job, "task": task, "machine": machine}


def test_read_placements_takes_the_task_placed_records_of_the_time_read(tmp_path):
    """The triples of the task_placed records at the last event's time, the next event returned
    (read as ``__next__`` reads it: here a placement at a later time), None at the end."""
    path = tmp_path / "p.omt"
    records = [submit(0.0)] + [placed(0.0, task=i, machine=f"m{i % 3}") for i in range(300)] + [placed(2.0)]
    path.write_bytes(packed(header_map(version=2), *records, placed(2.0, task=1), end(len(records) + 1)))
    _, reader = read_trace(path)
    with reader:
        assert next(reader) == JobSubmit(0.0, JOB)
        run = []
        assert reader.read_placements(run) == TaskPlaced(2.0, "j", 0, "m")
        assert run == [("j", i, f"m{i % 3}") for i in range(300)]
        again = []
        assert reader.read_placements(again) is None and again == [("j", 1, "m")]


@pytest.mark.parametrize("record, message", [
    (placed(0.0, task=-1), "record 3: field 'task'"),
    (placed(0.0, machine="a/b"), "record 3: field 'machine'"),
    (dict(placed(0.0), extra=1), "record 3: field 'extra': unknown field"),
    (placed(float("nan")), "record 3: field 't'"),
    ({("host" if k == "machine" else k): v for k, v in placed(0.0).items()}, "record 3: field 'machine': missing"),
], ids=["negative-task", "machine-not-an-id", "extra-field", "nan-time", "five-fields-one-unknown"])
def test_read_placements_raises_as_next_does(tmp_path, record, message):
    path = tmp_path / "p.omt"
    path.write_bytes(packed(header_map(version=2), submit(0.0), placed(0.0), record, placed(0.0), end(4)))
    _, reader = read_trace(path)
    with reader, pytest.raises(TraceError, match=message):
        next(reader)
        reader.read_placements([])


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
def test_read_placements_across_read_chunks_and_cut_inside_one(tmp_path, compress):
    """A run of placements the reader's 64 KiB chunks cut reads whole; a file cut inside its
    last record is truncated there, a file cut after a whole one lacks the end record."""
    records = [submit(0.0)] + [placed(0.0, task=i, machine=f"m{i % 7}") for i in range(12000)]
    data = packed(header_map(version=2), *records)
    assert len(data) > 4 * 65536
    path = tmp_path / "p.omt"
    path.write_bytes(gzip.compress(data + packed(end(len(records)))) if compress else data + packed(end(len(records))))
    _, reader = read_trace(path)
    with reader:
        next(reader)
        run = []
        assert reader.read_placements(run) is None
        assert run == [("j", i, f"m{i % 7}") for i in range(12000)]
    for cut, message in ((data[:-3], "truncated after record 12000 (record 12001 is incomplete)"),
                         (data, "truncated after record 12001 (no end record)")):
        path.write_bytes(gzip.compress(cut) if compress else cut)
        _, reader = read_trace(path)
        with reader, pytest.raises(TraceError, match=re.escape(message)):
            next(reader)
            reader.read_placements([])


def test_an_atomic_writer_into_a_missing_directory_names_the_path_asked_for(tmp_path):
    out = tmp_path / "no-such-dir" / "x.omt"
    with pytest.raises(FileNotFoundError) as caught:
        TraceWriter(out, HEADER, atomic=True)
    assert caught.value.filename == str(out)


def test_import_openb_into_a_missing_directory_is_a_usage_error_naming_it(tmp_path):
    from tests.tools.cli_helpers import run_cli

    from pathlib import Path

    data = Path(__file__).resolve().parents[1] / "data" / "openb"
    out = tmp_path / "no-such-dir" / "x.omt"
    status, _, err = run_cli(["import", "openb", "--nodes", str(data / "nodes40.csv"), "--pods",
                              str(data / "pods_default_600.csv"), "--out", str(out)])
    assert status == 2 and err == f"omega: error: {out}: No such file or directory\n", err
