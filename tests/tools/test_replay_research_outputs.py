"""Outputs for research (issue 30): per-job records (``--jobs-out``), several seeds with their
mean and 95 % t-interval (``--seeds``), ``omega experiment --seed / --html``, and progress lines
with percent and ETA for a run whose output is not a terminal."""

from __future__ import annotations

import csv
import importlib.util
import io
import json

import pytest

from tools.cli import main as cli_main
from tools.fauxmaster.seeds import interval, t975
from tools.trace.progress import TextProgress

from google_rows import S, import_rows, task_row

M = 1_000_000


def _trace(tmp_path):
    """Two uniform machines; job 1 runs at t = 0 on m5; job 2 (2 tasks) submitted at 10 s, job 3 at
    20 s; job 1 task 0 finishes at 50 s; the last row at 100 s."""
    rows = [task_row(0, 1, 0, "", 0), task_row(0, 1, 0, 5, 1),
            task_row(S + 10 * M, 2, 0, "", 0, priority=9), task_row(S + 10 * M, 2, 1, "", 0, priority=9),
            task_row(S + 11 * M, 2, 0, 5, 1, priority=9), task_row(S + 11 * M, 2, 1, 6, 1, priority=9),
            task_row(S + 20 * M, 3, 0, "", 0), task_row(S + 50 * M, 1, 0, 5, 4),
            task_row(S + 100 * M, 3, 0, 6, 1)]
    return str(import_rows(tmp_path, rows))


def test_jobs_out_csv_has_one_row_per_job(tmp_path, capsys):
    trace = _trace(tmp_path)
    out = tmp_path / "jobs.csv"
    assert cli_main(["replay", trace, "--jobs-out", str(out)]) == 0
    with open(out, newline="") as f:
        rows = {r["job"]: r for r in csv.DictReader(f)}
    assert set(rows) == {"g1", "g2", "g3"}
    g2 = rows["g2"]
    assert (g2["kind"], g2["priority"], g2["owner"], g2["tasks"]) == ("service", "9", "user", "2")
    assert float(g2["submit"]) == 10.0 and float(g2["placed"]) > 10.0
    assert float(g2["wait"]) == pytest.approx(float(g2["placed"]) - 10.0)
    assert g2["scheduler"] == "service" and g2["machines"] in ("1", "2") and g2["initial"] == "False"
    assert rows["g1"]["initial"] == "True" and rows["g1"]["scheduler"] == "" and rows["g1"]["end"] == "50.0"
    assert rows["g3"]["scheduler"] == "batch" and rows["g3"]["first_attempt"] != ""
    for row in rows.values():  # times to the microsecond: no float noise such as 1.2249999999999999
        for key in ("submit", "first_attempt", "placed", "end", "wait"):
            assert row[key] == "" or len(row[key].partition(".")[2]) <= 6, (key, row[key])


