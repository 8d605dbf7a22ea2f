"""``omega scheduler run --order fair|drf [--drf-weight OWNER=W …]``: the flags reach the
runtime options, bad ones are usage errors, and a real process on a real etcd serves the
DRF paper's cell in DRF order."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "omega"))
from runtime_helpers import job_records, settled, wait_for  # noqa: E402
from test_cmd_scheduler import SchedulerRun  # noqa: E402
from cellstate.check import check_cell  # noqa: E402
from cellstate.codec.records import encode_machine  # noqa: E402
from cellstate.model import Job, JobKind, Machine  # noqa: E402
from cellstate.resources import Resources  # noqa: E402
from cellstate.submit import submit_jobs  # noqa: E402
from tools.cli import build_parser, main  # noqa: E402
from tools.cli.scheduler import build_parts  # noqa: E402

CELL = Resources(9000, 18 * 1024, 100_000)
A_TASK, B_TASK = Resources(1000, 4 * 1024), Resources(3000, 1024)


def parts(*argv: str):
    return build_parts(build_parser().parse_args(["scheduler", "run", "--kind", "batch", *argv]))


@pytest.mark.parametrize("argv, order, weights", [
    ((), "fair", {}),
    (("--order", "drf"), "drf", {}),
    (("--order", "drf", "--drf-weight", "alice=2", "--drf-weight", "bob=0.5"), "drf", {"alice": 2.0, "bob": 0.5}),
], ids=["default-fair", "drf", "drf-weighted"])
def test_order_flags_reach_the_runtime_options(argv, order, weights):
    _, _, _, options = parts(*argv)
    assert (options.order, dict(options.drf_weights)) == (order, weights)


@pytest.mark.parametrize("argv, message", [
    (["--order", "lottery"], "--order/--drf-weight: unknown queue order 'lottery'; known: fair, drf"),
    (["--order", "drf", "--drf-weight", "alice"], "expected OWNER=WEIGHT"),
    (["--order", "drf", "--drf-weight", "alice=0"], "must be a finite number > 0"),
    (["--order", "drf", "--drf-weight", "alice=x"], "'x' is not a number"),
    (["--drf-weight", "alice=2"], "but the queue order is 'fair'"),
], ids=["unknown-order", "no-equals", "zero-weight", "not-a-number", "weights-without-drf"])
def test_bad_order_flags_are_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["scheduler", "run", "--kind", "batch", *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("extra, expected", [
    (("--order", "drf"), {"A": 3, "B": 2}),
    (("--order", "fair", "--batch-jobs", "1"), {"A": 4, "B": 1}),
], ids=["drf", "fair-differs"])
def test_process_serves_the_papers_cell_in_drf_order(etcd_server, etcd_store, cell_keys, extra, expected):
    etcd_store.put(cell_keys.machine("m0"), encode_machine(Machine("m0", CELL)))
    now = time.time()
    submit_jobs(etcd_store, cell_keys, [Job(f"a{i}", JobKind.BATCH, 1, A_TASK, owner="A") for i in range(8)], now)
    submit_jobs(etcd_store, cell_keys, [Job(f"b{i}", JobKind.BATCH, 1, B_TASK, owner="B") for i in range(8)], now + 1)
    run = SchedulerRun(etcd_server.endpoints, cell_keys.cell, "drf-cli", *extra)
    try:
        wait_for(lambda: settled(etcd_store, cell_keys, 5), 20, "5 tasks placed, the rest with reasons")
    finally:
        final = run.stop()
    assert any(f"{extra[1]} order" in line for line in run.out if line.startswith("scheduler "))
    placed = {"A": 0, "B": 0}
    for record in job_records(etcd_store, cell_keys):
        placed[record.job.owner] += record.tasks.count("a")
    assert placed == expected and final["tasks_placed"] == 5
    assert check_cell(etcd_store, cell_keys).ok


def test_default_seed_is_the_names_and_an_explicit_one_wins():
    """Schedulers started side by side without --seed must not sample alike; one name, one seed."""
    def seed(*argv: str) -> int:
        args = build_parser().parse_args(["scheduler", "run", "--kind", "batch", *argv])
        build_parts(args)
        return args.seed

    assert seed("--name", "b0") == seed("--name", "b0") != seed("--name", "b1")
    assert seed("--name", "b0", "--seed", "5") == 5
