"""The replay's modelled decision time: when a decision's txns go out (``decision_commits``) and
what it charges for the tasks it leaves unplaced (``unplaced_charge``). Small Google excerpts
imported here; every time below is computed by hand from t_job 0.1 s and t_task 0.01 s."""

from __future__ import annotations

import pytest

from tools.fauxmaster.replay import ReplayConfig, replay

from google_rows import S, import_rows, task_row

T_JOB, T_TASK = 0.1, 0.01


def excerpt(tmp_path, tasks: int, machines: int, second_job: bool = False):
    """``machines`` machines of 0.5 cpu (two 0.25-cpu tasks each), first seen by a t = 0 task on
    each that finishes at 5 s; job 2: ``tasks`` tasks submitted at 10 s (one batch); with
    ``second_job``, job 3: one task submitted at 10 s too (after job 2's rows). The last row
    (100 s) sets the horizon."""
    rows = []
    for m in range(machines):
        rows += [task_row(0, 1, m, "", 0), task_row(0, 1, m, 10 + m, 1)]
    rows += [task_row(S + 5_000_000, 1, m, 10 + m, 4) for m in range(machines)]
    rows += [task_row(S + 10_000_000, 2, i, "", 0) for i in range(tasks)]
    if second_job:
        rows.append(task_row(S + 10_000_000, 3, 0, "", 0))
    rows += [task_row(S + 12_000_000, 2, i, 10 + i // 2, 1) for i in range(min(tasks, 2 * machines))]
    rows.append(task_row(S + 100_000_000, 9, 0, "", 0))
    return import_rows(tmp_path, rows)


def run(trace, **config):
    schedulers = [{"name": "batch0", "kind": "batch", "t_job": T_JOB, "t_task": T_TASK}]
    config.setdefault("submit_latency_s", 0.0)  # the decisions' own times, not the import's stated latency
    return replay(trace, ReplayConfig(schedulers=schedulers, max_txn_ops=8, **config))  # 3 claims per txn


def placed_delays(result) -> list[float]:
    return [round(d, 6) for d in result.fidelity.replay_delays if d != float("inf")]


def test_as_decided_sends_each_txn_when_its_tasks_are_decided(tmp_path):
    trace = excerpt(tmp_path, tasks=6, machines=3)
    paced = run(trace)  # the default
    # two txns of 3 claims: t_job + 3 t_task, then 3 more t_task
    assert placed_delays(paced) == [0.13] * 3 + [0.16] * 3
    at_end = run(trace, decision_commits="at-end")
    assert placed_delays(at_end) == [0.16] * 6  # Omega's simulator: all after t_job + 6 t_task
    busy = {r.name: r.busy_s for r in paced.schedulers}["batch0"]
    assert busy == pytest.approx({r.name: r.busy_s for r in at_end.schedulers}["batch0"])
    assert busy == pytest.approx(T_JOB + 6 * T_TASK)  # the scheduler is busy the same time


def test_unplaced_tasks_are_charged_after_the_last_txn(tmp_path):
    """Job 2 has 6 tasks, the cell room for 4 (2 machines): its claims go out first; the 2 tasks
    it could not place take their t_task after them, before the next decision (job 3's)."""
    trace = excerpt(tmp_path, tasks=6, machines=2, second_job=True)
    result = run(trace)
    decided = T_JOB + 6 * T_TASK  # "every": all 6 tasks decided
    assert placed_delays(result)[:4] == [0.13] * 3 + [0.14]
    busy = {r.name: r.busy_s for r in result.schedulers}["batch0"]
    # job 2's decision, then job 3's (nothing fits: t_job + 1 t_task)
    assert busy == pytest.approx(decided + T_JOB + T_TASK)


def test_unplaced_charge_once_charges_a_failed_class_once(tmp_path):
    trace = excerpt(tmp_path, tasks=6, machines=2, second_job=True)
    every = run(trace, unplaced_charge="every")
    once = run(trace, unplaced_charge="once")
    busy_every = {r.name: r.busy_s for r in every.schedulers}["batch0"]
    busy_once = {r.name: r.busy_s for r in once.schedulers}["batch0"]
    # job 2: 4 placed + 1 for its unplaced siblings, instead of all 6
    assert busy_every - busy_once == pytest.approx(T_TASK)
    assert placed_delays(once)[:4] == placed_delays(every)[:4]  # the same claims, at the same times


@pytest.mark.parametrize("field, value", [("decision_commits", "later"), ("unplaced_charge", "twice")])
def test_bad_values_are_refused(tmp_path, field, value):
    with pytest.raises(ValueError, match=field):
        ReplayConfig(**{field: value})
