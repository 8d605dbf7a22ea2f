"""Job spec files: what is accepted, and every rejection names file, job and field —
with nothing written to the cell when any job of the file is invalid."""

from __future__ import annotations

import json

import pytest

from cellstate.jobspec import _label, JobSpecError, dump_jobs, job_from_mapping, load_jobs, mebibytes, FieldError
from cellstate.model import Constraint, ConstraintOp, JobKind
from cellstate.resources import Resources
from tools.cli import main

def run_cli(argv: list[str]) -> int:
    """Exit status of ``omega argv`` run in process (usage errors exit via SystemExit)."""
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


GOOD = {"id": "web", "kind": "service", "tasks": 3, "cpu": 0.5, "memory": "2Gi"}

TOML_TWO = """
[[job]]
id = "etl"
kind = "batch"
tasks = 100
cpu = 2
memory = 4096
disk = "10Gi"
gpu = 1
resources = { licenses = 2 }
priority = 5
owner = "ana"
duration_s = 90
gang = true
package = "spark"

[[job]]
id = "web"
kind = "service"
tasks = 3
cpu = 0.25
memory = "512Mi"
different_machine = true
max_per_machine = 1
constraints = [{ attribute = "zone", op = "in", values = ["zone-a", "zone-b"] }]
"""


def test_toml_list_loads_every_field(tmp_path):
    path = tmp_path / "jobs.toml"
    path.write_text(TOML_TWO)
    etl, web = load_jobs(path)
    assert etl.kind is JobKind.BATCH and etl.tasks == 100
    assert etl.request == Resources.of(2000, 4096, 10240, gpu=1000, licenses=2)  # gpu: milli (one whole GPU)
    assert (etl.priority, etl.owner, etl.duration_s, etl.gang, etl.package) == (5, "ana", 90.0, True, "spark")
    assert web.request == Resources.of(250, 512)
    assert web.constraints == (Constraint("zone", ConstraintOp.IN, ("zone-a", "zone-b")),)
    assert (web.different_machine, web.max_per_machine, web.duration_s) == (True, 1, None)


@pytest.mark.parametrize("document", [GOOD, [GOOD], {"job": [GOOD]}], ids=["single", "list", "job-key"])
def test_json_shapes(tmp_path, document):
    path = tmp_path / "one.json"
    path.write_text(json.dumps(document))
    [job] = load_jobs(path)
    assert job.id == "web" and job.request == Resources.of(500, 2048)


def test_dump_round_trips(tmp_path):
    path = tmp_path / "jobs.toml"
    path.write_text(TOML_TWO)
    jobs = load_jobs(path)
    dump_jobs(jobs, tmp_path / "back.json")
    assert load_jobs(tmp_path / "back.json") == jobs


@pytest.mark.parametrize("text, mib", [(512, 512), ("512", 512), ("512Mi", 512), ("2Gi", 2048),
                                       ("1.5Gi", 1536), ("1Ti", 1024 ** 2), ("2048Ki", 2)],
                         ids=["int", "digits", "Mi", "Gi", "fractional-Gi", "Ti", "Ki"])
def test_mebibytes(text, mib):
    assert mebibytes("memory", text) == mib


@pytest.mark.parametrize("text", ["12MB", "Gi", "-1Gi", "1Ki", True, 1.5],
                         ids=["decimal-unit", "no-number", "negative", "fraction-of-MiB", "bool", "float-MiB"])
def test_mebibytes_rejects(text):
    with pytest.raises(FieldError):
        mebibytes("memory", text)


