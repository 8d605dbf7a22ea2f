"""Fuzzing the trace readers: only each reader's own error type may escape.

Random bytes into ``read_trace`` are covered in tests/tools/test_trace_format.py; here:
mutated valid omega traces, random SWF job lines and random Google task-event rows.
"""

from __future__ import annotations

import csv
import gzip
import io
import os
import sys
import tempfile

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.dirname(__file__))
from fuzzlib import msgpack_values, mutated  # noqa: E402

from cellstate.codec.records import job_to_map, machine_to_map  # noqa: E402
from cellstate.model import Job, JobKind, Machine  # noqa: E402
from cellstate.resources import Resources  # noqa: E402
from tools.trace.format import TraceError, read_trace  # noqa: E402
from tools.trace.google2011.importer import import_google2011  # noqa: E402
from tools.trace.google2011.schema import GoogleTraceError  # noqa: E402
from tools.trace.swf import FIELDS, SWFError, import_swf  # noqa: E402

HEADER = {"format": "omega-trace", "version": 1, "source": "fuzz", "created_at": "2024-01-01T00:00:00+00:00",
          "capacity_model": "none", "cell": "c", "time_unit": "s", "notes": ""}
MACHINE = machine_to_map(Machine(id="m1", capacity=Resources(1000, 1024), zone="z", labels=(("k", "v"),)))
JOB = job_to_map(Job(id="j1", kind=JobKind.BATCH, tasks=2, request=Resources(100, 10, 0, (("gpu", 1),)),
                     duration_s=3.5))
VALID_TRACE = [
    HEADER,
    {"type": "machine_add", "t": 0.0, "machine": MACHINE},
    {"type": "job_submit", "t": 1.0, "job": JOB},
    {"type": "task_end", "t": 2.0, "job": "j1", "task": 1, "status": "finished"},
    {"type": "machine_fail", "t": 2.5, "machine": "m1"},
    {"type": "machine_remove", "t": 3, "machine": "m1"},
    {"type": "job_kill", "t": 4.0, "job": "j1"},
    {"type": "end", "events": 6},
]


def _read_back(blob: bytes, name: str = "fuzz.omt") -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, name)
        with open(path, "wb") as f:
            f.write(blob)
        try:
            _, events = read_trace(path)
            with events:
                list(events)
        except TraceError:
            pass


def test_the_unmutated_trace_reads():
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ok.omt")
        with open(path, "wb") as f:
            f.write(b"".join(msgpack.packb(r) for r in VALID_TRACE))
        _, events = read_trace(path)
        with events:
            assert len(list(events)) == 6


@settings(max_examples=250, deadline=None)
@given(records=mutated(VALID_TRACE, values=msgpack_values), compress=st.booleans())
def test_mutated_valid_traces_raise_only_trace_error(records, compress):
    packed = b"".join(msgpack.packb(r) for r in records) if isinstance(records, list) else msgpack.packb(records)
    _read_back(gzip.compress(packed) if compress else packed)


@settings(max_examples=100, deadline=None)
@given(records=st.lists(st.sampled_from(VALID_TRACE[1:]), max_size=8), cut=st.integers(0, 400))
def test_reordered_and_cut_traces_raise_only_trace_error(records, cut):
    packed = b"".join(msgpack.packb(r) for r in [HEADER, *records])
    _read_back(packed[: len(packed) - cut])


# ------------------------------------------------------------------------------ SWF

SWF_HEADER = "; Computer: fuzz\n; MaxNodes: 4\n"
SWF_GOOD = "1 0 5 100 2 -1 -1 2 200 1024 1 3 1 -1 1 -1 -1 -1"
_SWF_TOKENS = st.sampled_from(["0", "1", "-1", "-2", "2.5", "1e308", "1e400", "nan", "inf", "-inf", "x", "",
                               "4000000", "1e-9", "0x10", "3", "99999999999999999999", "\u00b2", "1e30"])


@st.composite
def one_field_changed(draw):
    """The good line with one or two fields replaced by a token."""
    parts = SWF_GOOD.split()
    for _ in range(draw(st.integers(1, 2))):
        parts[draw(st.integers(0, len(parts) - 1))] = draw(_SWF_TOKENS.filter(bool))
    return " ".join(parts)


swf_lines = st.one_of(
    one_field_changed(),
    st.lists(_SWF_TOKENS, min_size=len(FIELDS), max_size=len(FIELDS)).map(" ".join),
    st.lists(_SWF_TOKENS, max_size=20).map(" ".join),
    st.text(max_size=40).filter(lambda s: "\n" not in s and "\r" not in s),
    st.just(SWF_GOOD),
)


@settings(max_examples=200, deadline=None)
@given(lines=st.lists(swf_lines, min_size=1, max_size=5), skip_bad=st.booleans())
def test_swf_lines_raise_only_swf_error(lines, skip_bad):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "fuzz.swf")
        with open(path, "w") as f:
            f.write(SWF_HEADER + "\n".join(lines) + "\n")
        try:
            stats = import_swf(path, os.path.join(tmp, "out.omt"), skip_bad=skip_bad)
        except SWFError:
            assert not skip_bad, "--skip-bad must skip every bad job line"
            return
        _, events = read_trace(os.path.join(tmp, "out.omt"))
        with events:
            assert sum(1 for e in events) == stats.machines + stats.jobs


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(["MaxNodes", "MaxProcs", "Computer"]), value=_SWF_TOKENS)
def test_swf_header_values_raise_only_swf_error(name, value):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "fuzz.swf")
        with open(path, "w") as f:
            f.write(f"; {name}: {value}\n{SWF_GOOD}\n")
        try:
            import_swf(path, os.path.join(tmp, "out.omt"))
        except SWFError:
            pass


