"""Fauxmaster ``SchedulerConfig``: the queue order (fair or drf, with weights) in replays and
replay configs; any scheduler kind of ``schedulers.chains.KINDS`` with its default job kinds."""

from __future__ import annotations

import json

import pytest

from cellstate.check import check_cell
from cellstate.codec.records import decode_job_record
from cellstate.model import Job, JobKind, Machine
from cellstate.resources import Resources
from schedulers import chains
from tools.cli import main
from tools.fauxmaster.scheduler_mix import parse_schedulers
from tools.fauxmaster.replay import ReplayConfig, replay
from tools.fauxmaster.scheduler_process import SchedulerConfig
from tools.trace.events import JobSubmit, MachineAdd

from fauxmaster_traces import small_cell_trace, write

CELL = Resources(9000, 18 * 1024, 100_000)
A_TASK, B_TASK = Resources(1000, 4 * 1024), Resources(3000, 1024)


def papers_cell_trace(path) -> str:
    """The DRF paper's cell <9 CPU, 18 GB>: at t=0 A's 2-task job (it keeps running: A holds
    <2 CPU, 8 GB>), at t=1 six one-task jobs each of A <1, 4> and B <3, 1> (A's first)."""
    events = [MachineAdd(0.0, Machine("m0", CELL)),
              JobSubmit(0.0, Job("a-running", JobKind.BATCH, 2, A_TASK, owner="A"))]
    events += [JobSubmit(1.0, Job(f"a{i}", JobKind.BATCH, 1, A_TASK, owner="A")) for i in range(6)]
    events += [JobSubmit(1.0, Job(f"b{i}", JobKind.BATCH, 1, B_TASK, owner="B")) for i in range(6)]
    return write(path, events)


def placed_by_owner(result) -> dict[str, int]:
    placed = {"A": 0, "B": 0}
    for kv in result.store.range(result.keys.kind_prefix("jobs")).kvs:
        record = decode_job_record(kv.key, kv.value)
        placed[record.job.owner] += record.tasks.count("a")
    return placed


@pytest.mark.parametrize("scheduler, expected", [
    (dict(name="b", kind="batch", order="drf"), {"A": 3, "B": 2}),
    (dict(name="b", kind="batch"), {"A": 4, "B": 1}),
    (dict(name="b", kind="batch", order="drf", drf_weights={"A": 3}), {"A": 4, "B": 1}),
], ids=["drf", "fair-differs", "drf-weighted"])
def test_replay_serves_the_papers_cell_in_the_configured_order(tmp_path, scheduler, expected):
    """DRF counts what A already holds: B goes first at t=1 and the cell ends at the paper's
    allocation (A 3 tasks, B 2); round-robin ignores usage and alternates from A."""
    result = replay(papers_cell_trace(tmp_path / "drf.omt"), ReplayConfig(schedulers=[scheduler], until=10.0))
    assert placed_by_owner(result) == expected
    assert result.check["ok"], result.check["violations"]


def test_replay_spec_json_carries_the_order():
    configs = parse_schedulers('[{"name": "b", "kind": "batch", "order": "drf", "drf_weights": {"A": 2}}]')
    config = ReplayConfig(schedulers=configs).schedulers[0]
    assert (config.order, config.drf_weights, config.jobs) == ("drf", {"A": 2.0}, "batch")


@pytest.mark.parametrize("fields, message", [
    (dict(order="lottery"), "scheduler 'x': unknown queue order 'lottery'; known: fair, drf"),
    (dict(order="drf", drf_weights={"A": -2}), "scheduler 'x': DRF weight of owner 'A' must be a finite number > 0"),
    (dict(drf_weights={"A": 2}), "scheduler 'x': DRF weights ['A'] given, but the queue order is 'fair'"),
    (dict(kind="nope"), "scheduler 'x': unknown kind 'nope'; known: "),
    (dict(kind="batch", jobs="gpu"), "jobs must be one of"),
    (dict(kind="solver", options={"time_limit_s": 0}), "scheduler 'x': solver: time_limit_s must be a number > 0"),
    (dict(kind="borg", options={"walk": "packed"}), "scheduler 'x': borg: unknown config keys ['walk']"),
    (dict(kind="borg", options=["k", 5]), "options must be a mapping"),
], ids=["unknown-order", "negative-weight", "weights-without-drf", "unknown-kind", "unknown-jobs",
        "bad-solver-option", "unknown-borg-option", "options-not-a-mapping"])
def test_bad_scheduler_configs_are_refused(fields, message):
    with pytest.raises(ValueError) as error:
        SchedulerConfig("x", **fields)
    assert message in str(error.value)


