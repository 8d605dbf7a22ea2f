"""What the schedulers keep or check quickly per decision: ``checked_tasks`` (set operations for
the usual list, the exact error otherwise) and ``HostMemo`` (a job's host lookup across decisions)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_sched_indexes import TrackingView
from viewlib import DictView, job, machine

from schedulers.base import checked_tasks
from schedulers.free_index import FreeIndex
from schedulers.placement_cache import HostMemo


def _entry_with_one_placed():
    view = DictView([machine("m")])
    view.add_job(job("j", tasks=4))
    view.place("j", 1, "m")
    return view.job("j")


def test_checked_tasks_accepts_distinct_pending_tasks_in_their_order():
    view = DictView()
    entry = view.add_job(job("j", tasks=5))
    assert checked_tasks(entry, (4, 0, 2)) == [4, 0, 2]
    assert checked_tasks(entry, []) == []
    partly = _entry_with_one_placed()
    assert checked_tasks(partly, [3, 0, 2]) == [3, 0, 2]
    assert checked_tasks(partly, [0, 2, 3]) == [0, 2, 3]
    assert checked_tasks(entry, range(5)) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("tasks, message", [
    ([0, 4], "task index 4 out of range 0..3"),
    ([-1], "task index -1 out of range"),
    ([True], "task index True out of range"),
    ([0.0], "task index 0.0 out of range"),
    ([0, 1], r"task 1 is not pending \(state 'a'\)"),
    ([1], r"task 1 is not pending \(state 'a'\)"),
    ([3, 1, 2], r"task 1 is not pending \(state 'a'\)"),
    ([2, 0, 2], "task 2 listed twice"),
    ([0, 2, 2], "task 2 listed twice"),
    ([2, 3, 4], "task index 4 out of range 0..3"),
    ([-1, 0, 2], "task index -1 out of range"),
])
def test_checked_tasks_names_the_first_bad_task(tasks, message):
    with pytest.raises(ValueError, match=message):
        checked_tasks(_entry_with_one_placed(), tasks)


def test_checked_tasks_refuses_tasks_of_a_killed_job():
    view = DictView()
    entry = view.add_job(job("j", tasks=2))
    killed = dataclasses.replace(entry, record=dataclasses.replace(entry.record, killed=True))
    with pytest.raises(ValueError, match=r"task 0 is not pending \(killed job\)"):
        checked_tasks(killed, [0])


def test_host_memo_reuses_a_lookup_while_tasks_per_machine_and_basis_hold():
    memo, calls = HostMemo(smallest=2), []

    def look_up(placed):
        calls.append(dict(placed))
        return sorted(placed)

    placed = {"a": 1, "b": 2}
    first = memo.get("j", placed, 0, look_up)
    assert memo.get("j", {"b": 2, "a": 1}, 0, look_up) is first  # same counts, other order
    assert len(calls) == 1
    placed["c"] = 1  # the job gained a host: looked up again (and the memo kept a copy)
    assert memo.get("j", placed, 0, look_up) == ["a", "b", "c"]
    assert memo.get("j", placed, 1, look_up) == ["a", "b", "c"]  # another basis
    assert memo.get("j", {"a": 1, "b": 2, "c": 2}, 1, look_up) == ["a", "b", "c"]
    assert len(calls) == 4
    assert memo.get("k", {"a": 1}, 1, look_up) == ["a"]  # too small to keep
    assert memo.get("k", {"a": 1}, 1, look_up) == ["a"]
    assert len(calls) == 6


def test_host_memo_trusts_a_kept_stamp_and_compares_without_one():
    memo, calls = HostMemo(smallest=2), []

    def look_up(placed):
        calls.append(dict(placed))
        return sorted(placed)

    assert memo.get("j", {"a": 1, "b": 2}, 0, look_up, stamp=7) == ["a", "b"]
    assert memo.get("j", {"a": 1, "b": 2, "c": 1}, 0, look_up, stamp=7) == ["a", "b"]  # the stamp says equal
    assert len(calls) == 1
    assert memo.get("j", {"a": 1, "b": 2, "c": 1}, 0, look_up, stamp=8) == ["a", "b", "c"]  # another stamp: compared
    assert memo.get("j", {"a": 1, "b": 2, "c": 1}, 0, look_up) == ["a", "b", "c"]  # none: compared, equal
    assert memo.get("j", {"a": 1, "b": 2}, 1, look_up, stamp=8) == ["a", "b"]  # another basis
    assert len(calls) == 3


def test_host_memo_looks_up_only_the_machines_a_placement_gained():
    memo, looked = HostMemo(smallest=2), []

    def look_up(placed):
        looked.append(list(placed))
        return list(placed)

    def join(first, second):
        return first + second

    memo.get("j", {"a": 1, "b": 1}, 0, look_up, join)
    assert memo.get("j", {"a": 1, "b": 1, "c": 2}, 0, look_up, join) == ["a", "b", "c"]
    assert looked[-1] == ["c"]  # only the new machine
    assert memo.get("j", {"a": 1, "b": 2, "c": 2, "d": 1}, 0, look_up, join) == ["a", "b", "c", "d"]
    assert looked[-1] == ["a", "b", "c", "d"]  # a count changed: looked up anew
    assert memo.get("j", {"e": 1, "a": 1, "b": 2, "c": 2, "d": 1}, 0, look_up, join) == ["e", "a", "b", "c", "d"]
    assert looked[-1] == ["e", "a", "b", "c", "d"]  # the new machine is not last: looked up anew


def test_free_index_hosts_without_room_from_a_kept_lookup():
    view = TrackingView([machine(f"m{i}", cpu=100 * (i + 1)) for i in range(4)])
    index = FreeIndex(view, ["m3", "m1", "m0", "m2"])
    placed = {"m0": 1, "m2": 2, "m3": 1, "gone": 3, "m1": 0}
    at, tasks = index.hosts(placed)
    assert at.tolist() == [2, 3, 0] and tasks.tolist() == [1, 2, 1]
    request = dataclasses.replace(view.machine("m0").machine.capacity, cpu=350)
    expected = [(1, [2]), (2, [3])]  # m3 has room for 350 cpu; m0 and m2 do not
    assert index.hosts_without_room(request, placed) == expected
    assert index.hosts_without_room(request, placed, (at, tasks)) == expected
    assert isinstance(at, np.ndarray)
    joined = index.join_hosts(index.hosts({"m0": 1}), index.hosts({"m2": 2, "m3": 1}))
    assert [a.tolist() for a in joined] == [[2, 3, 0], [1, 2, 1]]


def _lists(index):
    return {(zone, caps): (list(listed), listed.free[:len(listed)].tolist())
            for zone in index.zones for caps, listed in zip(index.zones[zone], index.lists_of(zone))}


@pytest.mark.parametrize("commit", [False, True])
def test_reserved_machines_are_back_at_their_ledger_place_after_the_next_sync(commit):
    from cellstate.model import JobKind
    from schedulers.service.scheduler import ServiceScheduler
    from schedulers.service.index import MachineIndex

    view = TrackingView([machine(f"m{i}", zone=f"z{i % 2}", cpu=1000 + 100 * i) for i in range(12)])
    sched = ServiceScheduler("s")
    entry = view.add_job(job("j", tasks=5, cpu=300, kind=JobKind.SERVICE))
    decision = sched.decide(entry, [0, 1, 2, 3, 4], view)
    assert len(decision.claims) == 5
    if commit:  # the claims land on the view: those machines are re-listed from it
        for claim in decision.claims[:3]:
            view.place("j", claim.task_index, claim.machine_id)
    sched.index.sync(view)
    fresh = MachineIndex(sched.chain.resources, sched.chain.accept)
    fresh.sync(view)
    assert _lists(sched.index) == _lists(fresh)
