"""``omega sweep``: docs/examples/sweep-small.toml on both engines gives the same digests; a second
sweep into the same folder skips what is finished; a failed run is retried once and reported; a
bad spec is one line naming the key, exit 65, nothing written."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cli_helpers import run_cli
from tools.sweep.engines import ray_available
from tools.sweep.run import run_paths
from tools.sweep.spec import SpecError, load_spec

REPO = Path(__file__).resolve().parents[2]
SMALL = REPO / "docs" / "examples" / "sweep-small.toml"
TRACES = REPO / "tests" / "data" / "traces" / "sweep"

pytestmark = pytest.mark.slow


def sweep(*argv) -> tuple[int, dict, str]:
    status, out, err = run_cli(["sweep", *map(str, argv), "-o", "json"])
    return status, (json.loads(out) if out.strip() else {}), err


def digests(report: dict) -> dict[str, str]:
    return {run["id"]: run["digest"] for run in report["runs"]}


@pytest.fixture(scope="module")
def local_small(tmp_path_factory):
    out = tmp_path_factory.mktemp("local")
    status, report, err = sweep(SMALL, "--out", out, "--engine", "local")
    assert status == 0, err
    return out, report


def test_local_engine_runs_every_run_of_the_spec(local_small):
    out, report = local_small
    spec = load_spec(SMALL)
    assert len(spec.runs) == 4 and report["ran"] == 4 and report["failed"] == 0
    assert [r["id"] for r in report["runs"]] == [run.id for run in spec.runs]
    assert len(set(digests(report).values())) == 4  # the settings change the runs
    for run in report["runs"]:
        json_path, csv_path = run_paths(out, run["id"])
        data = json.loads(json_path.read_text())
        assert data["digest"] == run["digest"] and data["run"]["id"] == run["id"]
        jobs = list(csv.DictReader(csv_path.open()))
        assert len(jobs) == data["result"]["jobs_submitted"] == run["jobs_submitted"]
        placed = sum(int(j["placements"]) for j in jobs)
        assert placed == sum(s["tasks_placed"] for s in data["result"]["schedulers"])
    merged = list(csv.DictReader((out / "runs.csv").open()))
    assert [(r["id"], r["status"], r["digest"]) for r in merged] == [
        (r["id"], "done", r["digest"]) for r in report["runs"]]
    assert {r["t_job"] for r in merged} == {"0.1", "2.0"}


def test_same_seed_same_digest_in_another_sweep(local_small, tmp_path):
    _, first = local_small
    status, again, err = sweep(SMALL, "--out", tmp_path, "--workers", "1")
    assert status == 0, err
    assert digests(again) == digests(first)


@pytest.mark.skipif(not ray_available(), reason="ray is not installed (the [sweep] extra; .ci/run installs it)")
def test_ray_engine_gives_the_local_digests(local_small, tmp_path):
    """In a process of its own: Ray's driver state stays out of the test process."""
    _, local = local_small
    done = subprocess.run([sys.executable, "-m", "tools.cli", "sweep", str(SMALL), "--out", str(tmp_path),
                           "--engine", "ray", "-o", "json"], capture_output=True, text=True, cwd=REPO, timeout=240)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["engine"] == "ray" and report["ran"] == 4
    assert digests(report) == digests(local)


def test_resume_skips_finished_runs_and_redoes_the_rest(local_small, tmp_path):
    src, first = local_small
    shutil.copytree(src, tmp_path, dirs_exist_ok=True)
    ids = list(digests(first))
    json_path, _ = run_paths(tmp_path, ids[0])
    json_path.unlink()  # never finished
    half, _ = run_paths(tmp_path, ids[1])
    half.write_text(half.read_text()[:100])  # cut short: not complete
    status, report, err = sweep(SMALL, "--out", tmp_path)
    assert status == 0, err
    assert (report["ran"], report["resumed"]) == (2, 2)
    assert [r["status"] for r in report["runs"]] == ["done", "done", "resumed", "resumed"]
    assert digests(report) == digests(first)
    assert "4/4 (100%)" in err and "ETA" in err


def test_a_failing_run_is_retried_once_then_reported(tmp_path):
    broken = tmp_path / "broken.omt"
    broken.write_bytes(b"not a trace\n")
    spec = tmp_path / "spec.toml"
    spec.write_text(f'[sweep]\ntraces = ["{TRACES / "tiny-a.omt.gz"}", "{broken}"]\n')
    status, report, err = sweep(spec, "--out", tmp_path / "out")
    assert status == 1
    assert (report["ran"], report["retried"], report["failed"]) == (1, 1, 1)
    failed = [r for r in report["runs"] if r["status"] == "failed"]
    assert len(failed) == 1 and failed[0]["trace"] == "broken" and failed[0]["tries"] == 2 and failed[0]["error"]
    rows = list(csv.DictReader((tmp_path / "out" / "runs.csv").open()))
    assert sorted(r["status"] for r in rows) == ["done", "failed"]
    status, out, _ = run_cli(["sweep", str(spec), "--out", str(tmp_path / "out")])
    assert status == 1 and "FAILED" in out and "broken" in out


