"""The incremental fair order (``omega.fair_index.FairIndex``) and ``JobQueue.select_tracked``
against their references, ``fair_order`` and ``JobQueue.select``, on random job sets and changes."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cellstate.model import Job, JobKind, JobRecord
from cellstate.resources import Resources
from omega.drf import DrfOrder
from omega.fair_index import FairIndex
from cellstate.plan import JobEntry
from omega.queue import JobQueue, fair_order



def entry(job_id, owner="a", priority=0, submitted=0.0, tasks=1, revision=1):
    job = Job(id=job_id, kind=JobKind.BATCH, tasks=tasks, request=Resources(100, 100), priority=priority, owner=owner)
    return JobEntry(JobRecord.new(job, submitted), mod_revision=revision)


def random_entry(rng: random.Random, job_id: str, revision: int = 1) -> JobEntry:
    """Few owners, priorities and submission times, so ties (and their tie-breaks) are common."""
    return entry(job_id, owner=f"o{rng.randrange(5)}", priority=rng.choice((0, 0, 1, 9)),
                 submitted=float(rng.randrange(8)) / 2, tasks=rng.randrange(1, 4), revision=revision)


def random_changes(rng: random.Random, steps: int):
    """(op, entry or id) steps: add, update (maybe a new priority/owner/time), remove, hide (and
    often put back later)."""
    live: dict[str, JobEntry] = {}
    away: dict[str, JobEntry] = {}  # hidden, to be put back
    serial = 0
    for _ in range(steps):
        op = rng.random()
        if op < 0.5 or not live:
            serial += 1
            job_id = f"j{serial:03d}"
            live[job_id] = random_entry(rng, job_id)
            yield "put", live[job_id]
        elif op < 0.75:
            job_id = rng.choice(sorted(live))
            live[job_id] = random_entry(rng, job_id, live[job_id].mod_revision + 1) if rng.random() < 0.5 else \
                JobEntry(live[job_id].record, live[job_id].mod_revision + 1)
            yield "put", live[job_id]
        elif op < 0.85:
            job_id = rng.choice(sorted(live))
            del live[job_id]
            yield "discard", job_id
        else:  # out for now: back later with the same entry, most of the time
            job_id = rng.choice(sorted(live))
            held = live.pop(job_id)
            yield "hide", job_id
            if rng.random() < 0.7:
                away[job_id] = held
        if away and rng.random() < 0.3:
            job_id = rng.choice(sorted(away))
            live[job_id] = away.pop(job_id)
            yield "put", live[job_id]
        elif away and rng.random() < 0.1:  # gone while out
            job_id = rng.choice(sorted(away))
            del away[job_id]
            yield "discard", job_id


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(1, 300))
def test_fair_index_iterates_exactly_like_fair_order(seed, steps):
    rng = random.Random(seed)
    index, live = FairIndex(), {}
    for op, arg in random_changes(rng, steps):
        if op == "put":
            index.put(arg)
            live[arg.id] = arg
        elif op == "discard":
            index.discard(arg)
            live.pop(arg, None)
        else:
            index.hide(arg)
            live.pop(arg, None)
        expected = [e.id for e in fair_order(list(live.values()))]
        if rng.random() < 0.5:  # a walk that stops early (hidden jobs beyond it stay)
            ordered = list(itertools.islice(index, rng.randrange(4)))
            expected = expected[:len(ordered)]
        else:
            ordered = list(index)
        assert [e.id for e in ordered] == expected
        assert all(e is live[e.id] for e in ordered)  # the latest entry of each job
        assert len(index) == len(live) and all(job_id in index for job_id in live)


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(1, 300))
def test_fair_index_walked_now_and_then_iterates_like_fair_order(seed, steps):
    """Many changes between walks: jobs are added, updated, hidden and discarded, and hidden
    ones pile up in the owners' lists until a walk meets them."""
    rng = random.Random(seed)
    index, live = FairIndex(), {}
    for op, arg in random_changes(rng, steps):
        if op == "put":
            index.put(arg)
            live[arg.id] = arg
        else:
            getattr(index, op)(arg)
            live.pop(arg, None)
        if rng.random() < 0.1:
            assert [e.id for e in index] == [e.id for e in fair_order(list(live.values()))]
    assert [e.id for e in index] == [e.id for e in fair_order(list(live.values()))]
    assert len(index) == len(live)


@pytest.mark.parametrize("crew", [["s1"], ["s1", "s2", "s3"]], ids=["alone", "three-peers"])
@pytest.mark.parametrize("seed", range(30))
def test_select_tracked_chooses_like_select(crew, seed):
    """Random jobs, changes, deferrals, resets and clocks: the tracked queue chooses what
    ``select`` chooses from the same jobs, and its steal and ready times match."""
    rng = random.Random(seed)
    reference, tracked = JobQueue("s1"), JobQueue("s1")
    live: dict[str, JobEntry] = {}
    now = 0.0
    for op, arg in random_changes(rng, 150):
        now += rng.choice((0.0, 0.05, 0.3, 1.0))
        if op == "put":
            live[arg.id] = arg
            tracked.track(arg)
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
        elif roll < 0.4 and live:
            job_id = rng.choice(sorted(live))
            reference.reset(job_id)
            tracked.reset(job_id)
        limit = rng.choice((1, 4, 16))
        expected = reference.select(list(live.values()), crew, now, limit)
        assert [e.id for e in tracked.select_tracked(crew, now, limit)] == [e.id for e in expected]
        assert tracked.next_ready_at() == reference.next_ready_at() == min(reference._not_before.values(), default=None)
        assert tracked.has_deferred() == bool(reference._not_before)
        steal = [e.record.submitted_at + 2.0 for e in live.values() if e.record.submitted_at + 2.0 > now]
        assert tracked.next_steal_at(now) == (min(steal) if steal else None)
        assert dict(tracked.tracked()) == live


class EmptyCell:
    """A view with no machines: every owner's dominant share is 0 (DRF falls back to its tie-breaks)."""

    def machines(self):
        return []


def test_select_tracked_with_the_drf_order_arranges_like_select():
    view = EmptyCell()
    rng = random.Random(7)
    jobs = [random_entry(rng, f"j{i:02d}") for i in range(40)]
    reference, tracked = JobQueue("s1", order=DrfOrder(view)), JobQueue("s1", order=DrfOrder(view))
    for job in jobs:
        tracked.track(job)
    tracked.defer("j03", 0.0)
    reference.defer("j03", 0.0)
    assert [e.id for e in tracked.select_tracked([], 0.1, 40)] == [e.id for e in reference.select(jobs, [], 0.1, 40)]
    assert "j03" not in {e.id for e in tracked.select_tracked([], 0.1, 40)}


def test_a_hidden_job_that_goes_away_leaves_nothing_behind():
    index = FairIndex()
    for job in (entry("a", submitted=1.0), entry("b", submitted=2.0)):
        index.put(job)
    index.hide("a")
    index.discard("a")
    assert "a" not in index and len(index) == 1
    assert set(index._entries) == {"b"}  # not only hidden: removed
    assert [e.id for e in index] == ["b"]
