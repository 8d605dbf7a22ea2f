"""BorgScheduler: placement, the three tricks (each switchable; equal decisions where the
tricks promise it), the score cache's exact invalidation (hypothesis) and config."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from borglib import PriorityView, assert_fits
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from viewlib import job, machine

from cellstate.model import Constraint, ConstraintOp, JobKind, MachineState
from cellstate.resources import Resources
from schedulers.borg.scheduler import WALK_STARTS, BorgScheduler
from schedulers.chain_config import ChainConfig, PluginSpec
from schedulers.chains import make_scheduler
from schedulers.plugin import PluginConfigError

OFF = dict(equivalence_classes=False, score_cache=False, relaxed_randomization=False)
TRICKS = {
    "all-on": {},
    "no-classes": dict(equivalence_classes=False),
    "no-cache": dict(score_cache=False),
    "no-randomization": dict(relaxed_randomization=False),
    "all-off": OFF,
}


def cell(n: int = 30, zones: int = 3) -> PriorityView:
    return PriorityView([machine(f"m{i:02d}", zone=f"z{i % zones}", rack=f"r{i % 6}", cpu=4000, memory=8192)
                         for i in range(n)])


@pytest.mark.parametrize("config", TRICKS.values(), ids=TRICKS.keys())
def test_places_every_task_within_capacity(config):
    view = cell()
    view.add_job(job("a", tasks=60, cpu=1000, memory=1000))
    sched = make_scheduler("borg", "b", 7, config)
    decision = sched.decide(view.job("a"), list(range(60)), view)
    assert len(decision.claims) == 60 and not decision.unplaced
    assert_fits(view, "a", decision)


@pytest.mark.parametrize("config", TRICKS.values(), ids=TRICKS.keys())
def test_unplaceable_tasks_get_the_reason(config):
    view = cell(4)
    view.add_job(job("a", tasks=20, cpu=3000, memory=100))
    decision = make_scheduler("borg", "b", 1, config).decide(view.job("a"), list(range(20)), view)
    assert len(decision.claims) == 4
    assert set(decision.unplaced) == set(range(4, 20))
    assert "resources_fit: cpu (4 machines)" in decision.unplaced[19]


def test_constraints_and_machine_state_respected():
    view = cell(12)
    view.add_machine(replace(view.machine("m00").machine, state=MachineState.DOWN))
    only_z0 = (Constraint("zone", ConstraintOp.EQ, ("z0",)),)
    view.add_job(job("a", tasks=5, constraints=only_z0))
    decision = make_scheduler("borg", "b", 1).decide(view.job("a"), list(range(5)), view)
    used = {c.machine_id for c in decision.claims}
    assert used and all(view.machine(m).machine.zone == "z0" for m in used) and "m00" not in used


def test_relaxed_randomization_examines_about_k_machines():
    view = cell(200)
    view.add_job(job("a", tasks=1))
    sched = make_scheduler("borg", "b", 1, {"k": 10})
    sched.decide(view.job("a"), [0], view)
    assert sched.counters.evaluations == 10
    full = make_scheduler("borg", "b", 1, {"relaxed_randomization": False})
    full.decide(view.job("a"), [0], view)
    assert full.counters.evaluations == 200


def test_classes_share_one_walk_across_tasks():
    view = cell(100)
    view.add_job(job("a", tasks=20, cpu=100, memory=100))
    shared = make_scheduler("borg", "b", 1, {"relaxed_randomization": False, "score_cache": False})
    alone = make_scheduler("borg", "b", 1, {"relaxed_randomization": False, "score_cache": False,
                                             "equivalence_classes": False})
    for sched in (shared, alone):
        sched.decide(view.job("a"), list(range(20)), view)
    assert shared.counters.evaluations == 100 + 19  # one scan, then the reserved machine again per next task
    assert alone.counters.evaluations == 20 * 100


def test_cache_serves_a_second_job_of_the_same_class():
    view = cell(50)
    for jid in ("a", "b"):
        view.add_job(job(jid, tasks=1, cpu=100, memory=100))
    view.add_job(job("c", tasks=1, cpu=200, memory=100))
    sched = make_scheduler("borg", "b", 1, {"relaxed_randomization": False})
    sched.decide(view.job("a"), [0], view)
    sched.decide(view.job("b"), [0], view)
    assert sched.counters.cache_hits == 50
    sched.decide(view.job("c"), [0], view)  # another request: another class
    assert sched.counters.cache_hits == 50


def test_unsigned_chain_turns_classes_and_cache_off():
    chain = ChainConfig((PluginSpec("resources_fit"),), (PluginSpec("domain_spread"), PluginSpec("best_fit")))
    sched = make_scheduler("borg", "b", 1, {"chain": chain})
    assert sched.tricks == {"equivalence_classes": False, "score_cache": False,
                            "relaxed_randomization": True, "preemption": True}


def test_domain_spread_chain_spreads_over_racks():
    chain = ChainConfig((PluginSpec("resources_fit"),), (PluginSpec("domain_spread"),))
    view = cell(12)
    view.add_job(job("a", tasks=6))
    sched = make_scheduler("borg", "b", 1, {"chain": chain, "relaxed_randomization": False})
    decision = sched.decide(view.job("a"), list(range(6)), view)
    assert len({view.machine(c.machine_id).machine.rack for c in decision.claims}) == 6


@pytest.mark.parametrize("config,message", [
    ({"k": 0}, "k must be an int >= 1"),
    ({"score_cache": "yes"}, "score_cache must be a bool"),
    ({"serves": "batch"}, "serves must be a non-empty list"),
    ({"serves": ["batch", "web"]}, "unknown job kind"),
    ({"cache_entries": 0}, "max_entries must be an int >= 1"),
    ({"plugins": {"best_fit": {}}}, "not plugins"),
    ({"prove": 1}, "prove must be a bool"),
], ids=["k", "cache-flag", "serves-str", "serves-kind", "cache-bound", "plugins", "prove"])
def test_bad_config(config, message):
    with pytest.raises(ValueError, match=message):
        make_scheduler("borg", "b", 1, config)


def test_serves():
    assert make_scheduler("borg", "b", 1).serves == (JobKind.BATCH, JobKind.SERVICE)
    assert make_scheduler("borg", "b", 1, {"serves": ["service"]}).serves == (JobKind.SERVICE,)
    assert issubclass(PluginConfigError, ValueError)


# -- the cache's exact invalidation ------------------------------------------------------

REQUESTS = [Resources.of(500, 1000), Resources.of(1000, 500), Resources.of(1500, 3000)]
change = st.tuples(st.integers(0, 9), st.sampled_from(["load", "unload", "down", "up", "zone", "full"]),
                   st.integers(1, 4))
step = st.one_of(st.tuples(st.just("decide"), st.integers(0, len(REQUESTS) - 1), st.integers(1, 8)),
                 st.tuples(st.just("change"), change))


def _changed(m, what: str, amount: int):
    if what == "load":
        return m.with_claim(Resources.of(300 * amount, 600 * amount)) if \
            Resources.of(300 * amount, 600 * amount).fits_in(m.free) else m
    if what == "unload":
        return replace(m, allocated=Resources(), task_count=0)
    if what == "full":
        return replace(m, allocated=m.capacity, task_count=1)
    if what == "zone":
        return replace(m, zone=f"z{amount % 2}")
    return replace(m, state=MachineState.DOWN if what == "down" else MachineState.UP)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(step, min_size=1, max_size=25), relaxed=st.booleans(), seed=st.integers(0, 3),
       walk=st.sampled_from(WALK_STARTS))
def test_cached_decisions_equal_fresh_ones_after_any_machine_change(steps, relaxed, seed, walk):
    """A scheduler with classes and the cache decides exactly as one without the cache,
    whatever changed on the machines in between (the key includes mod_revision), with
    every walk (the packed walk's load index re-keys the changed machines alike)."""
    view = PriorityView([machine(f"m{i}", zone=f"z{i % 2}", cpu=4000, memory=8192) for i in range(10)])
    only_z0 = (Constraint("zone", ConstraintOp.EQ, ("z0",)),)
    cached = BorgScheduler("c", random.Random(seed), relaxed_randomization=relaxed, k=3, walk_start=walk)
    fresh = BorgScheduler("f", random.Random(seed), relaxed_randomization=relaxed, k=3, score_cache=False,
                          walk_start=walk)
    for n, (kind, *rest) in enumerate(steps):
        if kind == "change":
            index, what, amount = rest[0]
            view.add_machine(_changed(view.machine(f"m{index}").machine, what, amount))
            continue
        request, tasks = REQUESTS[rest[0]], rest[1]
        spec = replace(job(f"j{n}", tasks=tasks), request=request, constraints=only_z0 if n % 3 == 0 else ())
        entry = view.add_job(spec)
        got = cached.decide(entry, list(range(tasks)), view)
        want = fresh.decide(entry, list(range(tasks)), view)
        assert (got.claims, got.unplaced) == (want.claims, want.unplaced)
        assert_fits(view, spec.id, got)
        view.apply(spec.id, got)
    assert cached.counters.evaluations == fresh.counters.evaluations


def test_classes_on_and_off_agree_with_a_full_scan():
    """Without randomization the best machine is the same with or without classes and cache."""
    rng = random.Random(5)
    view = PriorityView([machine(f"m{i:02d}", cpu=rng.choice((2000, 4000, 8000)), memory=rng.choice((4096, 8192)))
                         for i in range(40)])
    configs = [dict(OFF), dict(relaxed_randomization=False), dict(OFF, score_cache=True)]
    scheds = [make_scheduler("borg", "b", 1, c) for c in configs]
    for n in range(30):
        spec = job(f"j{n}", tasks=rng.randint(1, 6), cpu=rng.choice((250, 500, 1500)), memory=rng.choice((256, 2048)))
        entry = view.add_job(spec)
        decisions = [s.decide(entry, list(range(spec.tasks)), view) for s in scheds]
        assert all((d.claims, d.unplaced) == (decisions[0].claims, decisions[0].unplaced) for d in decisions)
        view.apply(spec.id, decisions[0])


@pytest.mark.parametrize("start", ["first", "random", "sticky", "packed"])
def test_walk_start(start):
    """``first`` walks the seeded permutation from its start every decision and ``packed``
    the fullest fitting machines first, so consecutive one-task jobs pack onto the same
    machine; every start is deterministic per seed."""
    def used(seed):
        view = cell(40)
        sched = make_scheduler("borg", "b", seed, {"k": 1, "walk_start": start, "relaxed_randomization": True})
        out = []
        for n in range(4):
            entry = view.add_job(job(f"j{n}", tasks=1, cpu=100, memory=100))
            decision = sched.decide(entry, [0], view)
            view.apply(entry.id, decision)
            out.append(decision.claims[0].machine_id)
        return out
    first_run = used(3)
    assert used(3) == first_run
    if start in ("first", "packed"):
        assert len(set(first_run)) == 1
    with pytest.raises(ValueError, match="walk_start"):
        make_scheduler("borg", "b", 1, {"walk_start": "middle"})
