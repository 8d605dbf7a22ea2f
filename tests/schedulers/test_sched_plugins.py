"""Each filter and scorer plugin, table-driven; the registry and args validation."""

from __future__ import annotations

from dataclasses import replace

import pytest
from viewlib import job, machine

from cellstate.model import Constraint, ConstraintOp, MachineState
from cellstate.resources import Resources
from schedulers.plugin import JobPlacement, PluginConfigError, ScoreContext
from schedulers.registry import FILTERS, SCORERS, make_filter, make_scorer

C = Constraint
OP = ConstraintOp

RESOURCES_CASES = [
    # (request cpu, mem), free (cpu, mem), capacity (cpu, mem), args, (ok, reason, unresolvable)
    ((100, 100), (1000, 1000), (1000, 1000), None, (True, "", False)),
    ((100, 100), (100, 100), (1000, 1000), None, (True, "", False)),
    ((100, 2000), (1000, 1000), (4000, 4000), None, (False, "memory", False)),
    ((2000, 100), (1000, 1000), (4000, 4000), None, (False, "cpu", False)),
    ((100, 5000), (1000, 1000), (4000, 4000), None, (False, "memory", True)),
    ((2000, 2000), (1000, 1000), (4000, 4000), {"ignore": ("cpu",)}, (False, "memory", False)),
    ((2000, 100), (1000, 1000), (4000, 4000), {"ignore": ("cpu",)}, (True, "", False)),
]


@pytest.mark.parametrize("req,free,cap,args,want", RESOURCES_CASES,
                         ids=["roomy", "exact", "short-memory", "short-cpu", "over-capacity",
                              "ignore-cpu-short-memory", "ignore-cpu-fits"])
def test_resources_fit(req, free, cap, args, want):
    f = make_filter("resources_fit", args)
    m = machine("m", cpu=cap[0], memory=cap[1])
    v = f.fits(job(cpu=req[0], memory=req[1]), m, Resources.of(*free), 0)
    assert (v.ok, v.reason, v.unresolvable) == want
    assert v.plugin == "resources_fit"


def test_resources_fit_extra_resource():
    j = replace(job(), request=Resources.of(1, 1, gpu=1))
    m = machine("m")
    v = make_filter("resources_fit").fits(j, m, m.free, 0)
    assert (v.ok, v.reason, v.unresolvable) == (False, "gpu", True)


@pytest.mark.parametrize("state,accept,want", [
    (MachineState.UP, None, (True, "")),
    (MachineState.DRAINING, None, (False, "draining")),
    (MachineState.DOWN, None, (False, "down")),
    (MachineState.DRAINING, {"accept": ("up", "draining")}, (True, "")),
], ids=["up", "draining", "down", "accept-draining"])
def test_machine_state(state, accept, want):
    m = machine("m", state=state)
    v = make_filter("machine_state", accept).fits(job(), m, m.free, 0)
    assert (v.ok, v.reason) == want
    assert v.unresolvable is (not v.ok)


M_ATTRS = dict(zone="a", rack="r1", platform="x86", labels=(("ssd", "yes"),))

CONSTRAINT_CASES = [
    ((), (True, "")),
    ((C("zone", OP.EQ, ("a",)),), (True, "")),
    ((C("zone", OP.EQ, ("b",)),), (False, "zone eq b")),
    ((C("rack", OP.IN, ("r1", "r2")),), (True, "")),
    ((C("zone", OP.IN, ("b", "c")),), (False, "zone in [b, c]")),
    ((C("platform", OP.NOT_IN, ("arm",)),), (True, "")),
    ((C("platform", OP.NOT_IN, ("x86",)),), (False, "platform not-in [x86]")),
    ((C("gpu", OP.NOT_IN, ("v100",)),), (True, "")),
    ((C("ssd", OP.EXISTS),), (True, "")),
    ((C("gpu", OP.EXISTS),), (False, "gpu exists")),
    ((C("ssd", OP.EQ, ("yes",)), C("zone", OP.IN, ("b",))), (False, "zone in [b]")),
]


@pytest.mark.parametrize("constraints,want", CONSTRAINT_CASES,
                         ids=["none", "eq-match", "eq-miss", "in-match", "in-miss", "not-in-match",
                              "not-in-miss", "not-in-absent", "exists-label", "exists-missing",
                              "second-of-two-misses"])
def test_constraints(constraints, want):
    m = machine("m", **M_ATTRS)
    v = make_filter("constraints").fits(job(constraints=constraints), m, m.free, 0)
    assert (v.ok, v.reason) == want
    assert v.unresolvable is (not v.ok)


def test_constraints_extra_from_config_applies_to_every_job():
    f = make_filter("constraints", {"extra": [{"attribute": "platform", "op": "eq", "values": ["arm"]}]})
    m = machine("m", **M_ATTRS)
    v = f.fits(job(), m, m.free, 0)
    assert (v.ok, v.reason) == (False, "platform eq arm")


@pytest.mark.parametrize("flag,all_jobs,placed,ok", [
    (True, False, 0, True), (True, False, 1, False), (False, False, 3, True), (False, True, 1, False),
], ids=["flag-empty", "flag-taken", "no-flag", "all-jobs"])
def test_different_machine(flag, all_jobs, placed, ok):
    m = machine("m")
    v = make_filter("different_machine", {"all_jobs": all_jobs}).fits(job(different_machine=flag), m, m.free, placed)
    assert v.ok is ok and v.unresolvable is (not ok)