def test_jobs_out_refuses_an_unknown_suffix_before_replaying(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        cli_main(["replay", _trace(tmp_path), "--jobs-out", str(tmp_path / "jobs.xlsx")])
    assert exc.value.code == 2
    assert "expected a .csv or .parquet file name" in capsys.readouterr().err
    assert not (tmp_path / "jobs.xlsx").exists()


@pytest.mark.skipif(importlib.util.find_spec("pyarrow") is not None, reason="pyarrow is installed")
def test_parquet_without_pyarrow_is_a_clear_error(tmp_path, capsys):
    assert cli_main(["replay", _trace(tmp_path), "--jobs-out", str(tmp_path / "jobs.parquet")]) == 1
    err = capsys.readouterr().err
    assert "needs pyarrow, which is not installed" in err and "omega-scheduler[parquet]" in err


@pytest.mark.skipif(importlib.util.find_spec("pyarrow") is None, reason="pyarrow is not installed")
def test_parquet_has_the_csv_rows(tmp_path):
    import pyarrow.parquet as pq

    out = tmp_path / "jobs.parquet"
    assert cli_main(["replay", _trace(tmp_path), "--jobs-out", str(out)]) == 0
    assert sorted(pq.read_table(out).column("job").to_pylist()) == ["g1", "g2", "g3"]


def test_t_interval_by_hand():
    assert t975(1) == 12.706 and t975(30) == 2.042 and t975(1000) == 1.960
    s = interval([1.0, 2.0, 3.0])  # mean 2, sd 1, half = 4.303 / sqrt(3)
    assert s["mean"] == 2.0 and s["high"] - 2.0 == pytest.approx(4.303 / 3 ** 0.5)
    assert interval([5.0]) == {"n": 1, "mean": 5.0, "low": None, "high": None}


def test_seeds_run_each_and_summarize(tmp_path, capsys):
    trace = _trace(tmp_path)
    out, jobs = tmp_path / "s.json", tmp_path / "jobs.csv"
    assert cli_main(["replay", trace, "--seeds", "3", "--seed", "5", "--json-out", str(out),
                     "--jobs-out", str(jobs)]) == 0
    printed = capsys.readouterr().out
    assert "over 3 seeds (5, 7, 9): mean [95 % t-interval]" in printed
    data = json.loads(out.read_text())
    assert data["seeds"] == [5, 7, 9] and len(data["runs"]) == 3
    assert [[s["seed"] for s in r["config"]["schedulers"]] for r in data["runs"]] == [[5, 6], [7, 8], [9, 10]]
    w = data["summary"]["wait_to_placed_mean_s"]
    assert w["n"] == 3 and w["low"] <= w["mean"] <= w["high"]
    assert "delay_p50_ratio" in data["summary"]
    with open(jobs, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["seed"] for r in rows].count("7") == 3 and len(rows) == 9
    with pytest.raises(SystemExit) as exc:
        cli_main(["replay", trace, "--seeds", "0"])
    assert exc.value.code == 2 and "--seeds: expected a number of runs >= 1, got 0" in capsys.readouterr().err


def test_text_progress_has_percent_and_eta():
    now = [0.0]
    stream = io.StringIO()
    p = TextProgress("replay", "virtual s", stream=stream, every=10.0, clock=lambda: now[0])
    p(100.0, 1000.0)  # within the first 10 s: nothing
    now[0] = 20.0
    p(250.0, 1000.0)  # a quarter in 20 s: 60 s left
    now[0] = 25.0
    p(300.0, 1000.0)  # 5 s after the last line: nothing
    now[0] = 40.0
    p(400.0, None)
    assert stream.getvalue().splitlines() == ["replay: 25.0 % (250 of 1,000 virtual s), ETA 1m00s",
                                              "replay: 400 virtual s (0m40s elapsed)"]


def test_experiment_seed_and_html(tmp_path, capsys):
    out = tmp_path / "html"
    assert cli_main(["experiment", "conflict-modes", "--quick", "--seed", "3", "--html", str(out),
                     "--json-out", str(tmp_path / "e.json")]) == 0
    page = (out / "index.html").read_text()
    assert "conflict-modes" in page and "<table>" in page and "seeds + 3" in page
    assert json.loads((out / "reports.json").read_text())[0]["name"] == "conflict-modes"


def test_seeds_html_puts_the_runs_side_by_side(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "html"
    assert cli_main(["replay", _trace(tmp_path), "--seeds", "2", "--html", str(out)]) == 0
    page = (out / "index.html").read_text()
    assert "seed 0" in page and "seed 2" in page
    # the mean and 95 % interval open the page, as printed
    assert page.index("over 2 seeds (0, 2): mean [95 % t-interval]") < page.index("Settings that differ")
    assert "wait_to_placed_mean_s: " in page
    assert json.loads((out / "result-seed2.json").read_text())["config"]["schedulers"][0]["seed"] == 2


def test_experiment_runs_get_a_progress_callback_each(tmp_path):
    from tools.fauxmaster.experiments.catalogue import EXPERIMENTS, QUICK
    from tools.fauxmaster.experiments.runs import Bench

    labels, calls = [], []

    def progress_for(label):
        labels.append(label)
        return lambda now, until: calls.append(now)

    EXPERIMENTS["conflict-modes"](Bench(QUICK, workdir=str(tmp_path), progress_for=progress_for))
    assert labels == ["run 1 (shared-state)", "run 2 (shared-state)"]


def test_a_sweep_can_vary_the_submit_latency(tmp_path):
    from pathlib import Path

    from tools.sweep.spec import load_spec

    traces = Path(__file__).resolve().parents[1] / "data" / "traces" / "sweep"
    spec = tmp_path / "s.toml"
    spec.write_text(f'[sweep]\nname = "lat"\ntraces = ["{traces / "tiny-a.omt.gz"}"]\nseeds = [0]\n'
                    '[grid]\nsubmit_latency_s = [0.0, 0.62]\n')
    assert [run.replay_config()["submit_latency_s"] for run in load_spec(spec).runs] == [0.0, 0.62]


@pytest.mark.parametrize("argv, message", [
    (["tjob-sweep", "--quick", "--batch-tjob", "0.1,1"], "--batch-tjob: for experiment omega-sweep only"),
    (["all", "--quick", "--until", "30"], "--until: for experiment omega-sweep only"),
    (["conflict-modes", "--quick", "--seeds", "3"], "--seeds: for experiment gpu-frag or compaction only"),
    (["compaction", "t.omt", "--service-tjob", "1"], "--service-tjob: not for experiment compaction"),
    (["omega-sweep", "t.omt", "--until", "inf"], "--until must be a finite number > 0"),
    (["conflict-modes", "--quick", "--json-out", "/"], "--json-out /: is a directory"),
    (["all", "--quick", "--html", __file__], f"--html {__file__}: exists and is not a directory"),
], ids=["tjob-points", "until", "seeds", "compaction", "until-inf", "json-dir", "html-file"])
def test_experiment_refuses_a_flag_it_would_ignore(argv, message, capsys):
    """A sweep-point flag of another experiment is a usage error, not silently dropped; so is an
    output path that cannot be written, before any run (nothing printed)."""
    with pytest.raises(SystemExit) as exc:
        cli_main(["experiment", *argv])
    assert exc.value.code == 2
    captured = capsys.readouterr()
    assert message in captured.err and len(captured.err.strip().splitlines()) == 1, captured.err
    assert captured.out == ""


def test_slowdown_leaves_out_the_jobs_the_recorded_state_placed(tmp_path, capsys):
    """g1 runs from t = 0 on its recorded machine: no scheduler placed it, so it is neither a
    bounded-slowdown value nor "never" fully placed, but counted apart (as the wait CDF does)."""
    out = tmp_path / "r.json"
    assert cli_main(["replay", _trace(tmp_path), "--json-out", str(out)]) == 0
    text = capsys.readouterr().out
    sd = json.loads(out.read_text())["slowdown"]
    assert sd["never"] == 0 and sd["recorded_at_t0"] == 1, sd
    assert "(0 never; 1 placed whole by the recorded t = 0 state left out)" in text


def test_a_figure_the_same_in_every_run_says_so():
    from tools.fauxmaster.seeds import lines, summarize
    text = "\n".join(lines([0, 2], summarize([{"a": 1.0, "b": 1.0}, {"a": 1.0, "b": 3.0}])))
    assert "a: 1 [1, 1] (n=2; the same in every run)" in text
    assert "b: 2 [-10.71, 14.71] (n=2)" in text and "changes nothing" not in text
    text = "\n".join(lines([0, 2], summarize([{"a": 1.0}, {"a": 1.0}])))
    assert text.endswith("every figure is the same in every run: the seed changes nothing in this replay")


def test_json_out_is_written_whole_or_not_at_all(tmp_path, monkeypatch, capsys):
    """A write that fails midway (a full disk) leaves the previous file as it was, no temporary
    file beside it; a device such as /dev/null is written in place, never replaced."""
    from pathlib import Path

    from tools.fauxmaster.report import result as result_module

    out = tmp_path / "r.json"
    out.write_text("previous\n")
    real = Path.write_text

    def half(self, text, *args, **kwargs):
        real(self, text[:10], *args, **kwargs)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", half)
    assert cli_main(["replay", _trace(tmp_path), "--seeds", "2", "--json-out", str(out)]) == 1
    assert "--json-out" in capsys.readouterr().err
    assert out.read_text() == "previous\n" and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    monkeypatch.setattr(Path, "write_text", real)
    assert result_module.write_whole("/dev/null", "x").is_char_device()


def test_a_replay_stopped_before_the_first_submission_says_where_it_is(tmp_path, capsys):
    """A cleaned log may open with days of nothing (KTH SP2: 599,850 s): an empty replay says why."""
    from cellstate.model import Job, JobKind
    from cellstate.resources import Resources
    from fauxmaster_traces import machine, write

    from tools.trace.events import JobSubmit, MachineAdd

    path = write(tmp_path / "late.omt", [MachineAdd(0.0, machine(0)),
                                         JobSubmit(500.0, Job("j", JobKind.BATCH, 1, Resources(100, 64)))])
    assert cli_main(["replay", str(path), "--until", "100"]) == 0
    assert ("NOTE: no job submitted by the stop at 100 virtual s: the trace's first submission is at 500 s"
            in capsys.readouterr().out)
    assert cli_main(["replay", str(path), "--until", "600"]) == 0
    out = capsys.readouterr().out
    assert "NOTE" not in out
    assert "(p90 0.00 s, p99 0.00 s); to placed mean 0.11 s (p90 0.11 s, p99 0.11 s)" in out  # units on all
