"""``omega scheduler run`` processes racing on one small, nearly full cell of a real etcd.

Every scheduler starts (and publishes its stats) before the jobs are submitted in one txn;
with ``--steal-after 0`` and one seed they all try the same jobs in the same order, so their
commits collide. The cell must end clean: nothing over capacity, no task placed twice,
every task placed or pending with a reason.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "omega"))
from runtime_helpers import add_machines, batch_jobs, job_records, settled, submit, wait_for  # noqa: E402
from cellstate.check import check_cell  # noqa: E402
from tests.tools.cli_helpers import CommandLines  # noqa: E402
from tools.cli import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MACHINES = 20  # 4 cores each: 80 cores, 160 tasks of 500 millicores
JOBS, TASKS, CPU = 22, 8, 500  # 176 tasks: 110 % of the cell
FITS = MACHINES * 4000 // CPU


class SchedulerRun(CommandLines):
    """One ``omega scheduler run`` subprocess; its output lines are collected by threads."""

    def __init__(self, endpoints, cell: str, name: str, *extra: str):
        super().__init__("-v", "scheduler", "run", "--kind", "batch", "--name", name, "--endpoints",
                         ",".join(endpoints), "--cell", cell, "--seed", "7", "--steal-after", "0", "--batch-jobs", "4",
                         *extra)
        self.name = name

    def serving(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited early ({self.proc.returncode}): {self.err[-10:]}")
        return any(line.startswith("scheduler ") for line in self.out)

    def stop(self, timeout: float = 15.0) -> dict:
        """SIGTERM, wait, and the final stats it printed."""
        if not self.terminate(timeout):
            raise AssertionError(f"{self.name} did not stop within {timeout} s after SIGTERM")
        assert self.proc.returncode == 0, f"{self.name} exited {self.proc.returncode}: {self.err[-10:]}"
        final = [line for line in self.out if line.startswith("final-stats ")]
        assert final, f"{self.name} printed no final stats: {self.out[-5:]}"
        return json.loads(final[-1].split(" ", 1)[1])


def race(etcd_server, store, keys, schedulers: int, mode: str) -> tuple[list[dict], list[SchedulerRun]]:
    add_machines(store, keys, MACHINES)
    runs = [SchedulerRun(etcd_server.endpoints, keys.cell, f"s{i}", "--conflict-mode", mode)
            for i in range(schedulers)]
    try:
        for run in runs:
            wait_for(run.serving, 20, f"{run.name} serving")
        wait_for(lambda: all(store.get(keys.stats(r.name)) for r in runs), 10, "every stats key")
        submit(store, keys, batch_jobs("j", JOBS, TASKS, CPU))
        wait_for(lambda: settled(store, keys, FITS), 20, f"{FITS} tasks placed, the rest with reasons")
    finally:
        finals = [run.stop() for run in runs]
    return finals, runs


@pytest.mark.parametrize("schedulers,mode", [
    (2, "sequence"), (2, "resource-fit"), (3, "sequence"), (3, "resource-fit"),
], ids=["two-sequence", "two-resource-fit", "three-sequence", "three-resource-fit"])
def test_racing_schedulers_conflict_and_leave_the_cell_clean(etcd_server, etcd_store, cell_keys, schedulers, mode):
    finals, runs = race(etcd_server, etcd_store, cell_keys, schedulers, mode)
    assert sum(f["conflicts"] for f in finals) > 0
    assert sum(f["tasks_placed"] for f in finals) == FITS
    assert all(f["conflict_mode"] == mode for f in finals)
    report = check_cell(etcd_store, cell_keys)
    assert report.ok, report.violations[:5]
    records = job_records(etcd_store, cell_keys)
    assert sum(r.tasks.count("p") for r in records) == JOBS * TASKS - FITS
    assert all(r.reason for r in records if "p" in r.tasks)
    assert any("conflict scheduler=" in line and "winners=" in line for run in runs for line in run.err)
    assert all(etcd_store.get(cell_keys.stats(run.name)) is None for run in runs)  # leases revoked


def test_metrics_endpoint_and_duration(etcd_server, etcd_store, cell_keys):
    add_machines(etcd_store, cell_keys, 2)
    submit(etcd_store, cell_keys, batch_jobs("j", 2, 3, 1000))
    run = SchedulerRun(etcd_server.endpoints, cell_keys.cell, "m1", "--metrics-port", "0", "--duration", "3")
    url = wait_for(lambda: next((line.split(" on ", 1)[1] for line in run.out if line.startswith("metrics on ")),
                                None) or run.serving() and None, 20, "the metrics address")
    wait_for(lambda: settled(etcd_store, cell_keys, 6), 10, "6 tasks placed")
    body = wait_for(lambda: _scrape(url, cell_keys.cell), 5, "tasks placed in the metrics")
    assert f'omega_scheduler_decision_seconds_count{{cell="{cell_keys.cell}",kind="batch",scheduler="m1"}}' in body
    run.proc.wait(15)  # --duration 3 ends it without a signal
    assert run.stop()["tasks_placed"] == 6


def _scrape(url: str, cell: str) -> str | None:
    body = urllib.request.urlopen(url, timeout=5).read().decode()
    placed = f'omega_scheduler_tasks_placed_total{{cell="{cell}",kind="batch",scheduler="m1"}} 6.0'
    return body if placed in body else None


@pytest.mark.parametrize("argv,message", [
    (["--kind", "nope"], "--kind must be one of"),
    (["--kind", "batch", "--name", "a/b"], "--name"),
    (["--kind", "batch", "--conflict-mode", "fuzzy"], "unknown ConflictMode"),
    (["--kind", "batch", "--batch-jobs", "0"], "batch_jobs"),
    (["--kind", "batch", "--config", "/nonexistent.toml"], "--config"),
], ids=["kind", "name", "conflict-mode", "batch-jobs", "config"])
def test_bad_flags_are_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["scheduler", "run", *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
