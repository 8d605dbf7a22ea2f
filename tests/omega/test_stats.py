"""StatsRecorder: totals, sliding windows, percentiles, hot machines, recent conflicts."""

from __future__ import annotations

import pytest

from cellstate.scheduler_stats import (
    ConflictNote, HOT_MACHINES_MAX, HotMachine, RECENT_CONFLICTS_MAX, SchedulerStats,
)
from omega.stats import StatsRecorder, percentile


def attempt(rec: StatsRecorder, now: float, *, decision_s=0.01, busy_s=0.0, txns=1, commits=1, conflicts=0,
            retries=0, tasks_placed=1, tasks_unplaced=0, job_placed=True, machines=None, job="j"):
    rec.record_attempt(decision_s, busy_s, txns, commits, conflicts, retries, tasks_placed, tasks_unplaced,
                       job_placed, machines or {}, job, now)


def recorder(started_at: float = 0.0, **kw) -> StatsRecorder:
    return StatsRecorder("s1", "batch", pid=7, host="h", started_at=started_at,
                         conflict_mode="sequence", commit_mode="incremental", **kw)


def test_totals_and_identity():
    rec = recorder()
    attempt(rec, 1.0, txns=2, commits=1, conflicts=1, retries=1, tasks_placed=3, tasks_unplaced=2,
            job_placed=False, machines={"m1": "s2"})
    attempt(rec, 2.0, txns=1, commits=1, tasks_placed=4)
    s = rec.snapshot(3.0)
    assert (s.name, s.kind, s.pid, s.host, s.started_at, s.updated_at) == ("s1", "batch", 7, "h", 0.0, 3.0)
    assert (s.conflict_mode, s.commit_mode) == ("sequence", "incremental")
    assert (s.attempts, s.txns, s.commits, s.conflicts, s.retries) == (2, 3, 2, 1, 1)
    assert (s.jobs_placed, s.tasks_placed, s.tasks_unplaced) == (1, 7, 2)
    assert s.conflict_fraction == pytest.approx(0.5)


# (attempts as (end time, busy_s, job_placed, tasks_placed), snapshot time,
#  expected jobs/s, placements/s, busyness)
WINDOW_CASES = [
    ("empty", [], 20.0, 0.0, 0.0, 0.0),
    ("all-inside", [(12.0, 1.0, True, 5), (15.0, 2.0, True, 5)], 20.0, 0.2, 1.0, 0.3),
    ("old-dropped", [(5.0, 3.0, True, 100), (15.0, 1.0, False, 2)], 20.0, 0.0, 0.2, 0.1),
    ("busy-clipped-at-window-start", [(11.0, 4.0, True, 1)], 20.0, 0.1, 0.1, 0.1),
    ("busyness-capped", [(20.0, 30.0, True, 1)], 20.0, 0.1, 0.1, 1.0),
    ("short-run-uses-elapsed", [(1.0, 0.5, True, 4), (2.0, 0.5, True, 4)], 2.0, 1.0, 4.0, 0.5),
    ("ends-exactly-at-window-start", [(10.0, 1.0, True, 9)], 20.0, 0.0, 0.0, 0.0),
]


@pytest.mark.parametrize("attempts,now,jobs,placements,busy", [c[1:] for c in WINDOW_CASES],
                         ids=[c[0] for c in WINDOW_CASES])
def test_sliding_window(attempts, now, jobs, placements, busy):
    rec = recorder()
    for at, busy_s, placed, tasks in attempts:
        attempt(rec, at, busy_s=busy_s, job_placed=placed, tasks_placed=tasks)
    s = rec.snapshot(now)
    assert s.jobs_per_s == pytest.approx(jobs)
    assert s.placements_per_s == pytest.approx(placements)
    assert s.busyness == pytest.approx(busy)


def test_window_slides_as_time_passes():
    rec = recorder()
    attempt(rec, 10.0, busy_s=1.0, tasks_placed=10)
    assert rec.snapshot(12.0).placements_per_s == pytest.approx(1.0)
    later = rec.snapshot(25.0)
    assert (later.placements_per_s, later.jobs_per_s, later.busyness) == (0.0, 0.0, 0.0)
    assert later.tasks_placed == 10  # totals stay


PERCENTILE_CASES = [
    ("empty", [], (0.0, 0.0, 0.0)),
    ("one", [0.004], (4.0, 4.0, 4.0)),
    ("1-to-100ms", [i / 1000 for i in range(100, 0, -1)], (50.0, 90.0, 99.0)),
    ("two", [0.001, 0.003], (1.0, 3.0, 3.0)),
]


@pytest.mark.parametrize("decisions,expected", [c[1:] for c in PERCENTILE_CASES],
                         ids=[c[0] for c in PERCENTILE_CASES])
