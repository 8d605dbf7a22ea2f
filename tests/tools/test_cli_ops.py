"""Operator habits (docs/CLI.md): safe job ids, usage statuses, flag spellings and aliases; on
the session etcd, in process."""

from __future__ import annotations

import json

import pytest

from cellstate.codec.records import encode_job_record
from cellstate.model import Job, JobKind, JobRecord
from cellstate.resources import Resources
from cli_helpers import exit_status
from tools.cli import build_parser, main

GOOD = 'id = "ok-1"\nkind = "batch"\ntasks = 1\ncpu = 0.5\nmemory = 64\n'


@pytest.fixture
def cell_args(etcd_server, cell_keys):
    args = ["--endpoints", ",".join(etcd_server.endpoints), "--cell", cell_keys.cell]
    assert exit_status(["cell", "init", "--machines", "2", *args]) == 0
    return args


def _jobs(store, keys) -> int:
    return len(store.range(keys.kind_prefix("jobs")).kvs)


@pytest.mark.parametrize("job_id, message", [
    ("a\\nweb  service  1", "found '\\n'"),
    ("a\\u001b[2J", "found '\\x1b'"),
    ("x" * 2_000_000, "at most 253 characters (it has 2000000)"),
], ids=["newline", "escape", "two-million-characters"])
def test_submit_refuses_unsafe_ids_with_65_and_writes_nothing(tmp_path, cell_args, etcd_store, cell_keys, capsys,
                                                              job_id, message):
    path = tmp_path / "jobs.toml"
    path.write_text(f'[[job]]\n{GOOD}\n[[job]]\n' + GOOD.replace('"ok-1"', f'"{job_id}"'))
    assert exit_status(["job", "submit", str(path), *cell_args]) == 65
    err = capsys.readouterr().err
    assert message in err and "nothing submitted" in err and len(err.splitlines()) == 1 and len(err) < 400
    assert _jobs(etcd_store, cell_keys) == 0


def test_job_list_escapes_an_unsafe_id_stored_before(cell_args, etcd_store, cell_keys, capsys):
    forged = "evil\nweb      service  1  \x1b[2J"
    record = JobRecord.new(Job(forged, JobKind.BATCH, 1, Resources(100, 64, 0)), 1.0)
    etcd_store.put(cell_keys.job(forged), encode_job_record(record))
    assert exit_status(["job", "list", *cell_args]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and len(out.splitlines()) == 3  # header, the one job, the total
    assert "evil\\nweb" in out
    assert exit_status(["job", "list", "-o", "json", *cell_args]) == 0
    assert json.loads(capsys.readouterr().out)["jobs"][0]["id"] == forged


def test_job_submit_and_kill_beside_the_top_level_spellings(tmp_path, cell_args, etcd_store, cell_keys, capsys):
    path = tmp_path / "jobs.toml"
    path.write_text(GOOD)
    assert exit_status(["job", "submit", str(path), *cell_args]) == 0
    assert exit_status(["job", "kill", "ok-1", *cell_args]) == 0
    assert "killed job 'ok-1'" in capsys.readouterr().out
    path.write_text(GOOD.replace("ok-1", "ok-2"))
    assert exit_status(["submit", str(path), *cell_args]) == 0
    assert exit_status(["kill", "ok-2", *cell_args]) == 0


@pytest.mark.parametrize("argv", [["check", "--revision", "-5"], ["check", "--revision", "0"],
                                  ["kill", "x" * 2_000_000], ["job", "status", "x" * 300],
                                  ["explain", "x" * 300], ["generate", "--prefix", "a\nb", "--out", "/dev/null"]],
                         ids=["check-negative-revision", "check-zero-revision", "kill-huge-id", "status-long-id",
                              "explain-long-id", "generate-unsafe-prefix"])
def test_bad_arguments_are_usage_errors(cell_args, argv, capsys):
    assert exit_status([*argv, *cell_args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("omega: error: ") and len(err.splitlines()) == 1 and len(err) < 300


def test_one_spelling_per_flag_with_hidden_old_ones(capsys):
    parser = build_parser()
    agents = parser.parse_args(["agents", "run", "--duration", "3"])
    old = parser.parse_args(["agents", "run", "--run-for", "4"])
    assert (agents.duration, old.duration) == (3.0, 4.0)
    with pytest.raises(SystemExit):
        parser.parse_args(["agents", "run", "--help"])
    run_help = capsys.readouterr().out
    assert "--duration" in run_help and "--run-for" not in run_help


@pytest.mark.skipif(not __import__("os").path.exists("/dev/full"), reason="needs /dev/full")
def test_replay_json_out_that_cannot_be_written_is_one_line(tmp_path, capsys):
    log, trace = tmp_path / "small.swf", tmp_path / "small.omt.gz"
    log.write_text("; MaxNodes: 4\n" + "".join(f"{i} {i * 10} 0 5 1 -1 -1 1 10 -1 1 1 1 -1 1 -1 -1 -1\n"
                                                  for i in range(1, 20)))
    assert main(["import", "swf", str(log), "--out", str(trace)]) == 0
    capsys.readouterr()
    assert exit_status(["replay", str(trace), "--json-out", "/dev/full"]) == 1
    captured = capsys.readouterr()
    assert captured.err == "omega: replay: --json-out /dev/full: cannot write it: No space left on device\n"
    assert "small.omt.gz" in captured.out  # the replay ran and its summary was printed first
