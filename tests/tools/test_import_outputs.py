"""Where ``omega import`` writes: a device is written in place, never renamed over (as root,
``--out /dev/full`` replaced the device with a file); a directory is refused at once; a failed
write is exit 1 naming ``--out``; ``--limit`` below 1 is a usage error; ``trace info`` names the
first submission."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tools.cli import main as cli_main

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
TE = str(DATA / "google-2011" / "task_events" / "part-00000-of-00500.csv.gz")
JE = str(DATA / "google-2011" / "job_events" / "part-00000-of-00500.csv.gz")
SWF = str(DATA / "swf" / "KTH-SP2-1996-2.1-cln.swf.gz")


@pytest.fixture
def no_rename_over_devices(monkeypatch):
    """os.replace onto anything but a regular file fails the test instead of replacing it."""
    import tools.trace.format as fmt

    real = os.replace

    def guarded(src, dst, *args, **kwargs):
        assert not os.path.exists(dst) or os.path.isfile(dst), f"renamed over {dst}"
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(fmt.os, "replace", guarded)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
@pytest.mark.parametrize("argv", [["google2011", "--task-events", TE, "--job-events", JE, "--limit", "2000"],
                                  ["swf", SWF]], ids=["google2011", "swf"])
def test_out_dev_full_is_a_write_failure_and_the_device_stays(argv, no_rename_over_devices, capsys):
    assert cli_main(["import", *argv, "--out", "/dev/full"]) == 1
    err = capsys.readouterr().err
    assert "import: --out /dev/full: cannot write it: No space left on device" in err
    assert len(err.strip().splitlines()) == 1, err
    assert Path("/dev/full").is_char_device()


def test_out_dev_null_is_written_in_place(no_rename_over_devices, capsys):
    assert cli_main(["import", "swf", SWF, "--out", "/dev/null"]) == 0
    assert Path("/dev/null").is_char_device()


def test_a_directory_as_out_is_refused_before_any_work(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        cli_main(["import", "google2011", "--task-events", TE, "--job-events", JE, "--out", str(tmp_path)])
    assert exc.value.code == 2
    assert f"{tmp_path}: Is a directory" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == [] and not any(p.name.endswith(".tmp") for p in tmp_path.parent.iterdir())


@pytest.mark.parametrize("limit", ["0", "-3"])
def test_a_limit_below_one_is_a_usage_error(limit, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        cli_main(["import", "google2011", "--task-events", TE, "--job-events", JE, "--out", str(tmp_path / "x.omt"),
                  "--limit", limit])
    assert exc.value.code == 2 and "--limit: expected a whole number >= 1" in capsys.readouterr().err
    assert not (tmp_path / "x.omt").exists()


def test_trace_info_names_the_first_submission(tmp_path, capsys):
    out = tmp_path / "kth.omt"
    assert cli_main(["import", "swf", SWF, "--out", str(out)]) == 0
    capsys.readouterr()
    assert cli_main(["trace", "info", str(out)]) == 0
    assert "first job submitted at 599850.000 s" in capsys.readouterr().out
