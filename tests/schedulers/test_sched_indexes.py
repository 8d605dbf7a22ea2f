"""The schedulers' indexes over a view that reports its changed machines: ``MachineChanges``
hands every change to every reader, ``ClassList`` keeps its free amounts in step with its keys,
the service index follows such a view (and notices when it lost track), the batch scheduler's
indexed scan tallies hosts as the plain scan does, and ``Reservations`` counts a job's
existing allocations as ``JobPlacement.add`` does (and ``PlacementCache`` recounts them
exactly when they or the machines' zones and racks change, stamping what it hands out)."""

from __future__ import annotations

import bisect
import random

import numpy as np
import pytest
from viewlib import DictView, job, machine

from cellstate.model import JobKind, MachineState
from cellstate.resources import Resources
from schedulers import batch as batch_module
from schedulers import free_index
from schedulers.batch import BatchScheduler
from schedulers.class_list import ClassList
from schedulers.machine_changes import MachineChanges
from schedulers.placement_cache import PlacementCache
from schedulers.plugin import JobPlacement
from schedulers.reservation import Reservations, count_placement
from schedulers.service.scheduler import ServiceScheduler
from schedulers.service.index import FreeColumns


class TrackingView(DictView):
    """A DictView that reports the ids of machines whose entry changed, as ReplicaView does."""

    def __init__(self, *args, **kwargs) -> None:
        self.changed: set[str] | None = None
        super().__init__(*args, **kwargs)

    def track_changed_machines(self) -> None:
        if self.changed is None:
            self.changed = set()

    def take_changed_machines(self) -> set[str]:
        taken, self.changed = self.changed, set()
        return taken

    def add_machine(self, m):
        if self.changed is not None:
            self.changed.add(m.id)
        return super().add_machine(m)

    def place(self, job_id: str, task: int, machine_id: str) -> None:
        if self.changed is not None:
            self.changed.add(machine_id)
        super().place(job_id, task, machine_id)

    def remove_machine(self, machine_id: str, report: bool = True) -> None:
        del self._machines[machine_id]
        if report and self.changed is not None:
            self.changed.add(machine_id)


def test_every_reader_of_a_view_sees_every_change():
    view = TrackingView([machine(f"m{i}") for i in range(3)])
    first = MachineChanges(view)
    view.add_machine(machine("m3"))
    second = MachineChanges(view)  # made after m3 changed: only later changes are its own
    view.add_machine(machine("m4"))
    assert first.take() == {"m3", "m4"}
    view.add_machine(machine("m5"))
    assert second.take() == {"m4", "m5"}
    assert first.take() == {"m5"}
    assert second.take() == set() and first.take() == set()


@pytest.mark.parametrize("by_load", [False, True], ids=["bisect", "by-load"])
@pytest.mark.parametrize("loads", [10**6, 50, 2**70], ids=["spread", "many-ties", "too-large"])
def test_class_list_keeps_free_amounts_in_step_with_its_keys(by_load, loads):
    rng = random.Random(3)
    listed, keys = ClassList(2, by_load=by_load), []
    for step in range(3000):
        roll = rng.random()
        if roll < 0.5 or not keys:
            key = (-rng.randrange(loads), f"m{step}", rng.randrange(100), rng.randrange(100))
            listed.add(key, key[2:])
            keys.append(key)
        elif roll < 0.7:
            listed.remove(keys.pop(rng.randrange(len(keys))))
        else:
            i = rng.randrange(len(keys))
            new = (-rng.randrange(loads), keys[i][1], rng.randrange(100), rng.randrange(100))
            listed.move(keys[i], new, new[2:])
            keys[i] = new
        if step % 250 == 0 or step == 2999:
            keys.sort()
            assert list(listed) == keys
            assert np.array_equal(listed.free[:len(keys)], np.array([k[2:] for k in keys]).reshape(-1, 2))
            for probe in (rng.choice(keys), (-rng.randrange(loads),), (-rng.randrange(loads), "m5")):
                assert listed.find(probe) == bisect.bisect_left(keys, probe)
                assert listed.find(probe, right=True) == bisect.bisect_right(keys, probe)


