"""Fuzzing job spec files: random and mutated documents raise only ``JobSpecError``, and a
refused ``omega submit`` leaves the cell empty."""

from __future__ import annotations

import itertools
import json
import math
import os
import sys
import tempfile

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.dirname(__file__))
from fuzzlib import HUGE_INTEGERS, HUGE_SIZES, json_values, mutated  # noqa: E402

from cellstate.codec.records import decode_job_record, encode_job_record  # noqa: E402
from cellstate.jobspec import JobSpecError, load_jobs, parse_jobs  # noqa: E402
from cellstate.keys import CellKeys  # noqa: E402
from cellstate.model import JobRecord  # noqa: E402
from tools.cli import main  # noqa: E402

VALID_JOB = {"id": "web", "kind": "service", "tasks": 3, "cpu": 0.5, "memory": "512Mi", "disk": 10, "gpu": 1,
             "resources": {"ssd": 2}, "priority": 5, "owner": "ann", "package": "p",
             "constraints": [{"attribute": "zone", "op": "in", "values": ["a", "b"]},
                             {"attribute": "rack", "op": "exists"}],
             "duration_s": 2.5, "gang": True, "different_machine": False, "max_per_machine": 1}
VALID_DOC = {"job": [VALID_JOB, {**VALID_JOB, "id": "batch", "kind": "batch"}]}
_TOML_TOKENS = st.sampled_from(["[[job]]", "[job]", "id = \"a\"", "kind = \"batch\"", "tasks = 2", "tasks = 0",
                                "cpu = 1.5", "cpu = nan", "memory = \"2Gi\"", "memory = -1", "gang = true",
                                "constraints = [{attribute = \"zone\", op = \"eq\", values = [\"a\"]}]",
                                "constraints = 3", "resources = {gpu = 1}", "duration_s = inf", "x = [",
                                "priority = 9223372036854775808", "id = 1", "\"", "= =", "[[job.constraints]]"])


def _load(text: bytes, suffix: str):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "jobs" + suffix)
        with open(path, "wb") as f:
            f.write(text)
        return load_jobs(path)


def test_the_unmutated_document_is_valid():
    assert [job.id for job in parse_jobs(VALID_DOC)] == ["web", "batch"]


@settings(max_examples=200, deadline=None)
@given(document=json_values)
def test_random_documents_raise_only_job_spec_error(document):
    try:
        parse_jobs(document, "fuzz.json")
    except JobSpecError:
        pass


@settings(max_examples=300, deadline=None)
@given(document=mutated(VALID_DOC))
def test_mutated_valid_specs_raise_only_job_spec_error(document):
    try:
        parse_jobs(document, "fuzz.json")
    except JobSpecError:
        pass


@settings(max_examples=150, deadline=None)
@given(lines=st.lists(_TOML_TOKENS, max_size=8), raw=st.binary(max_size=30), as_bytes=st.booleans(),
       suffix=st.sampled_from([".toml", ".json", ".yaml"]))
def test_random_files_raise_only_job_spec_error(lines, raw, as_bytes, suffix):
    text = raw if as_bytes else "\n".join(lines).encode()
    try:
        _load(text, suffix)
    except JobSpecError:
        pass


_cells = itertools.count()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(document=mutated(VALID_DOC))
def test_refused_submit_writes_nothing(etcd_server, etcd_store, capsys, document):
    text = json.dumps(document).encode()
    try:
        _load(text, ".json")
    except JobSpecError:
        pass
    else:
        assume(False)  # only refused files are of interest here
    keys = CellKeys(cell=f"fuzz-submit-{os.getpid()}-{next(_cells)}")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "jobs.json")
        with open(path, "wb") as f:
            f.write(text)
        try:
            status = main(["submit", path, "--endpoints", etcd_server.endpoints[0], "--cell", keys.cell])
        except SystemExit as exit_:
            status = exit_.code
    assert status == 65  # EX_DATAERR: an invalid input file
    assert "nothing submitted" in capsys.readouterr().err
    assert etcd_store.range(keys.prefix).kvs == ()


@pytest.mark.parametrize("change", [{"resources": {"ssd": 2**70}}, {"priority": 2**64}, {"cpu": 1e300},
                                    {"memory": "99999999999999999999999Ti"}],
                         ids=["resource-beyond-64-bits", "priority-beyond-64-bits", "huge-cpu", "huge-memory"])
def test_values_beyond_msgpack_are_refused_when_loading(change):
    """Found by fuzzing: these loaded fine and then crashed `omega submit` when packed."""
    (field,) = change
    with pytest.raises(JobSpecError, match=f"field '{field}.*64-bit integer"):
        parse_jobs({**VALID_JOB, **change}, "big.json")


# ------------------------------------------------------------ huge, infinite and deep input

NUMERIC_FIELDS = ["tasks", "cpu", "memory", "disk", "gpu", "priority", "duration_s", "max_per_machine",
                  "resources"]
BEYOND = [*HUGE_INTEGERS, *HUGE_SIZES, 1e300, 1.7e308, 9.3e15, math.inf, -math.inf, math.nan, 10**18, 2**63 - 1]