# --------------------------------------------------------------------------- Google

_G_TOKENS = st.sampled_from(["", "0", "1", "2", "4", "5", "9", "11", "600000000", "700000000", "-1", "x",
                             "0.5", "1e400", "nan", "-0.1", "3.0", "\u00b2", "99999999999999999999"])
g_rows = st.one_of(
    st.lists(_G_TOKENS, min_size=13, max_size=13),
    st.lists(_G_TOKENS, max_size=15),
    st.tuples(st.sampled_from(["600000000", "700000000", "800000000"]), st.just(""),
              st.sampled_from(["1", "2"]), st.sampled_from(["0", "1"]), st.sampled_from(["", "5", "6"]),
              st.sampled_from(["0", "1", "4", "5", "7"]), st.just("u"), st.just("0"),
              st.sampled_from(["0", "9", "11"]), _G_TOKENS, _G_TOKENS, _G_TOKENS,
              st.sampled_from(["0", "1"])).map(list),
)
job_rows = st.lists(st.sampled_from(["600000000", "x", "", "5", "1", "2"]), max_size=8)


def _gzip_csv(path: str, rows) -> None:
    buf = io.StringIO()
    csv.writer(buf).writerows(rows)
    with gzip.open(path, "wt", newline="") as f:
        f.write(buf.getvalue())


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(g_rows, min_size=1, max_size=6), jobs=st.lists(job_rows, max_size=3))
def test_google_rows_raise_only_google_trace_error(rows, jobs):
    """GoogleTraceError is the importer's documented error for malformed rows."""
    rows = sorted(rows, key=lambda r: int(r[0]) if r and r[0].isdecimal() else 0)
    with tempfile.TemporaryDirectory() as tmp:
        task_events, job_events = os.path.join(tmp, "t.csv.gz"), os.path.join(tmp, "j.csv.gz")
        _gzip_csv(task_events, rows)
        _gzip_csv(job_events, jobs)
        try:
            import_google2011(task_events, job_events, os.path.join(tmp, "out.omt"))
        except GoogleTraceError:
            return
        _, events = read_trace(os.path.join(tmp, "out.omt"))
        with events:
            list(events)


def test_writer_refuses_integers_beyond_64_bits_with_trace_error(tmp_path):
    """Found by fuzzing: TraceWriter.write let msgpack's OverflowError escape."""
    from cellstate.model import Machine
    from tools.trace.events import MachineAdd
    from tools.trace.format import TraceHeader, TraceWriter

    header = TraceHeader(source="t", created_at="2024-01-01T00:00:00+00:00", capacity_model="none")
    with TraceWriter(tmp_path / "x.omt", header) as writer:
        with pytest.raises(TraceError, match="record 1: cannot pack"):
            writer.write(MachineAdd(0.0, Machine(id="m", capacity=Resources(2**70, 1))))


@pytest.mark.parametrize("column,value", [(9, "1e30"), (4, "x"), (3, "\u00b2"), (8, "")],
                         ids=["huge-cpu", "machine-not-a-number", "task-unicode-digit", "priority-empty"])
def test_google_bad_columns_name_the_line(tmp_path, column, value):
    """Found by fuzzing: these escaped as ValueError/OverflowError."""
    row = ["600000000", "", "1", "0", "5", "0", "u", "0", "9", "0.1", "0.1", "0.1", "0"]
    row[column] = value
    _gzip_csv(tmp_path / "t.csv.gz", [row])
    _gzip_csv(tmp_path / "j.csv.gz", [])
    with pytest.raises(GoogleTraceError, match="line 1: bad"):
        import_google2011(str(tmp_path / "t.csv.gz"), str(tmp_path / "j.csv.gz"), tmp_path / "o.omt")


@pytest.mark.parametrize("line,field", [(SWF_GOOD.replace(" 2 200 ", " 4000000 200 "), "req_procs"),
                                        (SWF_GOOD.replace(" 1024 ", " 1e300 "), "req_mem_KB")],
                         ids=["too-many-tasks", "memory-beyond-64-bits"])
def test_swf_limits_are_swf_errors(tmp_path, line, field):
    """Found by fuzzing: these escaped as TraceError/OverflowError (even with --skip-bad)."""
    (tmp_path / "x.swf").write_text(SWF_HEADER + line + "\n")
    with pytest.raises(SWFError, match=f"field {field}"):
        import_swf(str(tmp_path / "x.swf"), tmp_path / "o.omt")


def test_swf_node_count_is_bounded(tmp_path):
    """Found by fuzzing: MaxNodes 10**20 made the importer add machines forever."""
    (tmp_path / "x.swf").write_text("; MaxNodes: 99999999999999999999\n" + SWF_GOOD + "\n")
    with pytest.raises(SWFError, match="MaxNodes must be between 1 and"):
        import_swf(str(tmp_path / "x.swf"), tmp_path / "o.omt")