@pytest.mark.parametrize("step", [3, 2000, 10**5], ids=["next", "near", "far"])
def test_class_list_moves_keys_near_or_far_in_step_with_their_free_amounts(step):
    rng = random.Random(4)
    keys = sorted((-rng.randrange(10**5), f"m{i}", rng.randrange(100), rng.randrange(100)) for i in range(2000))
    listed = ClassList(2, by_load=True)
    listed.apply([(None, key) for key in keys])
    for _ in range(400):
        i = rng.randrange(len(keys))
        load = keys[i][0] + rng.randrange(-step, step + 1)
        new = (load, keys[i][1], rng.randrange(100), rng.randrange(100))
        listed.move(keys[i], new, new[2:])
        keys[i] = new
        keys.sort()
    assert list(listed) == keys
    assert listed.free.tolist() == [list(k[2:]) for k in keys]
    assert listed.table[0, :len(keys)].tolist() == [k[0] for k in keys]


@pytest.mark.parametrize("loads", [10**6, 50, 2**70], ids=["spread", "many-ties", "too-large"])
def test_class_list_applies_staged_changes_one_by_one_or_by_a_rebuild(loads):
    rng = random.Random(8)
    listed, keys = ClassList(2, by_load=True), {}
    for batch in range(60):
        changes = []
        for machine_id in rng.sample(range(400), rng.choice([1, 5, 40, 300])):
            old = keys.pop(machine_id, None)
            key = None if rng.random() < 0.2 else (-rng.randrange(loads), f"m{machine_id:03d}", rng.randrange(99), 7)
            if key is not None:
                keys[machine_id] = key
            if old != key:
                changes.append((old, key))
        listed.apply(changes)
        want = sorted(keys.values())
        assert list(listed) == want, f"batch {batch}"
        assert listed.free.tolist() == [list(k[2:]) for k in want]
        for probe in want[:3] + [(-rng.randrange(loads),)]:
            assert listed.find(probe) == bisect.bisect_left(want, probe)


def service_job(view, name: str, rng: random.Random, **rules):
    return view.add_job(job(name, tasks=rng.randint(1, 12), cpu=rng.choice([300, 1200, 3000]),
                            memory=rng.choice([256, 2048]), kind=JobKind.SERVICE, **rules))


@pytest.mark.parametrize("report_drops", [True, False], ids=["reported", "unreported-drop"])
def test_the_service_index_follows_a_view_reporting_its_changes(report_drops):
    rng = random.Random(11)
    view = TrackingView([machine(f"{z}-m{i}", zone=z, cpu=rng.choice([4000, 8000])) for z in "abc" for i in range(6)])
    fast, full = ServiceScheduler("fast"), ServiceScheduler("full", exhaustive=True)
    for step in range(40):
        rules = rng.choice([{}, {"different_machine": True}, {"max_per_machine": 2}])
        entry = service_job(view, f"j{step}", rng, **rules)
        tasks = entry.record.pending_tasks()
        got, want = fast.decide(entry, tasks, view), full.decide(entry, tasks, view)
        assert got == want, f"step {step}"
        for claim in got.claims:
            view.place(entry.id, claim.task_index, claim.machine_id)
        if step % 6 == 5:  # a machine goes (the view may not say so), another comes
            view.remove_machine(sorted(view._machines)[step % len(view._machines)], report=report_drops)
            view.add_machine(machine(f"new{step}", zone="abc"[step % 3], state=rng.choice(list(MachineState))))


def crowded_cell(rng: random.Random) -> TrackingView:
    view = TrackingView()
    for i in range(60):
        cpu = rng.choice([2000, 4000])
        state = MachineState.UP if rng.random() < 0.9 else MachineState.DOWN
        view.add_machine(machine(f"m{i:02d}", cpu=cpu, memory=4096, state=state,
                                 allocated=Resources.of(int(cpu * rng.random()), int(4096 * rng.random()))))
    return view


