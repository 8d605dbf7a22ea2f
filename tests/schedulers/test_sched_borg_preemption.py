"""Preemption: victim choice (fewest, then lowest priorities), the scheduler's preemption
pass, and that victims are never of equal or higher priority."""

from __future__ import annotations

import pytest
from borglib import PriorityView, assert_fits
from viewlib import job, machine

from cellstate.model import Alloc
from cellstate.resources import Resources
from schedulers.chains import make_scheduler
from schedulers.preemption import EXACT_LIMIT, choose_victims, cost, preemptible


def alloc(name: str, cpu: int, priority: int, memory: int = 0) -> Alloc:
    return Alloc(name, 0, "m", Resources.of(cpu, memory), priority)


VICTIMS = [
    # request cpu, free cpu, candidates (name, cpu, priority), expected victim names
    (1000, 1000, [("a", 500, 0)], []),
    (1000, 0, [("a", 500, 0)], None),
    (1000, 0, [("a", 1000, 5), ("b", 500, 0), ("c", 500, 0)], ["a"]),
    (1000, 0, [("a", 1000, 5), ("b", 1000, 2)], ["b"]),
    (1000, 500, [("a", 500, 5), ("b", 400, 0), ("c", 400, 1)], ["a"]),
    (1000, 200, [("a", 400, 3), ("b", 400, 1), ("c", 400, 2)], ["b", "c"]),
    (1000, 0, [(f"s{i}", 100, i % 3) for i in range(12)] + [("big", 1000, 8)], ["big"]),
    (1000, 0, [(f"s{i}", 250, i % 3) for i in range(12)], ["s0", "s3", "s6", "s9"]),
]


@pytest.mark.parametrize("req,free,cands,want", VICTIMS,
                         ids=["fits-already", "not-enough", "one-big-beats-two-small", "lower-priority",
                              "fewest-even-if-higher", "two-lowest-of-three", "greedy-fewest", "greedy-lowest"])
def test_choose_victims(req, free, cands, want):
    candidates = [alloc(*c) for c in cands]
    got = choose_victims(Resources.of(req), Resources.of(free), candidates)
    assert (None if got is None else sorted(a.job_id for a in got)) == (None if want is None else sorted(want))


def test_exact_limit_switches_to_greedy():
    assert len(VICTIMS[6][2]) > EXACT_LIMIT and len(VICTIMS[5][2]) <= EXACT_LIMIT


def test_cost_orders_count_then_priorities():
    one_high, two_low = [alloc("a", 1, 9)], [alloc("b", 1, 0), alloc("c", 1, 0)]
    assert cost(one_high) < cost(two_low)
    assert cost([alloc("a", 1, 1), alloc("b", 1, 5)]) < cost([alloc("a", 1, 2), alloc("b", 1, 5)])


def test_preemptible_excludes_equal_higher_own_and_evicted():
    allocs = [alloc("low", 1, 1), alloc("same", 1, 5), alloc("high", 1, 7), alloc("own", 1, 0),
              Alloc("gone", 0, "m", Resources.of(1), 0)]
    got = preemptible(allocs, 5, "own", {("gone", 0)})
    assert [a.job_id for a in got] == ["low"]


def _full_cell() -> PriorityView:
    """m0 holds one priority-1 task of 3000 cpu; m1 three priority-0 tasks of 1000;
    m2 one priority-6 task of 3000 (4000 cpu each: 1000 free everywhere)."""
    view = PriorityView([machine(f"m{i}", cpu=4000, memory=8192) for i in range(3)])
    for jid, prio, cpu, where in (("big", 1, 3000, ["m0"]), ("small", 0, 1000, ["m1", "m1", "m1"]),
                                  ("prod", 6, 3000, ["m2"])):
        view.add_job(job(jid, tasks=len(where), cpu=cpu, memory=100, priority=prio))
        for task, m in enumerate(where):
            view.place(jid, task, m)
    return view


@pytest.mark.parametrize("priority,tasks,want", [
    (5, 1, [("m0", (("big", 0),))]),
    (1, 1, [("m1", (("small", 0), ("small", 1)))]),
    (5, 2, [("m0", (("big", 0),)), ("m1", (("small", 0), ("small", 1)))]),
    (9, 3, [("m0", (("big", 0),)), ("m2", (("prod", 0),)), ("m1", (("small", 0), ("small", 1)))]),
], ids=["fewest-victims", "only-lower-priority", "second-task-next-cheapest", "higher-victim-when-needed"])
def test_scheduler_preempts_cheapest(priority, tasks, want):
    view = _full_cell()
    entry = view.add_job(job("new", tasks=tasks, cpu=2500, memory=100, priority=priority))
    decision = make_scheduler("borg", "b", 1).decide(entry, list(range(tasks)), view)
    assert [(c.machine_id, c.evicts) for c in decision.claims] == want
    assert_fits(view, "new", decision)


def test_freed_room_is_used_without_more_victims():
    """Evicting the one 4000-cpu task frees room for both 2000-cpu tasks: one eviction only."""
    view = PriorityView([machine("m0", cpu=4000, memory=8192)])
    view.add_job(job("big", tasks=1, cpu=4000, memory=100, priority=1))
    view.place("big", 0, "m0")
    entry = view.add_job(job("new", tasks=2, cpu=2000, memory=100, priority=5))
    decision = make_scheduler("borg", "b", 1).decide(entry, [0, 1], view)
    assert [(c.machine_id, c.evicts) for c in decision.claims] == [("m0", (("big", 0),)), ("m0", ())]


@pytest.mark.parametrize("config,priority", [({"preemption": False}, 9), ({}, 0)],
                         ids=["preemption-off", "nothing-lower"])
def test_no_preemption_leaves_task_pending(config, priority):
    view = _full_cell()
    entry = view.add_job(job("new", tasks=1, cpu=2500, memory=100, priority=priority))
    decision = make_scheduler("borg", "b", 1, config).decide(entry, [0], view)
    assert not decision.claims
    assert decision.unplaced[0].startswith("no machine fits: resources_fit: cpu")
