"""Fuzzing job spec files: random and mutated documents raise only ``JobSpecError``, and a
refused ``omega submit`` leaves the cell empty."""

from __future__ import annotations

import itertools
import json
import os
import sys
import tempfile

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.dirname(__file__))
from fuzzlib import json_values, mutated  # noqa: E402

from cellstate.jobspec import JobSpecError, load_jobs, parse_jobs  # noqa: E402
from cellstate.keys import CellKeys  # noqa: E402
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
    assert status == 2
    assert "nothing submitted" in capsys.readouterr().err
    assert etcd_store.range(keys.prefix).kvs == ()


@pytest.mark.parametrize("change", [{"resources": {"ssd": 2**70}}, {"priority": 2**64}, {"cpu": 1e300},
                                    {"memory": "99999999999999999999999Ti"}],
                         ids=["resource-beyond-64-bits", "priority-beyond-64-bits", "huge-cpu", "huge-memory"])
def test_values_beyond_msgpack_are_refused_when_loading(change):
    """Found by fuzzing: these loaded fine and then crashed `omega submit` when packed."""
    with pytest.raises(JobSpecError, match="cannot pack"):
        parse_jobs({**VALID_JOB, **change}, "big.json")
