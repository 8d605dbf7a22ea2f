"""Task ends in a replay: the tasks of one commit end together, in as few txns as fit."""

from __future__ import annotations

import pytest

from cellstate.lifecycle_txn import finish_batch_limit
from tools.fauxmaster.replay import ReplayConfig, replay
from tools.trace.events import JobSubmit, MachineAdd, TaskEnd, TaskEndStatus, TaskPlaced

from fauxmaster_traces import batch, machine, write

ONE = [dict(name="b", kind="batch", seed=1)]
TASKS = 150  # more than one finish txn holds at the default 128 ops (63 allocs)


def wide_trace(path, recorded_end: bool = False) -> str:
    """10 machines; a job of TASKS small tasks recorded on them at t = 0, ending at t = 10."""
    events = [MachineAdd(0.0, machine(i, cpu=64_000)) for i in range(10)]
    events.append(JobSubmit(0.0, batch("wide", TASKS, cpu=100, duration=10.0)))
    events += [TaskPlaced(0.0, "wide", i, f"m{i % 10}") for i in range(TASKS)]
    if recorded_end:  # one task ends earlier, as the trace records
        events.append(TaskEnd(4.0, "wide", 7, TaskEndStatus.FINISHED))
    return write(path, events)


def job_writes(result) -> int:
    """How many times the job record was written (its key's version)."""
    return result.store.get(result.keys.job("wide")).version


@pytest.mark.parametrize("recorded_end, ended_at_10", [(False, TASKS), (True, TASKS - 1)],
                         ids=["all-at-once", "one-ended-earlier"])
def test_a_jobs_tasks_end_together_in_as_few_txns_as_fit(tmp_path, recorded_end, ended_at_10):
    trace = wide_trace(tmp_path / "w.omt", recorded_end)
    before = replay(trace, ReplayConfig(schedulers=ONE, until=9.0))
    after = replay(trace, ReplayConfig(schedulers=ONE, until=11.0))
    per_txn = finish_batch_limit(128)
    assert per_txn == 63
    assert after.cell["tasks_ended"] - before.cell["tasks_ended"] == ended_at_10
    assert job_writes(after) - job_writes(before) == -(-ended_at_10 // per_txn)  # ceil: 3 txns
    assert not after.store.range(after.keys.kind_prefix("allocs")).kvs
    assert after.check["ok"], after.check["violations"]


def test_a_small_txn_limit_still_ends_every_task(tmp_path):
    result = replay(wide_trace(tmp_path / "w.omt"), ReplayConfig(schedulers=ONE, until=11.0, max_txn_ops=5))
    assert result.cell["tasks_ended"] == TASKS
    assert result.check["ok"], result.check["violations"]


@pytest.mark.parametrize("max_txn_ops, allocs", [(3, 1), (4, 1), (5, 2), (128, 63)],
                         ids=["min", "even", "two", "default"])
def test_finish_batch_limit_fits_the_ops_of_a_txn(max_txn_ops, allocs):
    assert finish_batch_limit(max_txn_ops) == allocs
    assert 2 * allocs + 1 <= max(3, max_txn_ops)  # deletes + machine puts + the job put


def test_recorded_ends_of_placed_and_unplaced_tasks(tmp_path):
    """A recorded end ends a task the replay has placed; one of a task it has not placed (a
    pending task, an unknown task or job, a task already ended) is only counted."""
    events = [MachineAdd(0.0, machine(0, cpu=1000)), JobSubmit(0.0, batch("j", 3, cpu=500))]
    events += [TaskPlaced(0.0, "j", 0, "m0"), TaskPlaced(0.0, "j", 1, "m0")]  # j/2 stays pending: no room
    events += [TaskEnd(t, job, task, TaskEndStatus.FINISHED)
               for t, job, task in ((0.5, "j", 2), (1.0, "j", 0), (3.0, "j", 9), (4.0, "nobody", 0),
                                    (5.0, "j", 0))]
    result = replay(write(tmp_path / "e.omt", events), ReplayConfig(schedulers=ONE, until=6.0))
    assert result.cell["tasks_ended"] == 1
    assert result.cell["trace_ends_of_unplaced_tasks"] == 4
    assert result.store.get(result.keys.alloc("j", 0)) is None
    assert result.check["ok"], result.check["violations"]