def decide_both(seed: int, monkeypatch) -> tuple:
    """A big job's decision on a crowded cell by the indexed scan and by the plain scan."""
    rng = random.Random(seed)
    view = crowded_cell(rng)
    rules = rng.choice([{}, {"different_machine": True}, {"max_per_machine": 1}, {"max_per_machine": 3}])
    spec = job("big", tasks=40, cpu=rng.choice([500, 1500]), memory=rng.choice([512, 2048]), **rules)
    view.add_job(spec)
    up = sorted(e.id for e in view.machines() if e.machine.state is MachineState.UP)
    for task in range(25):  # hosts holding 1..3 of the job's tasks
        target = rng.choice(up)
        if spec.request.fits_in(view.machine(target).machine.free):
            view.place("big", task, target)
    entry = view.job("big")
    tasks = entry.record.pending_tasks()
    with monkeypatch.context() as patch:
        indexed = BatchScheduler("b", random.Random(seed), sample_rounds=1).decide(entry, tasks, view)
        patch.setattr(batch_module, "chain_applies", lambda filters: False)
        plain = BatchScheduler("b", random.Random(seed), sample_rounds=1).decide(entry, tasks, view)
    return indexed, plain


@pytest.mark.parametrize("seed", range(12), ids=lambda s: f"seed{s}")
def test_the_indexed_scan_tallies_hosts_as_the_plain_scan(seed, monkeypatch):
    indexed, plain = decide_both(seed, monkeypatch)
    assert indexed == plain


def test_the_crowded_cells_reject_hosts_before_resources_fit(monkeypatch):
    reasons = " ".join(why for seed in range(12) for why in decide_both(seed, monkeypatch)[1].unplaced.values())
    assert "different_machine: job already on machine" in reasons and "max_per_machine: limit 1" in reasons


@pytest.mark.parametrize("by_id", [False, True], ids=["view-lookups", "machines-by-id"])
@pytest.mark.parametrize("spread, gone", [(False, True), (True, False), (True, True)],
                         ids=["stacked-gone-machine", "one-per-machine", "one-per-machine-gone"])
def test_placement_counts_allocations_as_adding_them_one_by_one(spread, gone, by_id):
    rng = random.Random(5)
    view = DictView([machine(f"m{i}", zone=f"z{i % 3}", rack=f"r{i % 4}" if i % 5 else "", cpu=64000, memory=65536)
                     for i in range(12)])
    entry = view.add_job(job("j", tasks=30))
    for task in range(12 if spread else 30):
        view.place("j", task, f"m{(task * 7) % 12 if spread else rng.randrange(12)}")
    if gone:
        del view._machines["m3"]  # an allocation on a machine the view no longer has
    want = JobPlacement()
    for alloc in view.allocs_of("j"):
        held = view.machine(alloc.machine_id)
        want.add(alloc.machine_id, held.machine.zone if held else "", rack=held.machine.rack if held else "")
    machines = {e.id: e.machine for e in view.machines()} if by_id else None
    got = Reservations(view, machines=machines).placement(entry.id)
    assert got == want
    assert list(got.machines) == list(want.machines) and list(got.zones) == list(want.zones)
    assert list(got.racks) == list(want.racks)


