"""Issue 20.6 (c): a cut or corrupt gzip input to ``omega import`` is a one-line error naming the file,
with nothing written (it was a traceback)."""

from __future__ import annotations

import gzip

import pytest

from tools.cli import main

S = 600_000_000  # the Google window opens at 600 s


def _google_rows(n: int) -> bytes:
    return "".join(f"{S + i * 1_000_000},,{i},0,,0,u,0,0,0.25,0.125,0,0\n" for i in range(n)).encode()


def _cut(data: bytes) -> bytes:
    z = gzip.compress(data)
    return z[:len(z) // 2]


def _run(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 65  # an invalid input file (docs/CLI.md)
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


@pytest.mark.parametrize("cut", ["task_events", "job_events"])
def test_a_cut_google_part_is_one_line(tmp_path, capsys, cut):
    task_events, job_events, out = tmp_path / "te.csv.gz", tmp_path / "je.csv.gz", tmp_path / "g.omt"
    rows = _google_rows(3000)
    task_events.write_bytes(_cut(rows) if cut == "task_events" else gzip.compress(rows))
    job_events.write_bytes(_cut(b"0,,1,0,u,0,j,x\n" * 3000) if cut == "job_events" else gzip.compress(b""))
    err = _run(["import", "google2011", "--task-events", str(task_events), "--job-events", str(job_events),
                "--out", str(out)], capsys)
    named = task_events if cut == "task_events" else job_events
    assert err.startswith(f"omega: error: {named}: cut or corrupt after ") and "rows (" in err, err
    assert not out.exists()


def test_a_google_part_that_is_not_gzip_is_one_line(tmp_path, capsys):
    task_events, job_events, out = tmp_path / "te.csv.gz", tmp_path / "je.csv.gz", tmp_path / "g.omt"
    task_events.write_bytes(_google_rows(3))  # plain CSV under a .gz name
    job_events.write_bytes(gzip.compress(b""))
    err = _run(["import", "google2011", "--task-events", str(task_events), "--job-events", str(job_events),
                "--out", str(out)], capsys)
    assert err.startswith(f"omega: error: {task_events}: cut or corrupt after 0 rows (Not a gzipped file"), err
    assert not out.exists()


def test_a_cut_swf_log_is_one_line(tmp_path, capsys):
    lines = "; MaxNodes: 4\n" + "".join(f"{i} {i * 10} 0 5 1 -1 -1 1 10 -1 1 1 1 -1 1 -1 -1 -1\n"
                                         for i in range(1, 5000))
    log, out = tmp_path / "log.swf.gz", tmp_path / "s.omt"
    log.write_bytes(_cut(lines.encode()))
    err = _run(["import", "swf", str(log), "--out", str(out)], capsys)
    assert err.startswith(f"omega: error: {log}: cut or corrupt after ") and f"nothing written to {out}" in err, err
    assert "--skip-bad" not in err  # not a bad line to skip
    assert not out.exists()