BAD = [
    ("cpu-negative", {"cpu": -1}, "cpu", "must be > 0, got -1"),
    ("cpu-zero", {"cpu": 0}, "cpu", "must be > 0"),
    ("cpu-string", {"cpu": "2"}, "cpu", "finite number"),
    ("cpu-tiny", {"cpu": 0.0001}, "cpu", "0.001"),
    ("memory-bad-unit", {"memory": "2GB"}, "memory", "2Gi"),
    ("memory-zero", {"memory": 0}, "memory", "> 0"),
    ("disk-negative", {"disk": -5}, "disk", ">= 0"),
    ("gpu-float", {"gpu": 1.5}, "gpu", "integer"),
    ("gpu-models-without-a-gpu", {"gpu_models": ["V100"]}, "gpu_models", "asks for a GPU (gpu or gpu_milli)"),
    ("gpu-models-with-gpu-0", {"gpu": 0, "gpu_models": ["V100"]}, "gpu_models", 'attribute = "gpu_model"'),
    ("tasks-zero", {"tasks": 0}, "tasks", ">= 1"),
    ("tasks-bool", {"tasks": True}, "tasks", "integer"),
    ("tasks-huge", {"tasks": 10 ** 7}, "tasks", "<="),
    ("kind-unknown", {"kind": "cron"}, "kind", "batch, service"),
    ("id-slash", {"id": "a/b"}, "id", "found '/'"),
    ("id-empty", {"id": ""}, "id", "non-empty"),
    ("id-newline", {"id": "a\nweb  service"}, "id", "found '\\n'"),
    ("id-escape", {"id": "a\x1b[2J"}, "id", "found '\\x1b'"),
    ("id-space", {"id": "a b"}, "id", "letters, digits"),
    ("id-too-long", {"id": "x" * 254}, "id", "at most 253 characters (it has 254)"),
    ("unknown-field", {"cpus": 1}, "cpus", "unknown field"),
    ("priority-string", {"priority": "high"}, "priority", "integer"),
    ("owner-int", {"owner": 3}, "owner", "string"),
    ("gang-int", {"gang": 1}, "gang", "true or false"),
    ("duration-negative", {"duration_s": -1}, "duration_s", ">= 0"),
    ("estimate-negative", {"estimate_s": -1}, "estimate_s", ">= 0"),
    ("estimate-not-a-number", {"estimate_s": "1h"}, "estimate_s", "finite number"),
    ("max-per-machine-negative", {"max_per_machine": -1}, "max_per_machine", ">= 0"),
    ("extra-resource-reserved", {"resources": {"cpu": 1}}, "resources", "own fields"),
    ("extra-resource-negative", {"resources": {"fpga": -1}}, "resources.fpga", ">= 0"),
    ("constraint-op", {"constraints": [{"attribute": "zone", "op": "like", "values": ["a"]}]},
     "constraints[0].op", "eq, in"),
    ("constraint-eq-two-values", {"constraints": [{"attribute": "zone", "op": "eq", "values": ["a", "b"]}]},
     "constraints[0].values", "exactly one value"),
    ("constraint-no-attribute", {"constraints": [{"op": "exists"}]}, "constraints[0].attribute", "attribute"),
    ("constraint-unknown-field", {"constraints": [{"attribute": "zone", "op": "exists", "why": 1}]},
     "constraints[0].why", "unknown field"),
    ("missing-memory", {"memory": None}, "memory", "missing required field"),
]


def _bad_job(change: dict) -> dict:
    job = {**GOOD, "id": "bad", **change}
    return {k: v for k, v in job.items() if v is not None}


@pytest.mark.parametrize("change, field, message", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_rejection_names_file_job_and_field(tmp_path, change, field, message):
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps([GOOD, _bad_job(change)]))
    with pytest.raises(JobSpecError) as err:
        load_jobs(path)
    assert err.value.field == field
    assert message in err.value.message
    job_id = change.get("id", "bad")
    job_label = f"job[1] {_label(1, job_id)[7:]}" if job_id else "job[1]"  # (a long id cut short)
    assert str(err.value).startswith(f"{path}: {job_label}: field {field!r}: ")


@pytest.mark.parametrize("change, field, message", [b[1:] for b in BAD[:6]], ids=[b[0] for b in BAD[:6]])
def test_invalid_file_writes_nothing(tmp_path, etcd_server, etcd_store, cell_keys, capsys, change, field, message):
    good = tmp_path / "good.json"
    good.write_text(json.dumps([{**GOOD, "id": "other"}]))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([GOOD, _bad_job(change)]))
    code = run_cli(["submit", str(good), str(bad), "--endpoints", ",".join(etcd_server.endpoints),
                 "--cell", cell_keys.cell])
    assert code == 65  # EX_DATAERR: an invalid input file
    assert f"field {field!r}" in capsys.readouterr().err
    assert etcd_store.range(cell_keys.prefix).kvs == ()


def test_toml_single_job_table(tmp_path):
    path = tmp_path / "one.toml"
    path.write_text('id = "solo"\nkind = "batch"\ntasks = 1\ncpu = 1\nmemory = "1Gi"\n')
    assert [j.id for j in load_jobs(path)] == ["solo"]


@pytest.mark.parametrize("name, text, message", [
    ("dup.json", json.dumps([GOOD, GOOD]), "job[1] 'web': field 'id': duplicate id (also job[0])"),
    ("empty.json", "[]", "holds no jobs"),
    ("broken.toml", "[[job]\n", "not valid TOML"),
    ("jobs.yaml", "a: 1", "unknown file type"),
    ("scalar.json", "3", "must hold a job or a list"),
    ("extra.json", json.dumps({"job": [GOOD], "x": 1}), "field 'x': unknown top-level field"),
    ("notlist.json", json.dumps({"job": GOOD}), "field 'job': must be a list"),
    ("entry.json", json.dumps([GOOD, 7]), "job[1]: must be a table"),
], ids=["duplicate-id", "empty", "bad-toml", "unknown-suffix", "scalar", "extra-top-level", "job-not-list",
        "entry-not-table"])
def test_file_level_rejections(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(JobSpecError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")
                       .replace(")", r"\)")):
        load_jobs(path)


def test_missing_file_names_it(tmp_path):
    with pytest.raises(JobSpecError, match="nope.toml: cannot read"):
        load_jobs(tmp_path / "nope.toml")


def test_job_from_mapping_defaults():
    job = job_from_mapping(GOOD)
    assert (job.priority, job.owner, job.constraints, job.duration_s, job.gang) == (0, "", (), None, False)