@pytest.mark.parametrize("kind, jobs, expected", [
    ("batch", "", "batch"),
    ("service", "", "service"),
    ("borg", "", "all"),
    ("borg", "batch", "batch"),
    ("batch", "all", "all"),
], ids=["batch-own", "service-own", "borg-all", "borg-batch-only", "batch-all"])
def test_any_kind_of_the_registry_with_its_default_jobs(kind, jobs, expected):
    assert SchedulerConfig("x", kind, jobs=jobs).jobs == expected


def test_a_kind_added_to_the_registry_is_accepted(monkeypatch):
    monkeypatch.setitem(chains.KINDS, "newcomer", chains.KINDS["batch"])
    assert SchedulerConfig("x", "newcomer").jobs == "all"


def test_borg_scheduler_replays_every_job_kind(tmp_path):
    trace = small_cell_trace(tmp_path / "borg.omt", machines=4, jobs=6, tasks=2, every=0.5)
    result = replay(trace, ReplayConfig(schedulers=[dict(name="g", kind="borg", order="drf")], until=20.0))
    assert result.jobs_unscheduled == 0 and result.schedulers[0].tasks_placed == 12
    assert check_cell(result.store, result.keys).ok


def test_options_reach_the_scheduler_and_a_solver_replays_reproducibly(tmp_path):
    trace = small_cell_trace(tmp_path / "solver.omt", machines=4, jobs=6, tasks=2, every=0.5)
    solver = dict(name="s", kind="solver", options={"deterministic_time": 0.05, "candidates": 3})
    runs = [replay(trace, ReplayConfig(schedulers=[solver], until=20.0)) for _ in range(2)]
    allocs = [sorted((kv.key, kv.value) for kv in r.store.range(r.keys.kind_prefix("allocs")).kvs) for r in runs]
    assert allocs[0] == allocs[1] and len(allocs[0]) == 12
    assert runs[0].jobs_unscheduled == 0 and check_cell(runs[0].store, runs[0].keys).ok
    config = SchedulerConfig("g", "borg", options={"walk_start": "random", "k": 7})
    assert config.scheduler_config() == {"walk_start": "random", "k": 7}


@pytest.mark.parametrize("spec, order, weights, expected", [
    ("a:batch,s:service", "drf", {"A": 2.0},
     [dict(name="a", kind="batch", seed=0, order="drf", drf_weights={"A": 2.0}),
      dict(name="s", kind="service", seed=1, order="drf", drf_weights={"A": 2.0})]),
    ('[{"name": "a", "kind": "batch", "order": "fair"}, {"name": "b", "kind": "batch"}]', "drf", {"A": 2.0},
     [dict(name="a", kind="batch", seed=0, order="fair"),
      dict(name="b", kind="batch", seed=1, order="drf", drf_weights={"A": 2.0})]),
    ("a:batch", None, None, [dict(name="a", kind="batch", seed=0)]),
], ids=["flags-fill-every-config", "a-config-keeps-its-order", "no-flags"])
def test_replay_order_flags_fill_what_configs_leave_out(spec, order, weights, expected):
    assert parse_schedulers(spec, order=order, drf_weights=weights) == expected


def test_replay_command_takes_the_order_flags(tmp_path, capsys):
    trace, out = papers_cell_trace(tmp_path / "drf.omt"), tmp_path / "r.json"
    code = main(["replay", trace, "--schedulers", "b:batch", "--order", "drf", "--drf-weight", "A=3",
                 "--until", "10", "--json", str(out)])
    assert code == 0 and "invariants: ok" in capsys.readouterr().out
    chosen = json.loads(out.read_text())["config"]["schedulers"][0]
    assert (chosen["order"], chosen["drf_weights"], chosen["jobs"]) == ("drf", {"A": 3.0}, "batch")


@pytest.mark.parametrize("argv, message", [
    (["--drf-weight", "A=3"], "--drf-weight needs a scheduler with the drf queue order"),
    (["--order", "drf", "--drf-weight", "A"], "expected OWNER=WEIGHT"),
    (["--order", "lottery"], "unknown queue order 'lottery'"),
], ids=["weights-without-drf", "bad-weight", "unknown-order"])
def test_replay_command_refuses_bad_order_flags(tmp_path, capsys, argv, message):
    trace = papers_cell_trace(tmp_path / "drf.omt")
    with pytest.raises(SystemExit) as exc:
        main(["replay", trace, "--schedulers", "b:batch", *argv])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
