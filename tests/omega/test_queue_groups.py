"""Groups in the incremental fair order: ``FairIndex.set_asleep`` and ``JobQueue.set_group_asleep``
leave whole groups out of the candidates, checked against ``fair_order`` and ``JobQueue.select``
over the jobs of the awake groups."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from omega.fair_index import FairIndex
from cellstate.plan import JobEntry
from omega.queue import ArrangedJobs, FairOrder, JobQueue, fair_order

from test_queue_tracked import entry, random_entry

GROUPS = (None, "g0", "g1", "g2")


def random_group_changes(rng: random.Random, steps: int):
    """(op, arg) steps: put (entry, group) — new jobs, updates, moves between groups —, discard,
    hide (often put back later), and sleep/wake of a group."""
    live: dict[str, tuple[JobEntry, object]] = {}
    away: dict[str, tuple[JobEntry, object]] = {}
    serial = 0
    for _ in range(steps):
        op = rng.random()
        if op < 0.4 or not live:
            serial += 1
            job_id = f"j{serial:03d}"
            live[job_id] = (random_entry(rng, job_id), rng.choice(GROUPS))
            yield "put", live[job_id]
        elif op < 0.55:
            job_id = rng.choice(sorted(live))
            held, group = live[job_id]
            if rng.random() < 0.5:
                held = random_entry(rng, job_id, held.mod_revision + 1)
            live[job_id] = (held, rng.choice(GROUPS) if rng.random() < 0.4 else group)
            yield "put", live[job_id]
        elif op < 0.65:
            job_id = rng.choice(sorted(live))
            del live[job_id]
            yield "discard", job_id
        elif op < 0.75:
            job_id = rng.choice(sorted(live))
            held = live.pop(job_id)
            yield "hide", job_id
            if rng.random() < 0.7:
                away[job_id] = held
        else:
            yield "asleep", (rng.choice(GROUPS[1:]), rng.random() < 0.5)
        if away and rng.random() < 0.3:
            job_id = rng.choice(sorted(away))
            live[job_id] = away.pop(job_id)
            yield "put", live[job_id]


def apply(index, op, arg, live, asleep):
    if op == "put":
        index.put(*arg)
        live[arg[0].id] = arg
    elif op == "asleep":
        index.set_asleep(*arg)
        (asleep.add if arg[1] else asleep.discard)(arg[0])
    else:
        getattr(index, op)(arg)
        live.pop(arg, None)


def visible(live, asleep) -> list[JobEntry]:
    return [e for e, group in live.values() if group not in asleep]


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(1, 300))
def test_fair_index_with_groups_iterates_like_fair_order_of_the_awake_jobs(seed, steps):
    rng = random.Random(seed)
    index, live, asleep = FairIndex(), {}, set()
    for op, arg in random_group_changes(rng, steps):
        apply(index, op, arg, live, asleep)
        expected = [e.id for e in fair_order(visible(live, asleep))]
        if rng.random() < 0.5:  # a walk that stops early
            ordered = list(itertools.islice(index, rng.randrange(4)))
            expected = expected[:len(ordered)]
        else:
            ordered = list(index)
        assert [e.id for e in ordered] == expected
        assert all(e is live[e.id][0] for e in ordered)
        assert len(index) == len(visible(live, asleep))
        assert all((job_id in index) == (group not in asleep) for job_id, (_, group) in live.items())


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(1, 300))
def test_fair_index_keeps_each_owner_at_its_oldest_awake_job(seed, steps):
    """Between walks, each band's turn holds every owner with an awake list at the oldest job
    of its awake lists (hidden ones not yet dropped included), so sleep and wake keep it exact."""
    rng = random.Random(seed)
    index, live, asleep = FairIndex(), {}, set()
    for op, arg in random_group_changes(rng, steps):
        apply(index, op, arg, live, asleep)
        if rng.random() < 0.3:
            list(itertools.islice(index, rng.randrange(4)))
        for band in index._bands.values():
            fronts = {owner: min(items[0][0] for group, items in lists.items() if group not in asleep)
                      for owner, lists in band.queues.items() if any(g not in asleep for g in lists)}
            assert band.heads == sorted((t, owner) for owner, t in fronts.items())
            assert band.oldest == fronts


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(1, 300))
def test_arranged_jobs_with_groups_arrange_the_awake_jobs(seed, steps):
    rng = random.Random(seed)
    index, live, asleep = ArrangedJobs(FairOrder()), {}, set()
    for op, arg in random_group_changes(rng, steps):
        apply(index, op, arg, live, asleep)
    assert [e.id for e in index] == [e.id for e in fair_order(visible(live, asleep))]


@pytest.mark.parametrize("crew", [["s1"], ["s1", "s2", "s3"]], ids=["alone", "three-peers"])
@pytest.mark.parametrize("seed", range(30))
def test_select_tracked_with_groups_chooses_like_select_over_the_awake_jobs(crew, seed):
    """Random jobs in groups, groups falling asleep and waking, deferrals, resets, clocks: the
    tracked queue chooses what ``select`` chooses from the awake jobs, and its steal time is
    the earliest among them."""
    rng = random.Random(seed)
    reference, tracked = JobQueue("s1"), JobQueue("s1")
    live: dict[str, tuple[JobEntry, object]] = {}
    asleep: set = set()
    now = 0.0
    for op, arg in random_group_changes(rng, 150):
        now += rng.choice((0.0, 0.05, 0.3, 1.0))
        if op == "put":
            live[arg[0].id] = arg
            tracked.track(*arg)
        elif op == "asleep":
            tracked.set_group_asleep(*arg)
            (asleep.add if arg[1] else asleep.discard)(arg[0])
        else:
            live.pop(arg, None)
            tracked.untrack(arg, coming_back=op == "hide")
        roll = rng.random()
        if roll < 0.25 and live:
            job_id = rng.choice(sorted(live))
            assert reference.defer(job_id, now) == tracked.defer(job_id, now)
        elif roll < 0.3:
            reference.reset()
            tracked.reset()
        limit = rng.choice((1, 4, 16))
        awake = visible(live, asleep)
        expected = reference.select(awake, crew, now, limit)
        assert [e.id for e in tracked.select_tracked(crew, now, limit)] == [e.id for e in expected]
        steal = [e.record.submitted_at + 2.0 for e in awake if e.record.submitted_at + 2.0 > now]
        assert tracked.next_steal_at(now) == (min(steal) if steal else None)
        assert {job_id: e for job_id, e in tracked.tracked().items()} == {j: e for j, (e, _) in live.items()}


def test_a_group_asleep_leaves_its_jobs_out_until_it_wakes():
    index = FairIndex()
    index.put(entry("a", submitted=1.0), "big")
    index.put(entry("b", submitted=2.0))
    index.put(entry("c", owner="o2", submitted=0.5), "big")
    index.set_asleep("big", True)
    assert [e.id for e in index] == ["b"]
    index.put(entry("d", submitted=0.1), "big")  # put in an asleep group: out too
    assert [e.id for e in index] == ["b"]
    index.set_asleep("big", False)
    assert [e.id for e in index] == ["d", "c", "a", "b"]  # owner a: d, a, b; o2: c
    with pytest.raises(ValueError, match="named group"):
        index.set_asleep(None, True)
