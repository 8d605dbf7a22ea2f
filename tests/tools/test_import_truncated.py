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


def _trace(tmp_path) -> bytes:
    """A small complete .omt.gz, imported from an SWF log."""
    log, out = tmp_path / "small.swf", tmp_path / "small.omt.gz"
    log.write_text("; MaxNodes: 4\n" + "".join(f"{i} {i * 10} 0 5 1 -1 -1 1 10 -1 1 1 1 -1 1 -1 -1 -1\n"
                                                  for i in range(1, 3000)))
    assert main(["import", "swf", str(log), "--out", str(out)]) == 0
    return out.read_bytes()


@pytest.mark.parametrize("argv", [["trace", "info"], ["replay"], ["experiment", "architectures", "--trace"]],
                         ids=["trace-info", "replay", "experiment"])
def test_a_cut_trace_is_always_65_naming_the_file(tmp_path, capsys, argv):
    whole = _trace(tmp_path)
    capsys.readouterr()
    for n in (1, 2, 5, 12, 30, len(whole) // 2, len(whole) - 4):
        cut = tmp_path / f"cut{n}.omt.gz"
        cut.write_bytes(whole[:n])
        err = _run([*argv, str(cut)], capsys)
        assert err.startswith(f"omega: error: trace cut{n}.omt.gz: ") and "-1" not in err, err


@pytest.mark.parametrize("name, writer, hint", [
    ("kth.swf.gz", lambda text: gzip.compress(text.encode()), "this is a raw SWF log"),
    ("kth.swf", str.encode, "this is a raw SWF log"),
    ("part-00000-of-00500.csv.gz", None, "this is a raw Google cluster-data CSV part"),
], ids=["swf-gz", "swf-plain", "google-part"])
@pytest.mark.parametrize("argv", [["replay"], ["trace", "info"]], ids=["replay", "trace-info"])
def test_a_raw_log_given_for_a_trace_says_import_it_first(tmp_path, capsys, name, writer, hint, argv):
    path = tmp_path / name
    if writer is None:
        path.write_bytes(gzip.compress(_google_rows(50)))
    else:
        path.write_bytes(writer("; Version: 2.2\n; MaxNodes: 4\n" + "1 10 0 5 1 -1 -1 1 10 -1 1 1 1 -1 1 -1 -1 -1\n" * 5))
    err = _run([*argv, str(path)], capsys)
    command = "omega import swf" if "SWF" in hint else "omega import google2011"
    assert hint in err and f"import it first with `{command} " in err, err
    if "SWF" in hint:
        assert f"`omega import swf {path} --out kth.omt.gz`" in err
