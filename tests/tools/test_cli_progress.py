"""Progress and summary lines of the long-running commands: ``scheduler run``, ``agents run`` and
``etcd up`` say on stderr what they have done every ``--progress-every`` seconds and once when
they stop (docs/CLI.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "omega"))
from runtime_helpers import add_machines, batch_jobs, settled, submit, wait_for  # noqa: E402
from tests.tools.cli_helpers import CommandLines  # noqa: E402
from tools.cli import main  # noqa: E402
from tools.cli.progress import format_elapsed  # noqa: E402

class Lines(CommandLines):
    def stop(self) -> int:
        assert self.terminate(30), "did not stop within 30 s after SIGTERM"
        return self.proc.returncode


def test_scheduler_progress_and_summary(etcd_server, etcd_store, cell_keys):
    add_machines(etcd_store, cell_keys, 2)
    run = Lines("scheduler", "run", "--kind", "batch", "--name", "p1", "--progress-every", "0.2",
                "--endpoints", ",".join(etcd_server.endpoints), "--cell", cell_keys.cell)
    try:
        wait_for(lambda: any(line.startswith("scheduler ") for line in run.out) or run.proc.poll() is not None,
                 30, "the scheduler serving")
        submit(etcd_store, cell_keys, batch_jobs("j", 2, 3, 1000))
        wait_for(lambda: settled(etcd_store, cell_keys, 6), 20, "6 tasks placed")
        wait_for(lambda: any("placed 6 tasks (2 jobs)" in line for line in run.err), 20, "a progress line")
    finally:
        assert run.stop() == 0, run.err[-5:]
    progress = [line for line in run.err if line.startswith("scheduler p1: placed ")]
    assert progress and all(", conflicts" not in line and " conflicts, queue " in line for line in progress)
    (summary,) = [line for line in run.err if line.startswith("scheduler p1: stopped after ")]
    assert "placed 6 tasks (2 jobs)" in summary and "0 tasks left unplaced" in summary


def test_agents_progress_and_summary(etcd_server, cell_keys, capsys):
    assert main(["agents", "run", "--init-machines", "3", "--duration", "0.7", "--progress-every", "0.2",
                 "--endpoints", ",".join(etcd_server.endpoints), "--cell", cell_keys.cell]) == 0
    err = capsys.readouterr().err.splitlines()
    assert any(line.startswith("agents agents: 3 machines, 0 tasks started") for line in err)
    assert [line for line in err if line.startswith("agents agents: stopped after ")]


def test_etcd_up_progress_and_summary():
    run = Lines("etcd", "up", "--port", "0", "--no-fsync", "--progress-every", "0.2")
    try:
        wait_for(lambda: any("members running" in line for line in run.err) or run.proc.poll() is not None,
                 60, "an etcd progress line")
    finally:
        assert run.stop() == 0, run.err[-5:]
    assert "etcd: 1 of 1 members running, 0 restarts after " in "\n".join(run.err)
    assert [line for line in run.err if line.startswith("etcd: stopped after ") and "1 of 1 members" in line]


@pytest.mark.parametrize("argv", [["scheduler", "run", "--kind", "batch"], ["agents", "run"], ["etcd", "up"]])
def test_bad_progress_every_is_a_usage_error(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--progress-every", "-1", "--endpoints", "127.0.0.1:1"] if argv[0] != "etcd"
             else [*argv, "--progress-every", "nan"])
    assert exc.value.code == 2 and "--progress-every" in capsys.readouterr().err


def test_elapsed_for_people():
    assert [format_elapsed(s) for s in (4.9, 192, 7500)] == ["4s", "3m12s", "2h05m"]


def test_etcd_up_summary_without_progress_lines():
    run = Lines("etcd", "up", "--port", "0", "--no-fsync", "--progress-every", "0")
    try:
        wait_for(lambda: any(line.startswith("  export OMEGA_ENDPOINTS=") for line in run.out)
                 or run.proc.poll() is not None, 60, "etcd up")
    finally:
        assert run.stop() == 0, run.err[-5:]
    assert [line for line in run.err if line.startswith("etcd: ")] == [
        line for line in run.err if line.startswith("etcd: stopped after ")] != []