def test_the_placement_cache_recounts_exactly_when_allocations_or_machines_change():
    view = TrackingView([machine(f"m{i}", zone=f"z{i % 3}", rack=f"r{i % 2}", cpu=64000, memory=65536)
                         for i in range(40)])
    view.add_job(job("j", tasks=60))
    for task in range(40):
        view.place("j", task, f"m{task}")
    cache, counted = PlacementCache(smallest=8), []

    def count(allocs, view, machines):
        counted.append(len(allocs))
        return count_placement(allocs, view, machines)

    def check(step: str, recounted: bool) -> None:
        before = len(counted)
        got = cache.placement(view, "j", None, count)
        want = count_placement(list(view.allocs_of("j")), view, None)
        assert got == want, step
        for name in ("machines", "zones", "racks"):  # in the same order too
            assert list(getattr(got, name).items()) == list(getattr(want, name).items()), step
        assert (len(counted) > before) == recounted, step
        got.add("m0", "z0", 5, rack="r0")  # a decision's reservations must not reach the cache

    check("first", True)
    check("same allocations", False)
    view.add_machine(machine("m40", zone="z9"))  # a new machine: it may hold tasks later
    check("a machine came", True)
    view.place("j", 40, "m40")
    check("one more allocation", False)  # counted in on top of the kept placement
    m1 = view.machine("m1").machine
    view.add_machine(machine("m1", zone="z7", rack=m1.rack, cpu=64000, memory=65536))  # moved zone
    check("a host changed zone", True)
    view.place("j", 41, "m2")  # the ledger changes, the zone does not: the new task counted in
    view.place("j", 42, "m5")
    check("more allocations", False)
    check("nothing changed", False)
    del view._allocs["j"][0]  # a task ended: counted anew
    check("an allocation went", True)
    view.remove_machine("m3", report=False)
    check("a host went unreported", True)
    check("after the relist", False)


def test_placements_share_a_stamp_exactly_while_the_kept_one_holds():
    view = TrackingView([machine(f"m{i}", zone=f"z{i % 3}") for i in range(40)])
    view.add_job(job("j", tasks=60))
    for task in range(40):
        view.place("j", task, f"m{task}")
    cache = PlacementCache(smallest=8)
    first = cache.placement(view, "j", None, count_placement)
    again = cache.placement(view, "j", None, count_placement)
    assert first.stamp is not None and again.stamp == first.stamp
    again.add("m0", "z0")  # a reservation: no longer the kept placement's counts
    assert again.stamp is None
    assert cache.placement(view, "j", None, count_placement).stamp == first.stamp
    view.place("j", 40, "m1")  # counted in on top of the kept placement: a new stamp
    grown = cache.placement(view, "j", None, count_placement)
    assert grown.stamp not in (None, first.stamp)
    del view._allocs["j"][0]  # counted anew: a new stamp
    assert cache.placement(view, "j", None, count_placement).stamp not in (None, first.stamp, grown.stamp)


def test_the_placement_cache_counts_anew_on_a_view_without_changes():
    view = DictView([machine(f"m{i}") for i in range(40)])
    view.add_job(job("j", tasks=40))
    for task in range(40):
        view.place("j", task, f"m{task}")
    counted = []
    cache = PlacementCache(smallest=8)
    for _ in range(2):
        cache.placement(view, "j", None, lambda allocs, v, m: counted.append(1) or count_placement(allocs, v, m))
    assert len(counted) == 2


def test_no_key_past_the_end_of_room_has_room():
    rng = random.Random(5)
    weights = (3, 7)
    listed = ClassList(2, weights, by_load=True)
    for i in range(400):
        frees = (rng.randrange(50), rng.randrange(50))
        listed.add((-sum(f * w for f, w in zip(frees, weights)), f"m{i}", *frees), frees)
    for _ in range(300):
        need = (rng.randrange(60), rng.randrange(60))
        end = listed.end_of_room(need)
        assert not any(k[2] >= need[0] and k[3] >= need[1] for k in listed[end:])
        assert end == len(listed) or not any(k[0] == listed[end][0] for k in listed[:end])  # a whole load