def test_decision_percentiles(decisions, expected):
    rec = recorder()
    for i, d in enumerate(decisions):
        attempt(rec, 1.0 + i * 0.001, decision_s=d)
    s = rec.snapshot(5.0)
    assert (s.decision_ms_p50, s.decision_ms_p90, s.decision_ms_p99) == pytest.approx(expected)


def test_percentiles_cover_only_the_last_samples():
    rec = recorder(samples=1000)
    for _ in range(1000):
        attempt(rec, 1.0, decision_s=10.0)  # pushed out below
    for _ in range(1000):
        attempt(rec, 2.0, decision_s=0.002)
    s = rec.snapshot(3.0)
    assert (s.decision_ms_p50, s.decision_ms_p99) == pytest.approx((2.0, 2.0))


@pytest.mark.parametrize("values,p,expected", [
    ([1.0, 2.0, 3.0, 4.0], 50, 2.0), ([1.0, 2.0, 3.0, 4.0], 100, 4.0), ([1.0, 2.0, 3.0, 4.0], 1, 1.0),
    ([5.0], 99, 5.0), ([], 50, 0.0)], ids=["median", "max", "min", "single", "empty"])
def test_percentile_nearest_rank(values, p, expected):
    assert percentile(values, p) == expected


def test_hot_machines_rank_and_winners():
    rec = recorder()
    attempt(rec, 1.0, conflicts=1, machines={"m1": "s2", "m2": "s3"}, job="a")
    attempt(rec, 2.0, conflicts=1, machines={"m1": "s3"}, job="b")
    attempt(rec, 3.0, conflicts=1, machines={"m1": "s2"}, job="c")
    attempt(rec, 4.0, conflicts=1, machines={"m0": "s2"}, job="d")
    s = rec.snapshot(5.0)
    assert s.hot_machines == (
        HotMachine("m1", 3, (("s2", 2), ("s3", 1))),
        HotMachine("m0", 1, (("s2", 1),)),  # tie with m2 broken by id
        HotMachine("m2", 1, (("s3", 1),)),
    )


def test_hot_machines_keep_top_ten():
    rec = recorder()
    for i in range(HOT_MACHINES_MAX + 5):
        for _ in range(i + 1):
            attempt(rec, 1.0, conflicts=1, machines={f"m{i:02d}": "w"})
    hot = rec.snapshot(2.0).hot_machines
    assert len(hot) == HOT_MACHINES_MAX
    assert [h.machine for h in hot] == [f"m{i:02d}" for i in range(14, 4, -1)]
    assert hot[0].conflicts == 15


def test_recent_conflicts_last_twenty_oldest_first():
    rec = recorder()
    for i in range(RECENT_CONFLICTS_MAX + 3):
        attempt(rec, float(i), conflicts=1, machines={"m2": "x", "m1": "y"}, job=f"j{i}")
    attempt(rec, 100.0, conflicts=1, job="job-level")  # the job record changed: no machines
    attempt(rec, 101.0, conflicts=0, job="clean")  # no conflict: no note
    notes = rec.snapshot(102.0).recent_conflicts
    assert len(notes) == RECENT_CONFLICTS_MAX
    assert notes[0] == ConflictNote(4.0, "j4", ("m1", "m2"), ("y", "x"))
    assert notes[-1] == ConflictNote(100.0, "job-level", (), ())


@pytest.mark.parametrize("bad,message", [
    (dict(decision_s=-1.0), "decision_s"), (dict(busy_s=float("nan")), "busy_s"), (dict(txns=-1), "txns"),
    (dict(commits=1.5), "commits"), (dict(job_placed=1), "job_placed"), (dict(now=float("inf")), "now"),
], ids=["negative-decision", "nan-busy", "negative-txns", "float-commits", "int-placed", "inf-now"])
def test_record_attempt_rejects_bad_input(bad, message):
    rec = recorder()
    args = dict(decision_s=0.1, busy_s=0.1, txns=1, commits=1, conflicts=0, retries=0, tasks_placed=1,
                tasks_unplaced=0, job_placed=True, conflict_machines={}, job_id="j", now=1.0)
    args.update(bad)
    with pytest.raises(ValueError, match=message):
        rec.record_attempt(**args)


@pytest.mark.parametrize("name,kind,message", [("", "batch", "name"), ("a/b", "batch", "name"),
                                               ("s", "a/b", "kind"), ("s", "", "kind")],
                         ids=["empty", "slash", "kind", "empty-kind"])
def test_recorder_rejects_bad_identity(name, kind, message):
    with pytest.raises(ValueError, match=message):
        StatsRecorder(name, kind)


@pytest.mark.parametrize("conflicts,commits,fraction", [(0, 0, 0.0), (3, 0, 0.0), (1, 4, 0.25), (6, 3, 2.0)],
                         ids=["none", "no-commits", "quarter", "more-than-one"])
def test_conflict_fraction(conflicts, commits, fraction):
    assert SchedulerStats("s", "batch", conflicts=conflicts, commits=commits).conflict_fraction == fraction