@pytest.mark.parametrize("limit,default,placed,ok", [
    (0, 0, 50, True), (2, 0, 1, True), (2, 0, 2, False), (0, 3, 3, False), (5, 3, 3, True),
], ids=["unlimited", "below", "at-limit", "default-limit", "job-limit-wins"])
def test_max_per_machine(limit, default, placed, ok):
    m = machine("m")
    v = make_filter("max_per_machine", {"default": default}).fits(job(max_per_machine=limit), m, m.free, placed)
    assert v.ok is ok
    if not ok:
        assert v.reason.startswith("limit ")


@pytest.mark.parametrize("free,want", [
    ((4000, 8192), 1.0 - (0.025 + 0.015625) / 2),
    ((2000, 4096), 0.5 - (0.025 + 0.015625) / 2),
    ((100, 128), 0.0),
], ids=["empty", "half", "filled"])
def test_least_loaded(free, want):
    m = machine("m", cpu=4000, memory=8192)
    s = make_scorer("least_loaded").score(job(cpu=100, memory=128), m, Resources.of(*free),
                                          ScoreContext(JobPlacement()))
    assert s == pytest.approx(want)


@pytest.mark.parametrize("resources", [("cpu",), ("cpu", "memory"), ("disk", "cpu"), ("cpu", "memory", "disk"),
                                       ("memory", "gpu")])
def test_least_loaded_means_the_named_resources_left_over_capacity(resources):
    m = replace(machine("m", cpu=4000, memory=8192, disk=0), capacity=Resources.of(4000, 8192, 0, gpu=8))
    free = Resources.of(1000, 9000, 0, gpu=3)
    request = Resources.of(100, 128, 0, gpu=1)
    parts = [min(1.0, max(0.0, (free.get(r) - request.get(r)) / m.capacity.get(r)))
             for r in resources if m.capacity.get(r) > 0]
    s = make_scorer("least_loaded", {"resources": resources}).score(replace(job(), request=request), m, free,
                                                                     ScoreContext(JobPlacement()))
    assert s == pytest.approx(sum(parts) / len(parts) if parts else 0.0)


def _placement(counts: dict[tuple[str, str], int]) -> JobPlacement:
    p = JobPlacement()
    for (mid, zone), n in counts.items():
        p.add(mid, zone, n)
    return p


@pytest.mark.parametrize("counts,better,worse", [
    ({}, ("m1", "a"), None),
    ({("m1", "a"): 1}, ("m2", "b"), ("m1", "a")),
    ({("m1", "a"): 1}, ("m2", "a"), ("m1", "a")),
    ({("m1", "a"): 1, ("m3", "b"): 2}, ("m1", "a"), ("m4", "b")),
    ({("m1", "a"): 5, ("m2", "b"): 1, ("m3", "b"): 1}, ("m4", "b"), ("m5", "a")),
], ids=["empty-job", "other-zone", "other-machine-same-zone", "zone-beats-machine", "many"])
def test_zone_spread(counts, better, worse):
    scorer = make_scorer("zone_spread")
    ctx = ScoreContext(_placement(counts))
    hi = scorer.score(job(), machine(better[0], zone=better[1]), Resources(), ctx)
    assert 0.0 <= hi <= 1.0
    if worse is None:
        assert hi == 1.0
    else:
        lo = scorer.score(job(), machine(worse[0], zone=worse[1]), Resources(), ctx)
        assert 0.0 <= lo < hi


@pytest.mark.parametrize("kind,name,args,msg", [
    ("filter", "nope", None, "unknown filter 'nope'"),
    ("scorer", "nope", None, "unknown scorer 'nope'"),
    ("filter", "resources_fit", {"bogus": 1}, "unknown args ['bogus']"),
    ("filter", "max_per_machine", {"default": -1}, "default must be an int >= 0"),
    ("filter", "machine_state", {"accept": ("sleepy",)}, "'sleepy' is not a valid MachineState"),
    ("filter", "constraints", {"extra": [{"attribute": "zone", "op": "eq"}]}, "wrong number of values"),
    ("scorer", "least_loaded", {"resources": ()}, "non-empty tuple"),
    ("filter", "resources_fit", "disk", "args must be a mapping"),
], ids=["filter-name", "scorer-name", "unknown-arg", "negative-default", "bad-state", "eq-no-value",
        "no-resources", "not-a-mapping"])
def test_bad_config_is_named(kind, name, args, msg):
    make = make_filter if kind == "filter" else make_scorer
    with pytest.raises(PluginConfigError) as err:
        make(name, args)
    assert msg in str(err.value)


def test_registry_plugins_have_their_names_and_sign():
    for table, make in ((FILTERS, make_filter), (SCORERS, make_scorer)):
        for name in table:
            plugin = make(name)
            assert plugin.name == name
            assert plugin.reads is None or isinstance(plugin.reads, frozenset)
    assert make_scorer("zone_spread").reads is None
    assert make_filter("resources_fit").reads == frozenset({"request"})
