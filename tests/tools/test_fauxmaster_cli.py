"""``omega replay``: flags, scheduler specs, JSON and HTML output."""

from __future__ import annotations

import json

import pytest

from tools.cli import main
from tools.fauxmaster.scheduler_mix import parse_schedulers

from fauxmaster_traces import mixed_trace


@pytest.mark.parametrize("spec, expected", [
    ("a:batch", [dict(name="a", kind="batch", seed=5)]),
    ("a:batch:sequence:all-or-nothing,s:service",
     [dict(name="a", kind="batch", conflict_mode="sequence", commit_mode="all-or-nothing", seed=5),
      dict(name="s", kind="service", seed=6)]),
    ('[{"name": "x", "kind": "batch", "seed": 1}]', [dict(name="x", kind="batch", seed=1, t_job=2.0)]),
], ids=["short", "modes-and-two", "json"])
def test_parse_schedulers(spec, expected):
    got = parse_schedulers(spec, seed=5, t_job=2.0 if spec.startswith("[") else None)
    assert got == expected


@pytest.mark.parametrize("spec", ["a", "a:batch:x:y:z", "a::sequence"], ids=["no-kind", "too-many", "empty-part"])
def test_bad_scheduler_items_are_refused(spec):
    with pytest.raises(ValueError, match="NAME:KIND"):
        parse_schedulers(spec)


def test_replay_command_writes_json_and_html(tmp_path, capsys):
    trace = mixed_trace(tmp_path / "mixed.omt")
    out, report = tmp_path / "r.json", tmp_path / "report"
    code = main(["replay", trace, "--schedulers", "b1:batch,b2:batch:sequence,s:service", "--until", "20",
                 "--sample-every", "1", "--json", str(out), "--html", str(report)])
    assert code == 0
    text = capsys.readouterr().out
    assert "invariants: ok" in text and "b2 (batch): busyness" in text
    data = json.loads(out.read_text())
    assert [s["name"] for s in data["schedulers"]] == ["b1", "b2", "s"] and data["sim_time_s"] == 20.0
    assert {p.name for p in report.iterdir()} >= {"index.html", "result.json", "utilization.png", "wait_cdf.png",
                                                  "busyness.png"}
    assert (report / "utilization.png").read_bytes()[:4] == b"\x89PNG"


def test_replay_command_reports_a_bad_spec_as_usage_error(tmp_path, capsys):
    trace = mixed_trace(tmp_path / "mixed.omt")
    with pytest.raises(SystemExit) as exc:
        main(["replay", trace, "--schedulers", "a:weird"])
    assert exc.value.code == 2
    assert "unknown kind 'weird'" in capsys.readouterr().err


@pytest.mark.parametrize("mode, line", [
    ("recorded", "recorded t = 0 state: 6 tasks on their recorded machines, 4 left pending"),
    ("scheduled", None),
], ids=["recorded", "scheduled"])
def test_replay_command_initial_state(tmp_path, capsys, mode, line):
    from test_fauxmaster_initial_state import recorded_trace

    trace = recorded_trace(tmp_path / "r.omt")
    assert main(["replay", trace, "--schedulers", "b:batch", "--until", "4", "--initial-state", mode]) == 0
    text = capsys.readouterr().out
    assert (line in text) if line else "recorded t = 0 state" not in text


def test_replay_into_an_unreachable_etcd_is_a_clean_error(tmp_path, capsys, monkeypatch):
    """--endpoints defaults to $OMEGA_ENDPOINTS, as for every command; a store error is one line."""
    monkeypatch.setenv("OMEGA_ENDPOINTS", "127.0.0.1:1")
    assert main(["replay", mixed_trace(tmp_path / "t.omt"), "--store", "etcd", "--cell", "x"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("omega: replay: cannot reach etcd at 127.0.0.1:1 (connection refused): start one")
    assert err.count("\n") == 1 and "Traceback" not in err


def test_replay_max_txn_ops_flag(tmp_path, capsys):
    trace = mixed_trace(tmp_path / "t.omt")
    with pytest.raises(SystemExit) as info:
        main(["replay", trace, "--max-txn-ops", "3"])
    assert info.value.code == 2 and "max_txn_ops must be an int >= 4" in capsys.readouterr().err
    assert main(["replay", trace, "--max-txn-ops", "512", "--json", str(tmp_path / "r.json")]) == 0
    assert json.loads((tmp_path / "r.json").read_text())["config"]["max_txn_ops"] == 512


def test_replay_help_names_the_unit_of_each_time_flag(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["replay", "--help"])
    assert exc.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for flag in ("--until S", "--t-job S", "--t-task S", "--sample-every S", "--submit-latency S"):
        assert flag in text, flag
    assert "stop at this virtual time, s (default: the trace's end)" in text
