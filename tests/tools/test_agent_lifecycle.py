"""Pure decisions of the machine agents (no store)."""

from __future__ import annotations

import math
import random

import pytest

from cellstate.model import Alloc, Job, JobKind, JobRecord, Machine, MachineState
from cellstate.resources import Resources
from cellstate.plan import JobEntry, MachineEntry
from tools.agents.failures import FailureInjector
from tools.agents.lifecycle import (
    EndSchedule, MachineNeed, MachineSelector, DueEnd, end_time, failure_delay, machine_need, startable,
)

R = Resources.of(100, 100)


def job(job_id="j", kind=JobKind.BATCH, tasks="a", duration=10.0, killed=False) -> JobEntry:
    spec = Job(job_id, kind, len(tasks), R, duration_s=duration if kind is JobKind.BATCH else None)
    return JobEntry(JobRecord(spec, tasks, killed=killed), 3)


def alloc(task=0, job_id="j", machine="m1", placed_at=100.0, running=False) -> Alloc:
    return Alloc(job_id, task, machine, R, placed_at=placed_at, running=running)


@pytest.mark.parametrize("text, yes, no", [
    ("all", ["m1", "x"], []),
    ("rack-a", ["rack-a-m1"], ["rack-b-m1"]),
    ("m1, m3", ["m1", "m3"], ["m2", "m10"]),
], ids=["all", "prefix", "list"])
def test_machine_selector(text, yes, no):
    selector = MachineSelector.parse(text)
    assert all(selector.matches(m) for m in yes) and not any(selector.matches(m) for m in no)


@pytest.mark.parametrize("text", ["", "  ", ",", " , "], ids=["empty", "blank", "comma", "blank-list"])
def test_machine_selector_refuses_empty(text):
    with pytest.raises(ValueError, match="--machines"):
        MachineSelector.parse(text)


@pytest.mark.parametrize("a, entry, scale, expected", [
    (alloc(placed_at=100.0), job(duration=10.0), 1.0, 110.0),
    (alloc(placed_at=100.0), job(duration=30.0), 10.0, 103.0),
    (alloc(placed_at=100.0), job(duration=0.0), 1.0, 100.0),
    (alloc(placed_at=0.0), job(duration=10.0), 2.0, 55.0),
    (alloc(), job(kind=JobKind.SERVICE), 1.0, None),
    (alloc(), job(duration=None), 1.0, None),
    (alloc(), None, 1.0, None),
], ids=["batch", "scaled", "zero-duration", "no-placed-at-uses-first-seen", "service", "no-duration",
        "unknown-job"])
def test_end_time(a, entry, scale, expected):
    assert end_time(a, entry, scale, first_seen=50.0) == expected


def test_startable_takes_placed_tasks_of_live_jobs_only():
    jobs = {"j": job("j", tasks="arp"), "k": job("k", tasks="a", killed=True)}
    allocs = [alloc(0, "j"), alloc(1, "j"), alloc(0, "j", running=True), alloc(0, "k"), alloc(0, "gone")]
    assert startable(allocs, jobs.get) == {"j": [allocs[0]]}


@pytest.mark.parametrize("state, jobs, need", [
    (MachineState.DOWN, {"j": job()}, MachineNeed.EVICT_ALL),
    (MachineState.DRAINING, {"j": job(kind=JobKind.SERVICE)}, MachineNeed.MOVE_SERVICES),
    (MachineState.DRAINING, {"j": job()}, MachineNeed.NOTHING),
    (MachineState.UP, {"j": job()}, MachineNeed.NOTHING),
], ids=["down-with-allocs", "draining-service", "draining-batch", "up"])
def test_machine_need(state, jobs, need):
    entry = MachineEntry(Machine("m1", R, state=state), 1)
    assert machine_need(entry, [alloc()], jobs.get) is need


def test_end_schedule_orders_dedupes_and_replaces_placements():
    ends = EndSchedule()
    assert ends.add(DueEnd(5.0, "j", 0, "m1", 1.0))
    assert not ends.add(DueEnd(5.0, "j", 0, "m1", 1.0))  # same placement seen again
    assert ends.add(DueEnd(3.0, "k", 0, "m1", 1.0))
    assert ends.add(DueEnd(9.0, "j", 0, "m2", 2.0))       # re-placed: the old end is stale
    assert ends.next_at() == 3.0
    assert [e.job_id for e in ends.pop_due(6.0)] == ["k"]
    assert ends.next_at() == 9.0
    ends.forget("j", 0)
    assert ends.next_at() == math.inf and len(ends) == 0


def test_failure_delay_is_seeded_and_infinite_without_rate():
    assert failure_delay(random.Random(1), 0.0, 10, 1.0) == math.inf
    assert failure_delay(random.Random(1), 5.0, 0, 1.0) == math.inf
    a, b = failure_delay(random.Random(1), 5.0, 10, 1.0), failure_delay(random.Random(1), 5.0, 10, 1.0)
    assert a == b and 0 < a < math.inf
    assert failure_delay(random.Random(1), 5.0, 10, 10.0) == pytest.approx(a / 10)


def test_injector_plans_repairs_scaled_and_picks_victims_reproducibly():
    first, second = FailureInjector(random.Random(3), 1.0, 60.0, 2.0), FailureInjector(random.Random(3), 1.0, 60.0, 2.0)
    assert [first.pick_victim(["b", "a", "c"]) for _ in range(5)] == \
        [second.pick_victim(["c", "b", "a"]) for _ in range(5)]
    first.plan_repair("a", 100.0)
    assert first.next_event_at() == 130.0
    assert first.due_repairs(129.0) == [] and first.due_repairs(130.0) == ["a"]
    never = FailureInjector(random.Random(3), 0.0, 0.0)
    never.plan_repair("a", 0.0)
    never.plan_next_failure(0.0, 10)
    assert never.next_event_at() == math.inf

