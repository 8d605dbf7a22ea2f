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