@settings(max_examples=300, deadline=None)
@given(field=st.sampled_from(NUMERIC_FIELDS),
       value=st.sampled_from(BEYOND) | st.integers() | st.floats() | st.integers(-(10**500), 10**500))
def test_huge_and_infinite_numbers_are_refused_or_stored(field, value):
    """Any number in any numeric field: a one-line JobSpecError naming the field, or a job
    the codec packs (no OverflowError from float(10**400), int(inf) or round(cpu * 1000))."""
    document = {**VALID_JOB, field: {"ssd": value} if field == "resources" else value}
    try:
        (job,) = parse_jobs(document, "big.json")
    except JobSpecError as exc:
        assert exc.field.startswith(field) and "\n" not in str(exc) and len(str(exc)) < 300, str(exc)
    else:
        assert decode_job_record("k", encode_job_record(JobRecord.new(job, 0.0))).job == job


def _deep(opening: str, closing: str, depth: int = 100_000) -> str:
    return opening * depth + closing * depth


# (file name, text, what the one-line error must name)
BAD_FILES = [
    ("memory-400-digits.json", '{"id": "a", "kind": "batch", "tasks": 1, "cpu": 1, "memory": %s}' % ("9" * 400),
     "'memory': must be at most"),
    ("cpu-400-digits.json", '{"id": "a", "kind": "batch", "tasks": 1, "cpu": %s, "memory": 1}' % ("9" * 400),
     "'cpu': must be at most"),
    ("memory-inf-Mi.json", '{"id": "a", "kind": "batch", "tasks": 1, "cpu": 1, "memory": "%sMi"}' % ("9" * 400),
     "'memory': must be at most"),
    ("memory-inf-Mi.toml", 'id = "a"\nkind = "batch"\ntasks = 1\ncpu = 1\nmemory = "%sMi"\n' % ("9" * 400),
     "'memory': must be at most"),
    ("cpu-huge-float.toml", 'id = "a"\nkind = "batch"\ntasks = 1\ncpu = 1.7e308\nmemory = 1\n',
     "'cpu': must be at most"),
    ("cpu-huge.json", '{"id": "a", "kind": "batch", "tasks": 1, "cpu": 1e300, "memory": 1}', "'cpu': must be at most"),
    ("cpu-infinity.json", '{"id": "a", "kind": "batch", "tasks": 1, "cpu": Infinity, "memory": 1}',
     "'cpu': must be a finite number"),
    ("disk-1e400.json", '{"id": "a", "kind": "batch", "tasks": 1, "cpu": 1, "memory": 1, "disk": 1e400}',
     "'disk': must be a finite number"),
    ("duration-400-digits.json",
     '{"id": "a", "kind": "batch", "tasks": 1, "cpu": 1, "memory": 1, "duration_s": %s}' % ("9" * 400),
     "'duration_s': must be a finite number"),
    ("priority-hex-5000-digits.toml",
     'id = "a"\nkind = "batch"\ntasks = 1\ncpu = 1\nmemory = 1\npriority = 0x%s\n' % ("f" * 5000),
     "'priority': must be at most"),
    ("gpu-5000-digits.json",
     '{"id": "a", "kind": "batch", "tasks": 1, "cpu": 1, "memory": 1, "gpu": %s}' % ("9" * 5000), "not valid JSON"),
    ("deep-arrays.json", _deep("[", "]"), "not valid JSON: nested too deeply"),
    ("deep-objects.json", _deep('{"a": ', "}"), "not valid JSON: nested too deeply"),
    ("deep-in-a-field.json", '{"id": "a", "constraints": %s}' % _deep("[", "]"), "not valid JSON: nested too deeply"),
    ("deep-arrays.toml", "a = " + _deep("[", "]"), "not valid TOML: nested too deeply"),
    ("deep-tables.toml", "a = " + _deep("{b = ", "}"), "not valid TOML: nested too deeply"),
    ("deep-400.json", _deep("[", "]", 400), "must be a table/object of fields"),
]


@pytest.mark.parametrize("name,text,message", BAD_FILES, ids=[name for name, _, _ in BAD_FILES])
def test_huge_and_deep_input_is_a_one_line_error(etcd_server, etcd_store, capsys, tmp_path, name, text, message):
    """Each used to end `omega submit` in a traceback (OverflowError, RecursionError, ValueError):
    now exit 65 (an invalid input file), one line naming what is wrong, and nothing written."""
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(JobSpecError) as raised:
        load_jobs(path)
    assert "\n" not in str(raised.value) and message in str(raised.value), str(raised.value)[:300]
    keys = CellKeys(cell=f"fuzz-huge-{os.getpid()}-{next(_cells)}")
    good = tmp_path / "good.json"
    good.write_text(json.dumps(VALID_JOB))
    try:
        status = main(["submit", str(good), str(path), "--endpoints", etcd_server.endpoints[0], "--cell", keys.cell])
    except SystemExit as exit_:
        status = exit_.code
    err = capsys.readouterr().err
    assert status == 65, err
    assert err.count("\n") == 1 and message in err and "nothing submitted" in err, err[:500]
    assert len(err) < 400, err
    assert etcd_store.range(keys.prefix).kvs == ()
