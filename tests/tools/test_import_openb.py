"""``omega import openb``: pods as timed one-task jobs on GPU machines, with their ground truth."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from cellstate.devices import MODEL_LABEL
from tests.tools.cli_helpers import run_cli
from tools.trace.events import JobKill, JobSubmit, MachineAdd
from tools.trace.format import read_trace

DATA = Path(__file__).resolve().parents[1] / "data" / "openb"
NODES, PODS = DATA / "nodes40.csv", DATA / "pods_default_600.csv"


def rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_pods_become_timed_jobs_on_gpu_machines_with_their_truth(tmp_path):
    out = tmp_path / "openb.omt"
    status, text, err = run_cli(["import", "openb", "--nodes", str(NODES), "--pods", str(PODS), "--out", str(out)])
    assert status == 0, err
    pods = rows(PODS)
    never = sum(1 for p in pods if not p["scheduled_time"])
    assert f"{never} never scheduled" in text
    header, events = read_trace(out)
    with events:
        evs = list(events)
        truth = events.truth
    machines = [e.machine for e in evs if isinstance(e, MachineAdd)]
    assert len(machines) == 40 and sum(m.capacity.get("gpu") for m in machines) == 169_000
    assert all(dict(m.labels)[MODEL_LABEL] for m in machines)
    submits = {e.job.id: e for e in evs if isinstance(e, JobSubmit)}
    kills = {e.job_id: e for e in evs if isinstance(e, JobKill)}
    assert len(submits) == len(kills) == 600
    assert all(kills[j].t >= submits[j].t for j in submits)
    assert [e.t for e in evs] == sorted(e.t for e in evs)
    share = next(p for p in pods if p["num_gpu"] == "1" and int(p["gpu_milli"]) < 1000)
    assert submits[share["name"]].job.request.get("gpu") == int(share["gpu_milli"])
    t0 = min(float(p["creation_time"]) for p in pods)
    pending = next(p for p in pods if not p["scheduled_time"] and float(p["creation_time"]) > t0)
    assert truth.delays[pending["name"]] == [None]
    ran = next(p for p in pods if p["scheduled_time"] and float(p["creation_time"]) > t0)
    assert truth.delays[ran["name"]] == [float(ran["scheduled_time"]) - float(ran["creation_time"])]


def test_a_replay_placing_pods_the_real_cell_never_ran_does_not_meet_the_scheduled_goal(tmp_path):
    out = tmp_path / "openb.omt"
    assert run_cli(["import", "openb", "--nodes", str(NODES), "--pods", str(PODS), "--out", str(out)])[0] == 0
    status, text, err = run_cli(["replay", str(out), "-o", "json"])
    assert status == 0, err
    fidelity = json.loads(text)["fidelity"]
    assert fidelity["replay_only"] > 0
    assert fidelity["goals"]["scheduled_ratio"] is False


def test_a_list_without_times_is_refused_and_nothing_is_written(tmp_path):
    out = tmp_path / "x.omt"
    status, _, err = run_cli(["import", "openb", "--nodes", str(NODES), "--pods", str(DATA / "pods_multigpu20_200.csv"),
                              "--out", str(out)])
    assert status == 65 and "no creation_time column" in err and "gpu-frag" in err
    assert not out.exists()


# The first rows of the upstream openb_pod_list_nomem_cpu0.csv (hkust-adsl/kubernetes-scheduler-simulator
# data/csv): the nomem variants leave out the memory_mib column.
NOMEM = """name,cpu_milli,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
openb-pod-0000,12000,1,1000,,LS,Running,0,12537496,0
openb-pod-0001,6000,1,460,,LS,Running,427061,12902960,427061
openb-pod-0015,88000,8,1000,,Burstable,Succeeded,9437497,10769854,9437497
openb-pod-0055,11908,1,1000,,BE,Pending,10001278,10001403,
"""


def test_a_list_without_memory_asks_no_memory_and_says_so(tmp_path):
    pods, out = tmp_path / "nomem.csv", tmp_path / "nomem.omt"
    pods.write_text(NOMEM)
    status, text, err = run_cli(["import", "openb", "--nodes", str(NODES), "--pods", str(pods), "--out", str(out)])
    assert status == 0, err
    assert "4 of 4 pods as jobs" in text and "absent optional columns: memory_mib (no memory asked" in text
    header, events = read_trace(out)
    with events:
        jobs = {e.job.id: e.job for e in events if isinstance(e, JobSubmit)}
    assert "absent optional columns: memory_mib" in header.notes
    assert jobs["openb-pod-0015"].request.cpu == 88_000 and jobs["openb-pod-0015"].request.get("gpu") > 0
    assert {j.request.memory for j in jobs.values()} == {0}


def test_pods_no_node_could_ever_hold_are_counted_in_the_summary_and_the_notes(tmp_path):
    """A pod asking 9 GPUs of nodes with at most 8 (or more CPU than any node) stays in the trace,
    as the real cell's pod did, but the import says it can never be placed."""
    pods, out = tmp_path / "pods.csv", tmp_path / "p.omt"
    pods.write_text(NOMEM + "big9,1000,9,1000,,LS,Running,5,100,5\nhuge,999000,0,0,,LS,Running,6,100,6\n"
                    "h100,1000,1,1000,H100,LS,Running,7,100,7\n")
    status, text, err = run_cli(["import", "openb", "--nodes", str(NODES), "--pods", str(pods), "--out", str(out)])
    assert status == 0, err
    assert "7 of 7 pods as jobs" in text and "1 asking a GPU model no node has" in text
    assert "2 asking more CPU, memory or GPUs than any node (of their models) has" in text
    assert "and 2 more than any node (of their models) holds (they can never be placed)" in err
    header, events = read_trace(out)
    with events:
        assert sum(isinstance(e, JobSubmit) for e in events) == 7
    assert "2 asking more CPU, memory or GPUs than any node" in header.notes


def test_a_missing_list_is_a_usage_error(tmp_path):
    status, _, err = run_cli(["import", "openb", "--nodes", str(tmp_path / "none.csv"), "--pods", str(PODS),
                              "--out", str(tmp_path / "x.omt")])
    assert status == 2 and "none.csv: no such file" in err and not (tmp_path / "x.omt").exists()
