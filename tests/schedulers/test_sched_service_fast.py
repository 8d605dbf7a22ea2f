"""The service scheduler's indexed search makes the full scan's choices (seeded random cells),
follows the view across decisions, and steps aside for chains it is not exact for."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from viewlib import DictView, job, machine

from cellstate.model import Constraint, ConstraintOp, JobKind, MachineState
from cellstate.resources import Resources
from schedulers.service import search as service_search
from schedulers.chains import service_pipeline
from schedulers.pipeline import Pipeline
from schedulers.registry import make_filter, make_scorer
from schedulers.service.scheduler import ServiceScheduler

SERVICE = JobKind.SERVICE
CLASSES = [(4000, 8192), (8000, 16384), (4000, 4096), (16000, 65536)]


def random_cell(rng: random.Random) -> DictView:
    zones = [f"z{i}" for i in range(rng.randint(1, 5))]
    view = DictView()
    for i in range(rng.randint(5, 80)):
        cpu, memory = rng.choice(CLASSES)
        used = rng.random() * 0.95 if rng.random() < 0.8 else 0.0
        state = MachineState.UP if rng.random() < 0.9 else rng.choice([MachineState.DOWN, MachineState.DRAINING])
        view.add_machine(machine(f"m{i:03d}", zone=rng.choice(zones), cpu=cpu, memory=memory, state=state,
                                 platform=rng.choice(["x86", "arm"]),
                                 allocated=Resources.of(int(cpu * used), int(memory * used * rng.random()))))
    return view


def random_job(rng: random.Random, name: str, view: DictView):
    rules = rng.choice([{}, {}, {"different_machine": True}, {"max_per_machine": 2}, {"gang": True}])
    constraints = (Constraint("platform", ConstraintOp.EQ, ("x86",)),) if rng.random() < 0.2 else ()
    spec = job(name, tasks=rng.randint(1, 30), cpu=rng.choice([100, 500, 1500, 3000]),
               memory=rng.choice([128, 1024, 4096]), kind=SERVICE, constraints=constraints, **rules)
    view.add_job(spec)
    up = [e.id for e in view.machines()]
    for task in range(spec.tasks // 3 if rng.random() < 0.3 else 0):  # some tasks already placed
        target = rng.choice(up)
        if spec.request.fits_in(view.machine(target).machine.free):
            view.place(name, task, target)
    return view.job(name)


def spread(view: DictView, decision) -> tuple[list[int], list[int]]:
    """Sorted task counts per zone and per machine of the decision's claims."""
    zones = Counter(view.machine(c.machine_id).machine.zone for c in decision.claims)
    machines = Counter(c.machine_id for c in decision.claims)
    return sorted(zones.values()), sorted(machines.values())


@pytest.mark.parametrize("seed", range(40), ids=lambda s: f"seed{s}")
def test_indexed_search_agrees_with_the_full_scan(seed):
    rng = random.Random(seed)
    view = random_cell(rng)
    jobs = [random_job(rng, f"j{i}", view) for i in range(rng.randint(1, 4))]
    batch = [(e, e.record.pending_tasks()) for e in jobs]
    fast, full = ServiceScheduler("fast"), ServiceScheduler("full", exhaustive=True)
    assert not fast.exhaustive and full.exhaustive
    got, want = fast.decide_batch(batch, view), full.decide_batch(batch, view)
    for e in jobs:
        assert spread(view, got[e.id]) == spread(view, want[e.id])
        assert got[e.id].claims == want[e.id].claims
        assert got[e.id].unplaced == want[e.id].unplaced


@pytest.mark.parametrize("head", [0, 1, 3])
@pytest.mark.parametrize("seed", range(12), ids=lambda s: f"seed{s}")
def test_the_search_agrees_however_many_keys_it_checks_one_by_one(seed, head, monkeypatch):
    monkeypatch.setattr(service_search, "_HEAD", head)  # the rest of a list by its vector compare
    test_indexed_search_agrees_with_the_full_scan(seed)


def test_the_index_follows_the_view_between_decisions():
    view = DictView([machine(f"{z}-m{i}", zone=z) for z in "ab" for i in range(3)])
    fast, full = ServiceScheduler("fast"), ServiceScheduler("full", exhaustive=True)
    rng = random.Random(7)
    for step in range(30):
        entry = view.add_job(job(f"j{step}", tasks=rng.randint(1, 4), cpu=rng.choice([200, 900]), kind=SERVICE))
        tasks = entry.record.pending_tasks()
        got, want = fast.decide(entry, tasks, view), full.decide(entry, tasks, view)
        assert got == want, f"step {step}"
        for claim in got.claims:
            view.place(entry.id, claim.task_index, claim.machine_id)
        if step % 7 == 3:  # a machine goes away, another joins
            gone = sorted(view._machines)[step % len(view._machines)]
            del view._machines[gone]
            view.add_machine(machine(f"new{step}", zone="ab"[step % 2]))


def custom_pipeline() -> Pipeline:
    return Pipeline([make_filter("resources_fit")], [[(make_scorer("least_loaded"), 1.0)]])


@pytest.mark.parametrize("pipeline, exhaustive", [
    (service_pipeline({}), False),
    (service_pipeline({"zone_spread": {"machines": False}}), False),
    (service_pipeline({"resources_fit": {"ignore": ["memory"]}}), True),
    (custom_pipeline(), True),
], ids=["default", "zone-only-spread", "unchecked-resource", "other-stages"])
def test_chains_the_search_is_not_exact_for_take_the_full_scan(pipeline, exhaustive):
    assert ServiceScheduler("s", pipeline=pipeline).exhaustive is exhaustive


def test_zone_only_spread_agrees_with_the_full_scan():
    pipeline = service_pipeline({"zone_spread": {"machines": False}})
    for seed in range(15):
        rng = random.Random(seed)
        view = random_cell(rng)
        entry = random_job(rng, "j", view)
        tasks = entry.record.pending_tasks()
        got = ServiceScheduler("f", pipeline=pipeline).decide(entry, tasks, view)
        want = ServiceScheduler("x", pipeline=pipeline, exhaustive=True).decide(entry, tasks, view)
        assert got == want, f"seed {seed}"


def test_exhaustive_must_be_a_bool():
    with pytest.raises(ValueError, match="exhaustive must be a bool"):
        ServiceScheduler("s", exhaustive="yes")