def test_any_room_reads_the_keys_of_listed_machines_only_and_unlisted_the_others():
    rng = random.Random(6)
    columns, listed = FreeColumns(2), {}
    for _ in range(800):
        machine_id = f"m{rng.randrange(90)}"
        roll = rng.random()
        if roll < 0.6:
            columns.add(machine_id)
            listed[machine_id] = (rng.randrange(50), rng.randrange(50))
            columns.list(machine_id, listed[machine_id])
        elif roll < 0.8:
            columns.unlist(machine_id)
            listed.pop(machine_id, None)
        elif machine_id in columns.row_of:
            columns.drop(machine_id)
            listed.pop(machine_id, None)
        need = (rng.randrange(55), rng.randrange(55))
        assert columns.any_room(columns.short(need)) == any(f[0] >= need[0] and f[1] >= need[1] for f in listed.values())
        unlisted = columns.unlisted()
        assert len(unlisted) == len(set(unlisted)) and set(unlisted) == set(columns.row_of) - set(listed)


def test_short_machines_are_counted_by_their_first_short_resource_but_the_blocked():
    from schedulers.service.reason import count_short
    rng = random.Random(7)
    columns, listed, known = FreeColumns(3), {}, set()
    for step in range(600):
        machine_id = f"m{rng.randrange(120)}"
        roll = rng.random()
        if roll < 0.6:
            columns.add(machine_id)
            known.add(machine_id)
            listed[machine_id] = (rng.randrange(-5, 50), rng.randrange(50), rng.randrange(50))
            columns.list(machine_id, listed[machine_id])
        elif roll < 0.8:
            columns.unlist(machine_id)
            listed.pop(machine_id, None)
        elif machine_id in known:
            columns.drop(machine_id)
            known.discard(machine_id)
            listed.pop(machine_id, None)
        need = (rng.randrange(45), rng.randrange(55), rng.randrange(55))
        blocked_ids = rng.sample(sorted(listed), min(len(listed), rng.choice([0, 0, 3, 20])))
        blocked = np.array(sorted(columns.row_of[m] for m in blocked_ids), dtype=np.int64)
        if step % 3 == 0:
            need = (0, 0, 0)  # every listed machine has room
        elif step % 7 == 0:
            need = (-2 ** 70, rng.randrange(55), 3)  # below the lowest int64: not listed still is not room
        counts, others = count_short(columns, columns.short(need), blocked, need)
        want, rest = {}, []
        for m, frees in listed.items():
            first = next((r for r in range(3) if frees[r] < need[r]), None)
            if m in blocked_ids:
                continue
            if first is None:
                rest.append(m)
            else:
                want[first] = want.get(first, 0) + 1
        assert counts == want, step
        rows = columns.row_of
        assert others == sorted(rest + [m for m in known if m not in listed], key=rows.get), step


def test_sorted_distinct_is_np_unique():
    from schedulers.row_slots import sorted_distinct
    rng = np.random.default_rng(2)
    for values in ([], [4], [1, 1, 1], rng.integers(0, 5, 50), rng.integers(0, 2, 7)):
        values = np.asarray(values, dtype=np.int64)
        assert sorted_distinct(values) == np.unique(values).tolist()


def test_free_index_candidates_and_not_up_follow_the_view_between_lookups():
    rng = random.Random(7)
    view = TrackingView([machine(f"m{i}", cpu=1000, memory=900) for i in range(20)])
    view.add_job(job("j", tasks=400, cpu=100, memory=50))
    ids = [f"m{i}" for i in rng.sample(range(20), 20)]
    index = batch_module.FreeIndex(view, ids)
    for step in range(300):
        request = Resources(rng.choice([100, 500, 900]), rng.choice([50, 400]), 0)
        cursor = rng.randrange(len(ids))
        index.refresh()
        want = [i % len(ids) for i in range(cursor, cursor + len(ids))
                if view.machine(ids[i % len(ids)]).machine.state is MachineState.UP
                and request.fits_in(view.machine(ids[i % len(ids)]).machine.free)]
        assert list(index.candidates(request, cursor)) == want
        assert index.not_up() == [i for i, m in enumerate(ids) if view.machine(m).machine.state is not MachineState.UP]
        target = rng.choice(ids)
        if rng.random() < 0.1:
            held = view.machine(target).machine
            state = MachineState.DOWN if held.state is MachineState.UP else MachineState.UP
            view.add_machine(machine(target, cpu=1000, memory=900, state=state, allocated=held.allocated))
        elif request.fits_in(view.machine(target).machine.free):
            view.place("j", step, target)


