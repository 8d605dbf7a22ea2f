"""The load index of the Borg scheduler's packed walk: pruning never hides a machine that
fits, the best-fitting buckets come first, changes are re-keyed, and the scheduler falls
back to the full walk when the index (stale) finds nothing."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from borglib import PriorityView
from viewlib import job, machine

from cellstate.model import MachineState
from cellstate.resources import Resources
from schedulers.borg.scheduler import BorgScheduler
from schedulers.borg.index import LoadIndex
from schedulers.chain_config import ChainConfig, PluginSpec
from schedulers.chains import make_scheduler


def _cell(seed: int, n: int = 60) -> PriorityView:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        cpu, memory = rng.choice([(4000, 8192), (8000, 8192), (2000, 16384)])
        used = Resources.of(rng.randint(0, cpu), rng.randint(0, memory))
        out.append(machine(f"m{i:02d}", cpu=cpu, memory=memory, allocated=used))
    return PriorityView(out)


@pytest.mark.parametrize("seed,steps", [(0, 16), (1, 4), (2, 1), (3, 64)], ids=["16", "4", "1", "64"])
def test_walk_yields_every_machine_that_fits_and_each_once(seed, steps):
    view = _cell(seed)
    ids = sorted(e.id for e in view.machines())
    index = LoadIndex(ids, view, steps=steps)
    for cpu, memory in [(0, 0), (1, 1), (500, 500), (1999, 4000), (4000, 100), (100, 9000), (9000, 1)]:
        walked = list(index.walk(Resources.of(cpu, memory)))
        fits = {e.id for e in view.machines() if Resources.of(cpu, memory).fits_in(e.machine.free)}
        assert len(walked) == len(set(walked))
        assert fits <= set(walked), f"pruned a machine that fits {cpu, memory}"


@pytest.mark.parametrize("used,request_,first", [
    ({"half": (2000, 4096), "empty": (0, 0)}, (500, 1024), "half"),
    ({"tight": (3000, 6144), "loose": (1000, 2048)}, (1000, 2048), "tight"),
    ({"cpu-heavy": (3500, 1024), "even": (2000, 4096)}, (200, 400), "even"),
    ({"full": (4000, 8192), "empty": (0, 0)}, (1, 1), "empty"),
], ids=["loaded-before-empty", "tight-fit-first", "no-stranding-first", "full-skipped"])
def test_best_estimated_bucket_first(used, request_, first):
    view = PriorityView([machine(name, allocated=Resources.of(*u)) for name, u in used.items()])
    index = LoadIndex(sorted(used), view)
    assert next(index.walk(Resources.of(*request_))) == first


def test_update_rekeys_and_drops_and_sweep_finds_changes():
    view = PriorityView([machine(f"m{i}") for i in range(8)])
    index = LoadIndex([f"m{i}" for i in range(8)], view, sweep=2)
    big = Resources.of(3000, 6000)
    assert len(list(index.walk(big))) == 8
    full = view.add_machine(replace(view.machine("m3").machine, allocated=Resources.of(4000, 8192)))
    assert len(list(index.walk(big))) == 8  # not told yet
    for _ in range(4):  # 8 machines / sweep 2
        index.refresh(view, ())
    assert "m3" not in list(index.walk(big)) and index.revision_of("m3") == full.mod_revision
    index.update("m5", None)
    assert "m5" not in list(index.walk(Resources.of(1, 1))) and len(index) == 7


@pytest.mark.parametrize("config,message", [
    ({"steps": 0}, "steps must be an int >= 1"),
    ({"sweep": -1}, "sweep must be an int >= 0"),
], ids=["steps", "sweep"])
def test_bad_index_args(config, message):
    with pytest.raises(ValueError, match=message):
        LoadIndex([], PriorityView(), **config)


def test_packed_walk_packs_consecutive_jobs_and_is_seeded():
    def used(seed):
        view = PriorityView([machine(f"m{i:02d}") for i in range(40)])
        sched = make_scheduler("borg", "b", seed, {"k": 5})
        out = []
        for n in range(6):
            entry = view.add_job(job(f"j{n}", tasks=2, cpu=300, memory=600))
            decision = sched.decide(entry, [0, 1], view)
            view.apply(entry.id, decision)
            out += [c.machine_id for c in decision.claims]
        return out
    assert used(4) == used(4)
    assert len(set(used(4))) == 1  # 12 x (300, 600) fit on one 4000/8192 machine


def test_stale_index_falls_back_to_the_full_walk():
    """A machine freed by someone else while the index still files it as full is found by
    the full walk when the index walk finds nothing; then the index learns of it."""
    view = PriorityView([machine(f"m{i}", allocated=Resources.of(4000, 8192)) for i in range(6)])
    sched = BorgScheduler("b", random.Random(1), k=3, sweep=0, preemption=False)
    view.add_job(job("a", tasks=1))
    assert not sched.decide(view.job("a"), [0], view).claims  # builds the index: all full
    view.add_machine(replace(view.machine("m4").machine, allocated=Resources()))
    entry = view.add_job(job("b", tasks=2))
    decision = sched.decide(entry, [0, 1], view)
    assert [c.machine_id for c in decision.claims] == ["m4", "m4"]
    assert sched.index.revision_of("m4") != view.machine("m4").mod_revision  # learnt next decision
    view.apply(entry.id, decision)
    evaluations = sched.counters.evaluations
    entry = view.add_job(job("c", tasks=1))
    assert [c.machine_id for c in sched.decide(entry, [0], view).claims] == ["m4"]
    assert sched.index.revision_of("m4") == view.machine("m4").mod_revision
    assert sched.counters.evaluations == evaluations + 1  # the index walk: m4 alone
    assert sched.tricks["relaxed_randomization"] and sched.walk_start == "packed"


def test_index_only_for_the_packed_randomized_walk():
    view = PriorityView([machine("m0")])
    view.add_job(job("a"))
    for config, indexed in [({}, True), ({"walk_start": "random"}, False),
                            ({"relaxed_randomization": False}, False)]:
        sched = make_scheduler("borg", "b", 1, config)
        sched.decide(view.job("a"), [0], view)
        assert (sched.index is not None) is indexed, config


@pytest.mark.parametrize("filters,walked", [
    ((PluginSpec("resources_fit"),), ["m1"]),
    ((PluginSpec("resources_fit", {"ignore": ("cpu",)}),), ["m0", "m1"]),
    ((PluginSpec("machine_state"),), ["m0", "m1"]),
], ids=["checks-cpu", "ignores-cpu", "no-resources-fit"])
def test_index_skips_only_what_the_chain_checks(filters, walked):
    """A chain that does not require free cpu may place on a machine without any."""
    view = PriorityView([machine("m0", allocated=Resources.of(4000, 0)), machine("m1")])
    chain = ChainConfig(filters, (PluginSpec("borg_hybrid"),))
    sched = make_scheduler("borg", "b", 1, {"chain": chain, "k": 5})
    sched.decide(view.add_job(job("a")), [0], view)
    assert sorted(sched.index.walk(Resources.of(100, 100))) == walked


def _mixed_cell(seed: int) -> PriorityView:
    rng = random.Random(seed)
    out = []
    for i in range(40):
        cpu, memory = rng.choice([(4000, 8192), (8000, 4096), (2000, 16384)])
        used = rng.choice([Resources(), Resources.of(cpu, 0), Resources.of(0, memory),
                           Resources.of(rng.randint(0, cpu), rng.randint(0, memory))])
        state = MachineState.DOWN if rng.random() < 0.15 else MachineState.UP
        out.append(machine(f"m{i:02d}", cpu=cpu, memory=memory, allocated=used, state=state))
    return PriorityView(out)


@pytest.mark.parametrize("seed", range(6), ids=[f"seed{s}" for s in range(6)])
def test_packed_walk_with_large_k_decides_and_explains_as_the_full_scan(seed):
    """With k above the cell size the packed walk's pool holds every feasible machine, so
    it picks the full scan's machines; when nothing fits, its exact fallback tallies the
    same reasons (down machines, different_machine, touched machines included)."""
    view = _mixed_cell(seed)
    packed = make_scheduler("borg", "p", seed, {"k": 100, "preemption": False})
    full = make_scheduler("borg", "f", seed, {"relaxed_randomization": False, "preemption": False})
    rng = random.Random(seed)
    for n in range(12):
        spec = job(f"j{n}", tasks=rng.randint(1, 8), cpu=rng.choice([100, 1500, 3000, 9000]),
                   memory=rng.choice([100, 3000, 7000, 20000]), different_machine=rng.random() < 0.5)
        entry = view.add_job(spec)
        got = packed.decide(entry, list(range(spec.tasks)), view)
        want = full.decide(entry, list(range(spec.tasks)), view)
        assert (got.claims, got.unplaced) == (want.claims, want.unplaced)
        view.apply(spec.id, got)
