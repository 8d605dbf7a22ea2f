"""BatchScheduler: placement, cumulative fit, last hole, reproducibility, reasons."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from viewlib import DictView, job, machine

from cellstate.model import Constraint, ConstraintOp, MachineState
from cellstate.resources import Resources
from schedulers.base import Decision
from schedulers.batch import BatchScheduler
from schedulers.chains import make_scheduler


def roomy_cell(n: int = 100, zones: int = 4) -> DictView:
    return DictView(machine(f"m{i:04d}", zone=f"z{i % zones}") for i in range(n))


def assert_within_capacity(view: DictView, decision: Decision) -> None:
    used: dict[str, Resources] = {}
    for claim in decision.claims:
        used[claim.machine_id] = used.get(claim.machine_id, Resources()) + claim.request
    for mid, total in used.items():
        m = view.machine(mid).machine
        assert total.fits_in(m.free), f"{mid}: claims {total} exceed free {m.free}"


def test_places_every_task_on_a_roomy_cell():
    view = roomy_cell()
    entry = view.add_job(job("j", tasks=50))
    d = BatchScheduler("b", random.Random(1)).decide(entry, list(range(50)), view)
    assert d.unplaced == {}
    assert sorted(c.task_index for c in d.claims) == list(range(50))
    assert len({c.machine_id for c in d.claims}) > 10  # sampled across the cell, not piled up


@pytest.mark.parametrize("machines,per_machine,tasks", [(5, 3, 20), (1, 7, 10), (30, 2, 64)],
                         ids=["5x3-for-20", "1x7-for-10", "30x2-for-64"])
def test_never_over_capacity_cumulatively(machines, per_machine, tasks):
    view = DictView(machine(f"m{i}", cpu=100 * per_machine, memory=10_000) for i in range(machines))
    entry = view.add_job(job("j", tasks=tasks, cpu=100, memory=1))
    d = BatchScheduler("b", random.Random(7)).decide(entry, list(range(tasks)), view)
    assert_within_capacity(view, d)
    assert len(d.claims) == min(tasks, machines * per_machine)
    assert len(d.claims) + len(d.unplaced) == tasks


def test_finds_the_last_hole_in_a_nearly_full_cell():
    full = Resources.of(4000, 8192)
    view = DictView(machine(f"m{i:04d}", allocated=full) for i in range(2000))
    view.add_machine(machine("hole"))
    entry = view.add_job(job("j", tasks=2))
    d = BatchScheduler("b", random.Random(3), k=2, sample_size=8, sample_rounds=2).decide(entry, [0, 1], view)
    assert [c.machine_id for c in d.claims] == ["hole", "hole"]
    assert d.unplaced == {}


def test_reproducible_with_the_same_seed():
    def run(seed):
        view = roomy_cell(200)
        entry = view.add_job(job("j", tasks=40))
        sched = BatchScheduler("b", random.Random(seed))
        first = sched.decide(entry, list(range(20)), view)
        second = sched.decide(entry, list(range(20, 40)), view)
        return [(c.task_index, c.machine_id) for c in first.claims + second.claims]

    assert run(11) == run(11)
    assert run(11) != run(12)


def test_unplaced_reason_names_filter_and_resource_with_counts():
    machines = [machine(f"small{i}", zone="a", memory=512) for i in range(6)]
    machines += [machine(f"far{i}", zone="b") for i in range(3)]
    machines += [machine("down", zone="a", state=MachineState.DOWN)]
    view = DictView(machines)
    entry = view.add_job(job("j", tasks=3, memory=1024,
                             constraints=(Constraint("zone", ConstraintOp.IN, ("a",)),)))
    d = BatchScheduler("b", random.Random(0)).decide(entry, [0, 1, 2], view)
    assert d.claims == []
    want = ("no machine fits: resources_fit: memory (6 machines), constraints: zone in [a] (3), "
            "machine_state: down (1)")
    assert d.unplaced == {0: want, 1: want, 2: want}


def test_respects_different_machine_and_existing_allocs():
    view = roomy_cell(6)
    entry = view.add_job(job("j", tasks=6, different_machine=True))
    view.place("j", 0, "m0000")
    entry = view.job("j")
    d = BatchScheduler("b", random.Random(5)).decide(entry, [1, 2, 3, 4, 5], view)
    used = [c.machine_id for c in d.claims]
    assert len(used) == len(set(used)) == 5 and "m0000" not in used


def test_gang_all_or_nothing():
    view = DictView(machine(f"m{i}", cpu=250) for i in range(3))  # room for 6 tasks of 100m
    entry = view.add_job(job("g", tasks=7, cpu=100, gang=True))
    d = BatchScheduler("b", random.Random(0)).decide(entry, list(range(7)), view)
    assert d.claims == []
    assert set(d.unplaced) == set(range(7))
    assert all(r.startswith("gang: not all 7 tasks fit; task 6: no machine fits: resources_fit: cpu")
               for r in d.unplaced.values())


def test_empty_cell_and_bad_tasks():
    view = DictView()
    entry = view.add_job(job("j", tasks=2))
    sched = BatchScheduler("b", random.Random(0))
    assert sched.decide(entry, [0, 1], view).unplaced == {0: "no machine fits: the cell has no machines",
                                                         1: "no machine fits: the cell has no machines"}
    for tasks, msg in (([2], "out of range"), ([0, 0], "listed twice")):
        with pytest.raises(ValueError, match=msg):
            sched.decide(entry, tasks, view)
    view.add_machine(machine("m"))
    view.place("j", 0, "m")
    with pytest.raises(ValueError, match="task 0 is not pending"):
        sched.decide(view.job("j"), [0], view)


def test_refreshes_machine_ids_when_the_cell_grows():
    view = DictView([machine("m0", cpu=100)])
    sched = BatchScheduler("b", random.Random(0))
    entry = view.add_job(job("j", tasks=2, cpu=100))
    assert len(sched.decide(entry, [0, 1], view).claims) == 1
    view.add_machine(machine("m1", cpu=100))
    assert Counter(c.machine_id for c in sched.decide(entry, [0, 1], view).claims) == {"m0": 1, "m1": 1}


@pytest.mark.parametrize("config,msg", [
    ({"k": 0}, "k must be an int >= 1"),
    ({"wat": 1}, "unknown config keys ['wat']"),
    ({"plugins": {"zone_spread": {}}}, "not in the chain"),
], ids=["k-zero", "unknown-key", "plugin-not-in-chain"])
def test_make_scheduler_rejects_bad_config(config, msg):
    with pytest.raises(ValueError) as err:
        make_scheduler("batch", "b", 1, config)
    assert msg in str(err.value)


def test_make_scheduler_kinds():
    assert make_scheduler("batch", "b", 1, {"k": 3}).k == 3
    assert make_scheduler("service", "s", 1, {}).kind == "service"
    with pytest.raises(ValueError, match="unknown scheduler kind 'borgish'"):
        make_scheduler("borgish", "x", 1, {})


def _machines_chosen(crew, share: bool, jobs: int = 8, tasks: int = 10) -> dict[str, set[str]]:
    """Machines each peer's decisions claim on its own copy of one roomy cell."""
    chosen = {}
    for seed, name in enumerate(crew):
        view = roomy_cell(300)
        scheduler = BatchScheduler(name, random.Random(seed))
        if share:
            scheduler.share_machines(crew)
        for j in range(jobs):
            entry = view.add_job(job(f"j{j}", tasks=tasks))
            d = scheduler.decide(entry, list(range(tasks)), view)
            assert d.unplaced == {}
            chosen.setdefault(name, set()).update(c.machine_id for c in d.claims)
    return chosen


def _overlap(chosen: dict[str, set[str]]) -> int:
    names = sorted(chosen)
    return sum(len(chosen[a] & chosen[b]) for i, a in enumerate(names) for b in names[i + 1:])


def test_peers_sharing_machines_start_in_their_own_parts_of_one_shared_order():
    crew = ["b-0", "b-1", "b-2"]
    shared, apart = _machines_chosen(crew, True), _machines_chosen(crew, False)
    assert _overlap(shared) * 4 < _overlap(apart), (_overlap(shared), _overlap(apart))
    orders = []
    for name in crew:
        s = BatchScheduler(name, random.Random(len(orders)))
        s.share_machines(crew)
        orders.append(s._machine_ids(roomy_cell(300)))
    assert orders[0] == orders[1] == orders[2]  # one order for all peers
    # alone, a scheduler keeps its own seeded shuffle (as replays, which never share)
    alone, solo = BatchScheduler("b-0", random.Random(0)), BatchScheduler("b-0", random.Random(0))
    alone.share_machines(["b-0"])
    assert alone._machine_ids(roomy_cell(300)) == solo._machine_ids(roomy_cell(300))