@pytest.mark.parametrize("patched_most, moved_kept", [(64, 4096), (3, 10)], ids=["kept", "often-found-anew"])
def test_free_index_keeps_each_requests_candidates_as_machines_fill_free_and_flip(monkeypatch, patched_most,
                                                                                   moved_kept):
    monkeypatch.setattr(free_index, "_PATCHED_MOST", patched_most)
    monkeypatch.setattr(free_index, "_MOVED_KEPT", moved_kept)
    rng = random.Random(11)
    ids = [f"m{i}" for i in rng.sample(range(24), 24)]
    view = TrackingView([machine(m, cpu=1000, memory=900) for m in ids])
    index = batch_module.FreeIndex(view, ids)
    requests = [Resources(cpu, memory, 0) for cpu in (100, 400, 900) for memory in (50, 400)]
    for _ in range(400):
        for target in rng.sample(ids, rng.randint(0, 4)):
            allocated = Resources(rng.choice([0, 300, 600, 950]), rng.choice([0, 300, 850]), 0)
            state = rng.choice([MachineState.UP] * 3 + [MachineState.DOWN])
            view.add_machine(machine(target, cpu=1000, memory=900, state=state, allocated=allocated))
        index.refresh()
        request, cursor = rng.choice(requests), rng.randrange(len(ids))
        walk = [ids[i % len(ids)] for i in range(cursor, cursor + len(ids))]
        want = [ids.index(m) for m in walk if view.machine(m).machine.state is MachineState.UP
                and request.fits_in(view.machine(m).machine.free)]
        assert list(index.candidates(request, cursor)) == want


def test_free_index_worth_examining_wraps_and_skips_only_short_up_machines():
    rng = random.Random(4)
    view = TrackingView([machine(f"m{i}", cpu=rng.choice([100, 400, 1000]), memory=rng.choice([100, 900]),
                                 state=rng.choice([MachineState.UP, MachineState.UP, MachineState.DRAINING]))
                         for i in range(30)])
    ids = [f"m{i}" for i in rng.sample(range(32), 32)]  # m30, m31: gone
    index = batch_module.FreeIndex(view, ids)
    for _ in range(200):
        request = Resources(rng.choice([50, 300, 900]), rng.choice([50, 500]), 0)
        start, count = rng.randrange(len(ids)), rng.randint(1, len(ids))
        want = []
        for offset in range(count):
            entry = view.machine(ids[(start + offset) % len(ids)])
            m = entry.machine if entry else None
            if m is None or m.state is not MachineState.UP or request.fits_in(m.free):
                want.append(offset)
        assert list(index.worth_examining(request, start, count)) == want


def test_a_shared_placement_copies_its_counts_before_either_side_changes():
    kept = JobPlacement({"m0": 2}, {"z0": 2}, 2, {"r0": 2}, stamp=7)
    handed = kept.share()
    assert handed == kept and handed.stamp == 7 and handed.machines is kept.machines
    handed.add("m1", "z1", 1, "r1")  # a decision's reservation
    assert kept == JobPlacement({"m0": 2}, {"z0": 2}, 2, {"r0": 2})
    assert handed == JobPlacement({"m0": 2, "m1": 1}, {"z0": 2, "z1": 1}, 3, {"r0": 2, "r1": 1})
    again = kept.share()
    kept.add("m0", "z0", 1, "r0")  # the cache counts new allocations into its kept placement
    assert again == JobPlacement({"m0": 2}, {"z0": 2}, 2, {"r0": 2})
    assert kept.machines == {"m0": 3} and handed.machines == {"m0": 2, "m1": 1}
