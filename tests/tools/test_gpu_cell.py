"""GPU devices in a live cell: two (or three, scoring by ``fgd``) ``omega scheduler run``
processes place GPU shares and whole GPUs on a real etcd; every placement holds named devices,
no device is over-committed and the cell checks clean."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "omega"))
from runtime_helpers import job_records, submit, wait_for  # noqa: E402
from cellstate.check import check_cell  # noqa: E402
from cellstate.codec.records import decode_alloc, decode_machine, encode_alloc, encode_machine  # noqa: E402
from cellstate.devices import MODEL_LABEL, claimed_devices, device_free, gpu_capacity  # noqa: E402
from cellstate.jobspec import parse_jobs  # noqa: E402
from cellstate.model import Alloc, Machine  # noqa: E402
from cellstate.resources import Resources  # noqa: E402
from cellstate.store import Put  # noqa: E402
from tests.tools.test_cmd_scheduler import SchedulerRun  # noqa: E402

GPUS = 4


def gpu_machines(store, keys, count: int) -> list[Machine]:
    machines = [Machine(f"g{i:02d}", Resources.of(32_000, 128_000, 0, **gpu_capacity(GPUS)), zone="zone-a",
                        labels=((MODEL_LABEL, "V100" if i % 2 else "T4"),)) for i in range(count)]
    store.txn((), [Put(keys.machine(m.id), encode_machine(m)) for m in machines])
    return machines


JOBS = parse_jobs({"job": [
    {"id": "share3", "kind": "batch", "tasks": 12, "cpu": 1, "memory": 1024, "gpu_milli": 300},
    {"id": "share7", "kind": "batch", "tasks": 6, "cpu": 1, "memory": 1024, "gpu_milli": 700},
    {"id": "whole1", "kind": "batch", "tasks": 5, "cpu": 1, "memory": 1024, "gpu": 1},
    {"id": "whole2", "kind": "batch", "tasks": 2, "cpu": 1, "memory": 1024, "gpu": 2, "gpu_models": ["V100"]},
]})


def allocs(store, keys) -> list[Alloc]:
    return [decode_alloc(kv.key, kv.value) for kv in store.range(keys.kind_prefix("allocs")).kvs]


def place_whole_then_shares(store, keys) -> None:
    """Submit JOBS' whole-GPU jobs, wait for their 7 tasks, then the shares, and wait for all 25
    tasks placed (the job records in the message if not)."""
    # whole GPUs first: the batch scheduler spreads shares over machines (it knows nothing of
    # fragmentation), which could leave no machine with two free V100s
    submit(store, keys, [j for j in JOBS if j.id.startswith("whole")])
    wait_for(lambda: sum(r.tasks.count("a") for r in job_records(store, keys)) == 7, 30, "7 placed")
    submit(store, keys, [j for j in JOBS if j.id.startswith("share")])
    # 12 x 0.3 + 6 x 0.7 + 5 + 2 x 2 = 16.8 GPUs asked of 24: everything fits
    try:
        wait_for(lambda: sum(r.tasks.count("a") for r in job_records(store, keys)) == 25, 30, "25 tasks placed")
    except AssertionError:
        raise AssertionError([(r.id, r.tasks, r.reason) for r in job_records(store, keys)]) from None


def test_two_schedulers_place_gpu_tasks_on_named_devices(etcd_server, etcd_store, cell_keys):
    machines = {m.id: m for m in gpu_machines(etcd_store, cell_keys, 6)}  # 24 devices, 12 of them V100
    runs = [SchedulerRun(etcd_server.endpoints, cell_keys.cell, f"s{i}", "--conflict-mode", "resource-fit")
            for i in range(2)]
    try:
        for run in runs:
            wait_for(run.serving, 20, f"{run.name} serving")
        place_whole_then_shares(etcd_store, cell_keys)
    finally:
        for run in runs:
            run.stop()
    report = check_cell(etcd_store, cell_keys)
    assert report.ok, report.violations[:5]
    placed = allocs(etcd_store, cell_keys)
    asked = {j.id: j.request.get("gpu") for j in JOBS}
    for a in placed:
        held = claimed_devices(a.resources)
        milli = asked[a.job_id]
        assert held and all(amount == min(milli, 1000) for _, amount in held)
        assert len(held) == max(1, milli // 1000)
        if a.job_id == "whole2":
            assert dict(machines[a.machine_id].labels)[MODEL_LABEL] == "V100"
    for kv in etcd_store.range(cell_keys.kind_prefix("machines")).kvs:
        m = decode_machine(kv.key, kv.value)
        assert all(0 <= free <= 1000 for free in device_free(m.capacity, m.allocated))


def test_check_flags_an_unbound_or_misbound_gpu_alloc(etcd_store, cell_keys):
    (machine,) = gpu_machines(etcd_store, cell_keys, 1)
    submit(etcd_store, cell_keys, parse_jobs({"id": "j", "kind": "batch", "tasks": 2, "cpu": 1, "memory": 64,
                                              "gpu_milli": 500, "gpu_models": ["V100"]}))
    bad = [Alloc("j", 0, machine.id, Resources.of(1000, 64, 0, gpu=500)),                     # no device named
           Alloc("j", 1, machine.id, Resources.of(1000, 64, 0, **{"gpu": 500, "gpu.7": 500}))]  # no device 7
    used = bad[0].resources + bad[1].resources
    etcd_store.txn((), [Put(cell_keys.alloc(a.job_id, a.task_index), encode_alloc(a)) for a in bad]
                   + [Put(cell_keys.machine(machine.id),
                          encode_machine(Machine(machine.id, machine.capacity, zone=machine.zone, labels=machine.labels,
                                                 allocated=used, task_count=2)))])
    kinds = {v.kind for v in check_cell(etcd_store, cell_keys).violations}
    assert {"device-binding", "gpu-model"} <= kinds


def test_explain_names_the_devices_a_gpu_task_would_hold(etcd_store, cell_keys):
    from cellstate.replica.watched import Replica
    from schedulers.chains import batch_pipeline
    from tools.explain import explain, render

    gpu_machines(etcd_store, cell_keys, 2)
    submit(etcd_store, cell_keys, parse_jobs({"id": "s", "kind": "batch", "tasks": 1, "cpu": 1, "memory": 64,
                                              "gpu_milli": 250}))
    replica = Replica(etcd_store, cell_keys)
    replica.sync()
    try:
        ex = explain(replica, "s", None, batch_pipeline({}), 5)
    finally:
        replica.close()
    assert ex.feasible == 2 and all(m.devices == "0" for m in ex.top)
    assert "GPU devices 0" in render(ex)
    assert "\nasks: 1 cores, 64 MiB, 250 milli of one GPU\n" in render(ex) and ex.to_dict()["asks"]


def test_job_status_shows_the_gpu_ask_models_and_the_devices_held(etcd_server, etcd_store, cell_keys, tmp_path):
    import json

    from cli_helpers import run_cli

    (machine,) = gpu_machines(etcd_store, cell_keys, 1)
    args = ["--endpoints", etcd_server.endpoints[0], "--cell", cell_keys.cell]
    # the example job file's commented GPU lines, uncommented, are a valid GPU job
    assert run_cli(["job", "init", str(tmp_path / "jobs.toml")])[0] == 0
    text = (tmp_path / "jobs.toml").read_text()
    for field in ("gpu_milli", "gpu_models"):
        assert f"\n# {field} = " in text
        text = text.replace(f"\n# {field} = ", f"\n{field} = ")
    (tmp_path / "jobs.toml").write_text(text)
    assert run_cli(["submit", str(tmp_path / "jobs.toml"), *args])[0] == 0
    held = Alloc("hello-batch", 1, machine.id, Resources.of(500, 512, 0, **{"gpu": 300, "gpu.2": 300}))
    etcd_store.txn((), [Put(cell_keys.alloc(held.job_id, held.task_index), encode_alloc(held))])

    status, out, _ = run_cli(["job", "status", "hello-batch", *args])
    assert status == 0, out
    assert "request per task: 0.5 cores, 512 MiB, 300 milli of one GPU;" in out
    assert "constraints: gpu_model in [V100M32, A100]" in out
    assert f"task 1: {machine.id}, GPU devices 2" in out
    status, out, _ = run_cli(["job", "status", "hello-batch", "-o", "json", *args])
    job = json.loads(out)
    assert job["gpu"] == {"count": 1, "milli": 300} and job["devices"] == {"1": "2"}
    assert job["constraints"] == ["gpu_model in [V100M32, A100]"]
    status, out, _ = run_cli(["job", "status", "hello-web", "-o", "json", *args])
    assert json.loads(out)["gpu"] is None and "GPU" not in run_cli(["job", "status", "hello-web", *args])[1]


def test_submit_warns_of_a_gpu_job_no_machine_could_ever_hold_and_keeps_it(etcd_server, etcd_store, cell_keys,
                                                                            tmp_path):
    from cli_helpers import run_cli

    gpu_machines(etcd_store, cell_keys, 2)  # 4 GPUs each, one T4 and one V100
    args = ["--endpoints", etcd_server.endpoints[0], "--cell", cell_keys.cell]
    path = tmp_path / "jobs.toml"
    path.write_text("\n".join(f'[[job]]\nid = "{name}"\nkind = "batch"\ntasks = 1\ncpu = 1\nmemory = 64\n{extra}\n'
                              for name, extra in (("nine", "gpu = 9"), ("h100", 'gpu = 1\ngpu_models = ["H100"]'),
                                                  ("t4x4", 'gpu = 4\ngpu_models = ["T4"]'),
                                                  ("t4x5", 'gpu = 5\ngpu_models = ["T4"]'),
                                                  ("share", "gpu_milli = 500"))))
    status, out, err = run_cli(["submit", str(path), *args])
    assert status == 0 and "submitted 5 job(s)" in out, err
    warned = {line.split("'")[1]: line for line in err.splitlines()}
    assert set(warned) == {"nine", "h100", "t4x5"}, err
    assert "asks gpu 9 GPUs (at most 4 GPUs on a machine)" in warned["nine"]
    assert "no machine meets its constraints (gpu_model in [H100])" in warned["h100"]
    assert "asks gpu 5 GPUs (at most 4 GPUs on a machine meeting its constraints)" in warned["t4x5"]
    assert all("it stays pending until one can" in line for line in warned.values())
    assert {r.id for r in job_records(etcd_store, cell_keys)} == {"nine", "h100", "t4x4", "t4x5", "share"}


FGD_CHAIN = """k = 4
sample_size = 6
[[filters]]
name = "machine_state"
[[filters]]
name = "resources_fit"
[[filters]]
name = "constraints"
[[scorers]]
name = "fgd"
[scorers.args]
workload = [{ cpu = 1000, gpu = 300, weight = 2 }, { cpu = 1000, gpu = 700 }, { cpu = 1000, gpu = 1000 }]
"""


@pytest.mark.parametrize("mode", ["resource-fit", "sequence"])
def test_three_fgd_scheduler_processes_share_gpu_machines_without_device_overcommit(
        etcd_server, etcd_store, cell_keys, tmp_path, mode):
    machines = {m.id: m for m in gpu_machines(etcd_store, cell_keys, 6)}
    chain = tmp_path / "fgd.toml"
    chain.write_text(FGD_CHAIN)
    runs = [SchedulerRun(etcd_server.endpoints, cell_keys.cell, f"f{i}", "--conflict-mode", mode,
                         "--config", str(chain)) for i in range(3)]
    try:
        for run in runs:
            wait_for(run.serving, 20, f"{run.name} serving")
        place_whole_then_shares(etcd_store, cell_keys)
    finally:
        finals = [run.stop() for run in runs]
    assert sum(f["commits"] for f in finals) >= 4  # the jobs' placements were committed
    report = check_cell(etcd_store, cell_keys)
    assert report.ok, report.violations[:5]
    placed = allocs(etcd_store, cell_keys)
    assert len(placed) == 25
    held: dict[tuple[str, int], int] = {}
    for a in placed:
        assert claimed_devices(a.resources), a
        for i, milli in claimed_devices(a.resources):
            held[(a.machine_id, i)] = held.get((a.machine_id, i), 0) + milli
    assert max(held.values()) <= 1000  # no device holds more than itself, summed from the allocs
    for kv in etcd_store.range(cell_keys.kind_prefix("machines")).kvs:
        m = decode_machine(kv.key, kv.value)
        free = device_free(m.capacity, m.allocated)
        assert all(0 <= f <= 1000 for f in free)
        assert [1000 - f for f in free] == [held.get((m.id, i), 0) for i in range(len(free))]  # ledger = allocs
    assert set(machines) >= {a.machine_id for a in placed}
