"""``omega report``: replay results side by side (a table; ``--html``: one page with the report's plots
overlaid per run), and a one-line error, with nothing written, for a file that is not a replay result."""

from __future__ import annotations

import json
import sys

import pytest
from fauxmaster_traces import mixed_trace

from tools.cli import main
from tools.cli.report import labels_of
from tools.fauxmaster.report.plots import PLOTS
from tools.fauxmaster.report.result import Run, load_result


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Two replays of one trace, with different schedulers: a --json file and an --html directory."""
    tmp = tmp_path_factory.mktemp("results")
    trace = mixed_trace(tmp / "mixed.omt")
    one, two = tmp / "one.json", tmp / "two"
    assert main(["replay", trace, "--schedulers", "b1:batch,b2:batch:sequence,s:service", "--until", "20",
                 "--sample-every", "1", "--json", str(one)]) == 0
    assert main(["replay", trace, "--until", "20", "--sample-every", "1", "--json", str(tmp / "two.json")]) == 0
    two.mkdir()
    (two / "result.json").write_text((tmp / "two.json").read_text())
    return one, two


def test_report_prints_the_runs_side_by_side(results, capsys):
    one, two = results
    capsys.readouterr()
    assert main(["report", str(one), str(two)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "settings that differ:"  # first, each once: the schedulers, not the shared trace
    assert "  scheduler b2 conflict_mode: one: sequence; two: n/a" in out
    assert not any(line.startswith("  trace:") for line in out)
    out = out[next(i for i, line in enumerate(out) if line.startswith("trace ")) - 1:]  # the labels' row
    assert out[0].split() == ["one", "two"]  # a file's stem, a directory's name
    assert out[6].split() == ["jobs", "submitted", "14", "14"]
    assert any(line.split() == ["never", "fully", "placed", "0", "of", "14", "0", "of", "14"] for line in out)
    assert any(line.startswith("one b2 (batch, sequence, incremental): busyness") for line in out)
    assert any(line.startswith("two service (service,") for line in out)


def test_report_html_overlays_every_run_in_one_page(results, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    one, two = results
    out = tmp_path / "cmp"
    assert main(["report", str(one), str(two), "--label", "three schedulers", "--label", "default",
                 "--html", str(out)]) == 0
    assert f"report: {out / 'index.html'}" in capsys.readouterr().out
    page = (out / "index.html").read_text()
    assert "<h1>Replays compared: three schedulers, default</h1>" in page
    assert "<th>three schedulers</th><th>default</th>" in page  # the figures' and the losses' columns
    # the page opens with the settings that differ; the shared ones are stated once, below the figures
    assert page.index("<h2>Settings that differ</h2>") < page.index("jobs submitted")
    assert '<td style="text-align:left">scheduler b2 conflict_mode</td>' in page
    assert page.count("Shared by every run: trace: ") == 1
    assert "<td>three schedulers</td><td>b2</td>" in page and "<td>default</td><td>service</td>" in page
    for name in PLOTS:
        assert f'<img src="{name}"' in page and (out / name).read_bytes()[:4] == b"\x89PNG"


def test_every_plot_overlays_the_runs_with_their_labels(results):
    mpl = pytest.importorskip("matplotlib")
    mpl.use("Agg")
    import matplotlib.pyplot as plt

    from tools.fauxmaster.report import plots

    runs = [Run("A", load_result(results[0])), Run("B", load_result(results[1]))]
    for draw, expected in ((plots.draw_utilization, ["A: cpu", "A: memory", "B: cpu", "B: memory"]),
                           (plots.draw_conflicts, ["A: b1 (0.0000 overall)", "A: b2", "A: s (0.0000 overall)",
                                                   "B: batch (0.0000 overall)", "B: service (0.0000 overall)"]),
                           (plots.draw_wait_cdf, ["A: to first attempt: 14 jobs, 0 never",
                                                  "A: to fully placed: 14 jobs, 0 never",
                                                  "B: to first attempt: 14 jobs, 0 never",
                                                  "B: to fully placed: 14 jobs, 0 never"])):
        fig = plt.figure()
        draw(fig, runs)
        legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
        assert [text[:len(e)] for text, e in zip(legend, expected)] == expected, draw.__name__
        assert fig.axes[-1].get_xlabel() in ("virtual time (s)", "job wait time (s)")  # a 20 s run: seconds
        plt.close(fig)
    fig = plt.figure()
    plots.draw_busyness(fig, runs)
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["A", "B"]
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["b1", "b2", "s", "batch", "service"]
    plt.close(fig)


def _bad_files(tmp_path, good: dict) -> dict:
    """name -> (path, what the error says)."""
    cases = {}

    def put(name, text, says):
        path = tmp_path / name
        path.write_text(text) if isinstance(text, str) else path.write_bytes(text)
        cases[name] = (path, says)

    put("garbage.json", "{not json", "not a replay result (not JSON: ")
    put("list.json", "[1, 2]", "not a replay result (not a JSON object; write one with omega replay --json)")
    put("other.json", json.dumps({"trace": "x"}), "not a replay result (the result has no 'sim_time_s', 'events', "
                                                  "'jobs_submitted' and 5 more; write one with omega replay --json)")
    put("trace.omt", b"\x93\xa5omega\xff\xfe", "not a replay result (not text")
    bad_sample = dict(good, utilization=[dict(good["utilization"][0], cpu="high")])
    put("bad-sample.json", json.dumps(bad_sample), "not a replay result (utilization sample 0's 'cpu' is not a number")
    bad_cdf = json.loads(json.dumps(good))
    bad_cdf["wait_cdf"]["to_placed"]["fractions"].pop()
    put("bad-cdf.json", json.dumps(bad_cdf), "wait_cdf.to_placed's waits_s and fractions differ in length")
    bad_counts = json.loads(json.dumps(good))
    bad_counts["conflicts_over_time"]["schedulers"]["b1"]["conflicts"].append(1)
    put("bad-counts.json", json.dumps(bad_counts), "conflicts_over_time of 'b1'.conflicts has not one count per")
    cases["missing.json"] = (tmp_path / "missing.json", "No such file or directory")
    return cases


@pytest.mark.parametrize("name", ["garbage.json", "list.json", "other.json", "trace.omt", "bad-sample.json",
                                  "bad-cdf.json", "bad-counts.json", "missing.json"])
def test_a_file_that_is_not_a_replay_result_is_one_line_and_nothing_is_written(results, tmp_path, capsys, name):
    good = json.loads(results[0].read_text())
    path, says = _bad_files(tmp_path, good)[name]
    out = tmp_path / "cmp"
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(["report", str(results[0]), str(path), "--html", str(out)])
    assert exc.value.code == (2 if name == "missing.json" else 65)  # a bad argument; an invalid input file
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip()
    assert "\n" not in err and err.startswith(f"omega: error: {path}: ") and says in err, err
    assert not out.exists()


def test_an_older_result_without_the_new_figures_is_reported_with_them_missing(results, capsys):
    old = json.loads(results[0].read_text())
    for key in ("wait_cdf", "conflicts_over_time", "losses", "utilization_interval_s"):
        del old[key]
    run = Run("old", old)
    load = results[0].parent / "old.json"
    load.write_text(json.dumps(old))
    capsys.readouterr()
    assert main(["report", str(load), str(results[1])]) == 0
    never = [line for line in capsys.readouterr().out.splitlines() if line.startswith("never fully placed")]
    assert never[0].split()[-4:] == ["n/a", "0", "of", "14"]
    mpl = pytest.importorskip("matplotlib")
    mpl.use("Agg")
    import matplotlib.pyplot as plt

    from tools.fauxmaster.report import plots

    fig = plt.figure()
    plots.draw_wait_cdf(fig, [run])
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == [
        "no wait CDF in this result (an older replay)"]
    plt.close(fig)


def test_labels(tmp_path, results, capsys):
    one, two = results
    assert labels_of([str(one), str(two), str(two / "result.json")]) == [str(one), str(two), str(two / "result.json")]
    assert labels_of([str(one), str(two / "result.json")]) == ["one", "two"]
    with pytest.raises(SystemExit) as exc:
        main(["report", str(one), str(two), "--label", "a"])
    assert exc.value.code == 2
    assert "--label given 1 times for 2 results" in capsys.readouterr().err


def test_without_matplotlib_html_fails_before_any_work(results, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    out = tmp_path / "cmp"
    assert main(["report", str(results[0]), "--html", str(out)]) == 1  # a runtime failure, said before any work
    assert "report --html needs matplotlib" in capsys.readouterr().err and not out.exists()
    # replay says so before replaying: no --json-out written either
    trace, js = mixed_trace(tmp_path / "t.omt"), tmp_path / "r.json"
    assert main(["replay", trace, "--json-out", str(js), "--html", str(out)]) == 1
    assert "replay --html needs matplotlib" in capsys.readouterr().err
    assert not js.exists() and not out.exists()


def test_report_of_results_with_ground_truth_has_the_fidelity_section_per_run(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from test_fidelity import google_excerpt

    trace = google_excerpt(tmp_path)
    for name, state in (("recorded", "recorded"), ("scheduled", "scheduled")):
        assert main(["replay", str(trace), "--initial-state", state, "--json", str(tmp_path / f"{name}.json")]) == 0
    out = tmp_path / "cmp"
    capsys.readouterr()
    assert main(["report", str(tmp_path / "recorded.json"), str(tmp_path / "scheduled.json"), "--html", str(out)]) == 0
    printed = capsys.readouterr().out
    ratios = [line.split() for line in printed.splitlines() if line.startswith("fidelity initial_pending_fraction")]
    assert ratios == [["fidelity", "initial_pending_fraction", "0.000", "1.000"]]
    page = (out / "index.html").read_text()
    assert "<h2>Fidelity</h2><h3>recorded</h3>" in page and "<h3>scheduled</h3>" in page
    for name in ("fidelity_delay_cdf.png", "fidelity_occupancy.png"):
        assert f'<img src="{name}"' in page and (out / name).read_bytes()[:4] == b"\x89PNG"


def test_report_prints_the_same_figures_as_json_with_o_json(results, capsys):
    capsys.readouterr()
    assert main(["report", str(results[0]), str(results[1]), "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [run["label"] for run in doc["runs"]] == ["one", "two"]
    assert all(run["figures"] and run["schedulers"] for run in doc["runs"])


def test_a_seeds_output_is_reported_one_column_per_seed(tmp_path, capsys):
    """``omega replay --seeds`` writes {seeds, summary, runs} (--json-out) and result-seedN.json files
    (--html): both are reported, each seed a column; a run that is not a result names its seed."""
    trace = mixed_trace(tmp_path / "mixed.omt")
    out = tmp_path / "s.json"
    assert main(["replay", trace, "--until", "20", "--seeds", "2", "--json-out", str(out)]) == 0
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0] == "settings that differ:" and "  scheduler batch seed: s seed 0: 0; s seed 2: 2" in text
    html = tmp_path / "html"
    html.mkdir()
    data = json.loads(out.read_text())
    for seed, run in zip(data["seeds"], data["runs"]):
        (html / f"result-seed{seed}.json").write_text(json.dumps(run))
    assert main(["report", str(html)]) == 0
    assert "html seed 0" in capsys.readouterr().out
    data["runs"][1] = {"trace": "x"}
    out.write_text(json.dumps(data))
    with pytest.raises(SystemExit) as exc:
        main(["report", str(out)])
    assert exc.value.code == 65 and "the run of seed 2 is not a replay result" in capsys.readouterr().err
