"""Pipeline ordering and ranking, the rejection tally's wording, the reservation overlay."""

from __future__ import annotations

import pytest
from viewlib import DictView, job, machine

from cellstate.model import MachineState
from cellstate.resources import Resources
from schedulers.pipeline import Pipeline, Rejections
from schedulers.plugin import PluginConfigError, Verdict
from schedulers.registry import make_filter, make_scorer
from schedulers.reservation import Reservations


@pytest.mark.parametrize("tally,want", [
    ({}, "no machine fits: the cell has no machines"),
    ({("resources_fit", "memory"): 812, ("constraints", "zone in [a]"): 188},
     "no machine fits: resources_fit: memory (812 machines), constraints: zone in [a] (188)"),
    ({("a", "x"): 1, ("b", "y"): 5, ("c", "z"): 5, ("d", "w"): 4},
     "no machine fits: b: y (5 machines), c: z (5), d: w (4)"),
], ids=["empty", "example-from-brief", "top-three-ties-by-name"])
def test_rejections_reason(tally, want):
    r = Rejections()
    for (plugin, why), n in tally.items():
        for _ in range(n):
            r.add(Verdict.unfit(plugin, why))
    assert r.reason() == want


def test_first_failing_filter_is_charged():
    p = Pipeline([make_filter("machine_state"), make_filter("resources_fit")])
    down_and_small = machine("m", cpu=10, state=MachineState.DOWN)
    v = p.check(job(cpu=100), down_and_small, down_and_small.free, 0)
    assert (v.plugin, v.reason) == ("machine_state", "down")
    assert p.check(job(cpu=1), machine("ok"), machine("ok").free, 0).ok


def test_rank_is_per_stage_weighted_mean_and_reads_propagate_none():
    ll = make_scorer("least_loaded")
    p = Pipeline([make_filter("resources_fit")], [[(make_scorer("zone_spread"), 1.0)], [(ll, 3.0)]])
    assert p.reads is None
    assert Pipeline([make_filter("constraints")], [[(ll, 1)]]).reads == frozenset({"constraints", "request"})
    with pytest.raises(PluginConfigError, match="weight must be > 0"):
        Pipeline([], [[(ll, 0)]])
    with pytest.raises(PluginConfigError, match="at least one scorer"):
        Pipeline([], [[]])


def test_reservations_overlay_tracks_free_and_placement_and_refuses_overcommit():
    view = DictView([machine("m1", zone="a", cpu=1000), machine("m2", zone="b")])
    view.add_job(job("j", tasks=3, cpu=400))
    view.place("j", 0, "m2")
    res = Reservations(view)
    m1 = view.machine("m1").machine
    placement = res.placement("j")
    assert (placement.total, placement.in_zone("b")) == (1, 1)
    res.reserve("j", m1, Resources.of(400))
    res.reserve("j", m1, Resources.of(400))
    assert res.free(m1).cpu == 200 and view.machine("m1").machine.free.cpu == 1000
    assert (placement.on_machine("m1"), placement.in_zone("a"), placement.total) == (2, 2, 3)
    with pytest.raises(ValueError, match="exceeds free"):
        res.reserve("j", m1, Resources.of(400))
    res.release("j", m1, Resources.of(400))
    assert res.free(m1).cpu == 600 and placement.on_machine("m1") == 1


def test_reservations_base_free_cache_follows_the_machine_object():
    view = DictView([machine("m1", cpu=1000)])
    cache: dict = {}
    m1 = view.machine("m1").machine
    assert Reservations(view, cache).free(m1).cpu == 1000
    view.add_machine(machine("m1", cpu=1000, allocated=Resources.of(300)))
    assert Reservations(view, cache).free(view.machine("m1").machine).cpu == 700