@pytest.mark.parametrize("text, named", [
    ('[sweep]\ntraces = ["T"]\n[grid]\nt_jobs = [1.0]\n', "'t_jobs'"),
    ('[sweep]\ntraces = ["T"]\ncolour = 1\n', "'colour'"),
    ('[sweep]\ntraces = ["T"]\n[grid]\nconflict_mode = ["resource-fit", "nope"]\n', "nope"),
    ('[sweep]\ntraces = ["T"]\n[grid]\nt_job = ["fast"]\n', "t_job"),
    ('[sweep]\ntraces = ["T"]\n[grid]\nschedulers = "b:nosuchkind"\n', "nosuchkind"),
    ('[sweep]\ntraces = ["T"]\nseeds = [1, 1]\n', "seeds"),
    ('[sweep]\ntraces = ["T"]\n[[sweep.synthetic]]\nmachines = 0\n', "machines"),
    ('[sweep]\ntraces = ["T"\n', "not valid TOML"),
])
def test_bad_spec_is_one_line_naming_the_key_exit_65(tmp_path, text, named):
    spec = tmp_path / "bad.toml"
    spec.write_text(text.replace('"T"', f'"{TRACES / "tiny-a.omt.gz"}"'))
    with pytest.raises(SpecError):
        load_spec(spec)
    out = tmp_path / "out"
    status, stdout, err = run_cli(["sweep", str(spec), "--out", str(out)])
    assert status == 65 and stdout == ""
    assert err.count("\n") == 1 and named in err and str(spec) in err
    assert not out.exists()


def test_usage_errors_exit_2(tmp_path):
    assert run_cli(["sweep", str(tmp_path / "missing.toml"), "--out", str(tmp_path)])[0] == 2
    assert run_cli(["sweep", str(SMALL), "--out", str(tmp_path), "--address", "x:1"])[0] == 2
    assert run_cli(["sweep", str(SMALL), "--out", str(tmp_path), "--workers", "0"])[0] == 2


def test_run_ids_are_stable_and_follow_settings_trace_and_seed(tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text(f'[sweep]\ntraces = ["{TRACES / "tiny-a.omt.gz"}"]\nseeds = [0, 1]\n'
                    '[grid]\nt_job = [0.1, 0.2]\ncommit_mode = ["incremental", "all-or-nothing"]\n')
    runs = load_spec(spec).runs
    assert len(runs) == 8 and len({r.id for r in runs}) == 8
    copy = tmp_path / "elsewhere" / "s.toml"
    copy.parent.mkdir()
    copy.write_text(spec.read_text())
    assert [r.id for r in load_spec(copy).runs] == [r.id for r in runs]
    run = runs[0]
    config = run.replay_config()
    assert [s["t_job"] for s in config["schedulers"]] == [0.1, 0.1]
    assert [s["seed"] for s in config["schedulers"]] == [0, 1]


def test_synthetic_trace_and_scheduler_tables(tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text('[[sweep.synthetic]]\nname = "cell"\nmachines = 30\nduration_s = 20\nseed = 3\n'
                    '[grid]\nschedulers = [[{name = "b", kind = "batch", plugins = {}}, '
                    '{name = "s", kind = "service", t_job = 0.5}]]\nt_job = 0.2\n')
    status, report, err = sweep(spec, "--out", tmp_path / "out", "--workers", "1")
    assert status == 0, err
    assert [p.name[:5] for p in (tmp_path / "out" / "traces").iterdir()] == ["cell-"]
    data = json.loads(run_paths(tmp_path / "out", report["runs"][0]["id"])[0].read_text())
    assert [s["t_job"] for s in data["replay_config"]["schedulers"]] == [0.2, 0.5]


def test_ray_engine_without_ray_stops_before_starting(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    status, out, err = run_cli(["sweep", str(SMALL), "--out", str(tmp_path / "out"), "--engine", "ray"])
    assert status == 1 and "pip install 'omega-scheduler[sweep]'" in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_google2011_import_per_cell_model(tmp_path):
    parts = REPO / "tests" / "data" / "traces" / "google-2011"
    spec = tmp_path / "s.toml"
    spec.write_text(f'[[sweep.google2011]]\nname = "g"\n'
                    f'task_events = "{parts / "task_events" / "part-00000-of-00500.csv.gz"}"\n'
                    f'job_events = "{parts / "job_events" / "part-00000-of-00500.csv.gz"}"\n'
                    'cell_model = ["plain", "overcommit"]\nlimit = 20000\n')
    assert [t.name for t in load_spec(spec).traces] == ["g-plain", "g-overcommit"]
    status, report, err = sweep(spec, "--out", tmp_path / "out")
    assert status == 0, err
    assert [r["trace"] for r in report["runs"]] == ["g-plain", "g-overcommit"]
    for run in report["runs"]:
        data = json.loads(run_paths(tmp_path / "out", run["id"])[0].read_text())
        assert data["result"]["events"] > 0
    bad = tmp_path / "bad.toml"
    bad.write_text(spec.read_text().replace('"plain", "overcommit"', '"plain", "roomy"'))
    status, _, err = run_cli(["sweep", str(bad), "--out", str(tmp_path / "out2")])
    assert status == 65 and "roomy" in err
    garbage = tmp_path / "task_events.csv"
    garbage.write_text("not,a,task,event\n")
    bad.write_text(spec.read_text().replace(str(parts / "task_events" / "part-00000-of-00500.csv.gz"), str(garbage)))
    status, _, err = run_cli(["sweep", str(bad), "--out", str(tmp_path / "out3")])
    assert status == 65 and "trace g-plain" in err and err.count("\n") == 1
    assert not list((tmp_path / "out3").rglob("*.omt.gz"))

