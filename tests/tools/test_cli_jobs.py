"""The omega CLI's job and cell commands, run in process against the session etcd."""

from __future__ import annotations

import collections
import json
import socket

import pytest

from cellstate.codec.records import decode_job_record, decode_machine
from cellstate.jobspec import load_jobs
from cli_helpers import exit_status

JOB_TOML = """
[[job]]
id = "web"
kind = "service"
tasks = 2
cpu = 1
memory = "1Gi"

[[job]]
id = "etl"
kind = "batch"
tasks = 3
cpu = 0.5
memory = 512
duration_s = 60
"""


@pytest.fixture
def cell_args(etcd_server, cell_keys):
    return ["--endpoints", ",".join(etcd_server.endpoints), "--cell", cell_keys.cell]


def machines(store, keys):
    return [decode_machine(kv.key, kv.value) for kv in store.range(keys.kind_prefix("machines")).kvs]


def jobs(store, keys):
    return {r.id: r for r in (decode_job_record(kv.key, kv.value)
                              for kv in store.range(keys.kind_prefix("jobs")).kvs)}


def test_cell_init_counts_and_zones(cell_args, etcd_store, cell_keys):
    assert exit_status(["cell", "init", "--machines", "60", "--zones", "3", "--racks-per-zone", "2",
                    "--max-txn-ops", "16", *cell_args]) == 0
    cell = machines(etcd_store, cell_keys)
    assert len(cell) == 60
    assert collections.Counter(m.zone for m in cell) == {"zone-a": 20, "zone-b": 20, "zone-c": 20}
    assert len({m.rack for m in cell}) == 6 and all(m.rack.startswith(m.zone) for m in cell)
    assert len(set(m.capacity for m in cell)) == 3  # the demo shapes
    revisions = {kv.mod_revision for kv in etcd_store.range(cell_keys.kind_prefix("machines")).kvs}
    assert len(revisions) == 4  # 60 machines in txns of at most 16


def test_cell_init_refuses_existing_unless_replace(cell_args, etcd_store, cell_keys, capsys):
    assert exit_status(["cell", "init", "--machines", "5", *cell_args]) == 0
    assert exit_status(["cell", "init", "--machines", "7", *cell_args]) == 1
    assert "already has 5 machines; pass --replace" in capsys.readouterr().err
    assert exit_status(["cell", "init", "--machines", "7", "--replace", *cell_args]) == 0
    assert len(machines(etcd_store, cell_keys)) == 7


def test_cell_init_from_spec_file(tmp_path, cell_args, etcd_store, cell_keys):
    spec = tmp_path / "cell.toml"
    spec.write_text('machines = 4\nzones = 2\nracks_per_zone = 1\npackages = ["a", "b"]\n'
                    'packages_per_machine = 1\nplatforms = { "risc-v" = 1 }\n'
                    'shapes = [{ cpu = 4, memory = "8Gi", gpu = 2, weight = 1 }]\n')
    assert exit_status(["cell", "init", "--spec", str(spec), *cell_args]) == 0
    cell = machines(etcd_store, cell_keys)
    assert {m.capacity.to_dict()["gpu"] for m in cell} == {2000}  # milli: two devices
    assert {m.capacity.to_dict()["gpu.1"] for m in cell} == {1000}
    assert {m.platform for m in cell} == {"risc-v"} and all(len(m.packages) == 1 for m in cell)


def test_cell_init_from_the_gpu_example(cell_args, etcd_store, cell_keys):
    from pathlib import Path

    from cellstate.devices import MODEL_LABEL, device_count

    example = Path(__file__).resolve().parents[2] / "docs" / "examples" / "gpu-cell.toml"
    assert exit_status(["cell", "init", "--spec", str(example), "--machines", "30", *cell_args]) == 0
    cell = machines(etcd_store, cell_keys)
    models = {dict(m.labels).get(MODEL_LABEL, ""): device_count(m.capacity) for m in cell}
    assert models.get("V100M32") == 8 and models.get("P100") == 2 and models.get("") == 0
    assert all(m.capacity.get("gpu") == 1000 * device_count(m.capacity) for m in cell)


