"""Fauxmaster replays of hand-built traces: determinism, conflicts, task ends, invariants, etcd."""

from __future__ import annotations

import pytest

from cellstate.check import check_cell
from tools.fauxmaster.replay import ReplayConfig, replay
from tools.fauxmaster.scheduler_process import SchedulerConfig

from fauxmaster_traces import mixed_trace, small_cell_trace

BOTH = [dict(name="batch", kind="batch", seed=3), dict(name="service", kind="service")]


def _batch(n: int, t_job: float):
    return [SchedulerConfig(f"b{i}", "batch", seed=i, t_job=t_job) for i in range(n)]


def test_same_seeds_replay_identically(tmp_path):
    trace = mixed_trace(tmp_path / "mixed.omt")
    first = replay(trace, ReplayConfig(schedulers=BOTH, sample_every_s=1.0))
    second = replay(trace, ReplayConfig(schedulers=BOTH, sample_every_s=1.0))
    assert first.to_dict(include_wall=False) == second.to_dict(include_wall=False)
    assert first.jobs_submitted == 14 and first.cell["machines_failed"] == 1


@pytest.mark.parametrize("schedulers, conflicts", [
    (1, False),
    (2, True),
], ids=["one-scheduler-no-conflicts", "two-slow-schedulers-conflict"])
def test_overlapping_decisions_on_a_small_cell_conflict(tmp_path, schedulers, conflicts):
    trace = small_cell_trace(tmp_path / "small.omt", machines=2, jobs=16, tasks=2, every=0.0)
    result = replay(trace, ReplayConfig(schedulers=_batch(schedulers, t_job=1.0), until=60.0))
    failed = sum(s.failed_transactions for s in result.schedulers)
    assert (failed > 0) is conflicts
    assert (max(s.conflict_fraction for s in result.schedulers) > 0) is conflicts
    # 2 machines x 4 cores hold 8 one-core tasks: 4 jobs, whoever places them
    assert sum(s.tasks_placed for s in result.schedulers) == 8
    assert result.jobs_unscheduled == 12
    assert result.check["ok"], result.check["violations"]


@pytest.mark.parametrize("until", [2.5, 3.0, 7.25], ids=["mid-decision", "at-a-decision-end", "later"])
def test_busyness_stops_at_the_end_of_the_replay(tmp_path, until):
    """A decision still running when the replay stops counts up to the stop: busyness <= 1."""
    trace = small_cell_trace(tmp_path / "busy.omt", machines=8, jobs=16, tasks=1, every=0.0)
    result = replay(trace, ReplayConfig(schedulers=_batch(1, t_job=1.0), until=until))
    (s,) = result.schedulers
    assert s.busy_s == pytest.approx(until) and s.busyness == pytest.approx(1.0)
    assert s.busyness <= 1.0


def test_conflict_fraction_counts_conflicts_not_stale_retries(tmp_path):
    trace = small_cell_trace(tmp_path / "small.omt", machines=2, jobs=16, tasks=2, every=0.0)
    result = replay(trace, ReplayConfig(schedulers=_batch(2, t_job=1.0), until=60.0))
    for s in result.schedulers:
        successful = s.transactions - s.failed_transactions
        assert s.conflict_transactions <= s.failed_transactions
        assert s.conflict_fraction == pytest.approx(s.conflict_transactions / successful)


def test_task_ends_free_resources(tmp_path):
    trace = small_cell_trace(tmp_path / "ends.omt", machines=4, jobs=4, tasks=4, every=0.0, duration=5.0)
    result = replay(trace, ReplayConfig(schedulers=_batch(1, t_job=0.1), until=20.0, sample_every_s=1.0))
    by_t = {round(u.t, 6): u.cpu for u in result.utilization}
    assert by_t[2.0] == pytest.approx(1.0)  # 16 one-core tasks fill 16 cores
    assert by_t[10.0] == 0.0 and by_t[20.0] == 0.0
    assert result.cell["tasks_ended"] == 16 and result.jobs_unscheduled == 0
    assert result.wait_to_placed.jobs == 4


def test_invariants_hold_after_a_mixed_replay(tmp_path):
    result = replay(mixed_trace(tmp_path / "mixed.omt"), ReplayConfig(schedulers=BOTH, until=30.0))
    report = check_cell(result.store, result.keys)
    assert report.ok, report.violations
    assert report.jobs == 14 and report.machines == 6
    assert result.cell["jobs_killed"] == 1


@pytest.mark.parametrize("config, message", [
    (dict(schedulers=[]), "at least one scheduler"),
    (dict(schedulers=[dict(name="a"), dict(name="a")]), "unique"),
    (dict(schedulers=[dict(name="a", kind="borgish")]), "unknown kind 'borgish'"),
    (dict(schedulers=[dict(name="a", conflict_mode="vibes")]), "unknown ConflictMode 'vibes'"),
    (dict(schedulers=[dict(name="a", colour="red")]), "unknown keys \\['colour'\\]"),
    (dict(store="etcd"), "needs endpoints"),
    (dict(decision_time="guessed"), "decision_time must be one of"),
], ids=["none", "dup-names", "bad-kind", "bad-conflict-mode", "unknown-key", "etcd-no-endpoints", "bad-time"])
def test_bad_config_is_refused_with_a_clear_error(config, message):
    with pytest.raises(ValueError, match=message):
        ReplayConfig(**config)


def test_measured_decision_time_runs(tmp_path):
    trace = small_cell_trace(tmp_path / "m.omt", machines=4, jobs=6, tasks=2, every=0.5, duration=1.0)
    result = replay(trace, ReplayConfig(schedulers=_batch(1, 0.1), decision_time="measured", time_scale=10.0,
                                        until=10.0))
    busy = result.schedulers[0]
    assert busy.busy_s == pytest.approx(10.0 * busy.decide_wall_s) and busy.busy_s > 0
    assert busy.tasks_placed == 12


def test_replay_against_a_real_etcd(tmp_path, etcd_server, cell_keys):
    trace = mixed_trace(tmp_path / "mixed.omt")
    memory = replay(trace, ReplayConfig(schedulers=BOTH, until=20.0))
    etcd = replay(trace, ReplayConfig(schedulers=BOTH, until=20.0, store="etcd", endpoints=etcd_server.endpoints,
                                      cell=cell_keys.cell))
    assert etcd.check["ok"], etcd.check["violations"]
    assert etcd.jobs_submitted == memory.jobs_submitted == 14
    assert sum(s.tasks_placed for s in etcd.schedulers) > 0
    with pytest.raises(ValueError, match="is not empty"):
        replay(trace, ReplayConfig(store="etcd", endpoints=etcd_server.endpoints, cell=cell_keys.cell))