def test_cell_init_gpu_shapes_from_flags_and_the_gpu_mix_in_its_line(cell_args, etcd_store, cell_keys, capsys):
    from cellstate.devices import MODEL_LABEL, device_count

    assert exit_status(["cell", "init", "--machines", "12", "--shape", "96,512Gi,0,8,V100M32", "--shape",
                        "64,256Gi,0,2,P100:2", "--shape", "32,128Gi", *cell_args]) == 0
    cell = machines(etcd_store, cell_keys)
    by_model = collections.Counter()
    for m in cell:
        by_model[dict(m.labels).get(MODEL_LABEL, "")] += device_count(m.capacity)
    assert by_model["V100M32"] % 8 == 0 and by_model["P100"] % 2 == 0 and by_model[""] == 0
    holders = sum(1 for m in cell if device_count(m.capacity))
    mix = ", ".join(f"{n} {model}" for model, n in by_model.most_common() if model)
    assert f"; {sum(by_model.values())} GPUs on {holders} machines ({mix}) at revision" in capsys.readouterr().out


@pytest.mark.parametrize("flags", [["--shape", "16"], ["--shape", "x,64Gi"], ["--machines", "0"],
                                   ["--zones", "27"], ["--shape", "4,8GB"], ["--shape", "96,512Gi,0,8"],
                                   ["--shape", "96,512Gi,0,x,V100"], ["--shape", "96,512Gi,0,99,V100"],
                                   ["--shape", "96,512Gi,0,0,V100"]],
                         ids=["shape-too-short", "shape-cores", "no-machines", "too-many-zones", "shape-unit",
                              "gpus-without-model", "gpus-not-a-number", "too-many-gpus", "model-without-gpus"])
def test_cell_init_bad_flags(cell_args, etcd_store, cell_keys, flags):
    assert exit_status(["cell", "init", *flags, *cell_args]) == 2
    assert machines(etcd_store, cell_keys) == []


def test_submit_kill_check(tmp_path, cell_args, etcd_store, cell_keys, capsys):
    path = tmp_path / "jobs.toml"
    path.write_text(JOB_TOML)
    assert exit_status(["cell", "init", "--machines", "3", *cell_args]) == 0
    assert exit_status(["submit", str(path), *cell_args]) == 0
    assert sorted(jobs(etcd_store, cell_keys)) == ["etl", "web"]
    assert exit_status(["submit", str(path), *cell_args]) == 1
    assert "already exist: etl, web" in capsys.readouterr().err
    assert exit_status(["kill", "web", *cell_args]) == 0
    assert jobs(etcd_store, cell_keys)["web"].tasks == "kk"
    assert exit_status(["kill", "nope", *cell_args]) == 1
    assert exit_status(["check", *cell_args]) == 0


def test_check_exit_codes_and_json(cell_args, etcd_store, cell_keys, capsys):
    assert exit_status(["cell", "init", "--machines", "3", *cell_args]) == 0
    assert exit_status(["check", *cell_args]) == 0
    assert "OK" in capsys.readouterr().out
    etcd_store.put(cell_keys.machine("m00001"), b"not msgpack \xc1")
    assert exit_status(["check", "--json", *cell_args]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and report["machines"] == 2
    assert [(v["kind"], v["key"]) for v in report["violations"]] == [("undecodable", cell_keys.machine("m00001"))]


def test_generate_out_is_seeded(tmp_path):
    outs = []
    for name, seed in (("a.json", 7), ("b.json", 7), ("c.json", 8)):
        assert exit_status(["generate", "--seed", str(seed), "--duration", "30", "--rate", "2",
                        "--out", str(tmp_path / name)]) == 0
        outs.append((tmp_path / name).read_text())
    assert outs[0] == outs[1] and outs[0] != outs[2]
    jobs_a = load_jobs(tmp_path / "a.json")
    assert 20 <= len(jobs_a) <= 110 and all(j.id.startswith("w7-") for j in jobs_a)


def test_generate_submit_live(cell_args, etcd_store, cell_keys):
    assert exit_status(["cell", "init", "--machines", "3", *cell_args]) == 0
    assert exit_status(["generate", "--submit", "--seed", "3", "--duration", "1", "--rate", "20",
                    "--service-fraction", "0.5", *cell_args]) == 0
    submitted = jobs(etcd_store, cell_keys)
    assert len(submitted) >= 5 and {r.job.kind.value for r in submitted.values()} == {"batch", "service"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("argv, code", [
    (["check", "--endpoints", "localhost"], 2),
    (["check", "--cell", "a/b"], 2),
    (["kill", "j", "--endpoints", "127.0.0.1:{free}"], 1),
], ids=["endpoint-without-port", "cell-with-slash", "unreachable"])
def test_store_flag_errors(argv, code):
    argv = [a.replace("{free}", str(_free_port())) for a in argv]
    assert exit_status(argv) == code
