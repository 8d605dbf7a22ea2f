"""The solver scheduler's declarations, one at a time: each hard constraint holds in the
solver's claims (and, with the candidate pre-filter off so the declaration alone decides,
is broken when it is left out); objectives: balance beats the greedy Borg scorer's spread,
domain_spread spreads a job over zones, max_load lowers the peak; the config's checks."""

from __future__ import annotations

import statistics
from collections import Counter

import pytest
from viewlib import DictView, job, machine

from cellstate.model import Constraint, ConstraintOp, MachineState
from cellstate.resources import Resources
from schedulers.chains import make_scheduler
from schedulers.plugin import PluginConfigError
from schedulers.solver.scheduler import SolverScheduler
from schedulers.solver.decl import CONSTRAINTS, OBJECTIVES, declare

ZONE_AB = (Constraint("zone", ConstraintOp.IN, ("a", "b")),)
RACK_R1 = (Constraint("rack", ConstraintOp.EQ, ("r1",)),)


def _cell(machines, spec, existing=()):
    view = DictView(machines, [spec])
    for task, mid in existing:
        view.place(spec.id, task, mid)
    return view


def _solve(view, job_id, constraints, **config):
    sched = SolverScheduler("s", 1, dict(constraints=constraints, prefilter=False, fallback="none", **config))
    entry = view.job(job_id)
    return sched.decide(entry, entry.record.pending_tasks(), view)


# name, machines, job, existing allocations (task, machine), max tasks per machine, total placed
CASES = [
    ("capacity", [machine("m1", allocated=Resources.of(3000, 0)), machine("m2")],
     job("j", 6, cpu=1000), (), {"m1": 1, "m2": 4}, 5),
    ("different_machine", [machine("m1"), machine("m2"), machine("m3")],
     job("j", 5, different_machine=True), ((0, "m1"),), {"m1": 0, "m2": 1, "m3": 1}, 2),
    ("max_per_machine", [machine("m1"), machine("m2")],
     job("j", 6, max_per_machine=2), ((0, "m1"),), {"m1": 1, "m2": 2}, 3),
    ("zone", [machine("m1", zone="a"), machine("m2", zone="b"), machine("m3", zone="c")],
     job("j", 6, constraints=ZONE_AB), (), {"m1": 6, "m2": 6, "m3": 0}, 6),
    ("attribute", [machine("m1", rack="r1"), machine("m2", rack="r2"), machine("m3")],
     job("j", 4, constraints=RACK_R1), (), {"m1": 4, "m2": 0, "m3": 0}, 4),
    ("machine_state", [machine("m1"), machine("m2", state=MachineState.DRAINING)],
     job("j", 4), (), {"m1": 4, "m2": 0}, 4),
    ("gang", [machine("m1", cpu=2000), machine("m2", cpu=1000)],
     job("j", 4, cpu=1000, gang=True), (), {"m1": 0, "m2": 0}, 0),
]


@pytest.mark.parametrize("name, machines, spec, existing, most, placed", CASES, ids=[c[0] for c in CASES])
def test_each_constraint_holds(name, machines, spec, existing, most, placed):
    view = _cell(machines, spec, existing)
    decision = _solve(view, "j", tuple(dict.fromkeys(("capacity", name))))
    on = Counter(c.machine_id for c in decision.claims)
    assert len(decision.claims) == placed
    assert all(on[m] <= n for m, n in most.items()), on
    assert len(decision.unplaced) == len(view.job("j").record.pending_tasks()) - placed


@pytest.mark.parametrize("name, machines, spec, existing, most, placed",
                         [c for c in CASES if c[0] not in ("capacity", "gang")],
                         ids=[c[0] for c in CASES if c[0] not in ("capacity", "gang")])
def test_without_the_declaration_it_is_broken(name, machines, spec, existing, most, placed):
    """Shows the declaration (not something else) enforces it: left out, some bound breaks."""
    view = _cell(machines, spec, existing)
    decision = _solve(view, "j", ("capacity",), objectives=("placed", "balance"))
    on = Counter(c.machine_id for c in decision.claims)
    assert any(on[m] > n for m, n in most.items()), on


def test_gang_without_the_declaration_places_part():
    view = _cell([machine("m1", cpu=2000), machine("m2", cpu=1000)], job("j", 4, cpu=1000, gang=True))
    sched = SolverScheduler("s", 1, dict(constraints=("capacity",), fallback="none"))
    entry = view.job("j")
    # the model alone places 3 of 4; gang_outcome (the Scheduler contract) still refuses the part
    assert sched.counters.solver_placed == 0
    assert sched.decide(entry, [0, 1, 2, 3], view).claims == []
    assert sched.counters.solver_placed == 3


def _cv(view, decisions) -> float:
    """std/mean of machine cpu load (fraction of capacity) after the decisions."""
    used = {e.id: e.machine.allocated.cpu for e in view.machines()}
    for spec_request, claims in decisions:
        for c in claims:
            used[c.machine_id] += spec_request.cpu
    loads = [used[e.id] / e.machine.capacity.cpu for e in view.machines()]
    return statistics.pstdev(loads) / statistics.mean(loads)


def test_balance_spreads_load_visibly_better_than_greedy():
    machines = [machine(f"m{i}", cpu=4000, memory=8192) for i in range(4)]
    view = DictView(machines, [job("j", 8, cpu=500, memory=1024)])  # even use: Borg packs tightly
    entry = view.job("j")
    borg = make_scheduler("borg", "b", 1).decide(entry, list(range(8)), view)
    solver = make_scheduler("solver", "s", 1).decide(entry, list(range(8)), view)
    assert len(solver.claims) == len(borg.claims) == 8
    request = entry.record.job.request
    greedy_cv, solver_cv = _cv(view, [(request, borg.claims)]), _cv(view, [(request, solver.claims)])
    assert solver_cv == 0.0 and greedy_cv > 0.5, (greedy_cv, solver_cv)


def test_domain_spread_puts_a_job_evenly_over_zones():
    machines = [machine("a1", zone="a", cpu=8000), machine("a2", zone="a", cpu=1000),
                machine("b1", zone="b", cpu=1000)]
    view = DictView(machines, [job("j", 2, cpu=1000)])
    spread = _solve(view, "j", ("capacity",), objectives=("placed", "domain_spread"))
    assert sorted(view.machine(c.machine_id).machine.zone for c in spread.claims) == ["a", "b"]


def test_max_load_lowers_the_peak():
    machines = [machine("m1", allocated=Resources.of(2000, 0)), machine("m2")]
    view = DictView(machines, [job("j", 2, cpu=1000, memory=0)])
    decision = _solve(view, "j", ("capacity",), objectives=("placed", "max_load"))
    assert [c.machine_id for c in decision.claims] == ["m2", "m2"]  # peak 50 %, not 75 %


BAD = [
    ({"time_limit_s": 0}, "time_limit_s"),
    ({"candidates": 0}, "candidates"),
    ({"fallback": "random"}, "fallback"),
    ({"constraints": ["capacity", "nope"]}, "unknown constraint 'nope'"),
    ({"constraints": ["zone"]}, "must include 'capacity'"),
    ({"objectives": ["balance"]}, "must include 'placed'"),
    ({"objectives": "placed"}, "must be a list"),
    ({"weights": {"max_load": 3}}, "not among objectives"),
    ({"weights": {"balance": 0}}, "int >= 1"),
    ({"lookahead": 3}, r"unknown args \['lookahead'\]"),
    ({"deterministic_time": 0}, "deterministic_time must be a number > 0"),
]


@pytest.mark.parametrize("config, message", BAD, ids=[m for _, m in BAD])
def test_bad_config_names_the_key(config, message):
    with pytest.raises(PluginConfigError, match=message):
        make_scheduler("solver", "s", 0, config)


def test_adding_a_policy_is_adding_a_declaration():
    """A new objective (prefer machine m2) configured by name steers the placement."""
    name = "test_prefer_m2"
    if name not in OBJECTIVES:
        @declare("objective", name, reads=())
        def prefer_m2(sm):
            from schedulers.solver.decl import ObjectiveTerm
            others = [var for mid in sm.machines if mid != "m2" for _, _, var in sm.by_machine[mid]]
            return ObjectiveTerm(sum(others))
    view = DictView([machine("m1"), machine("m2")], [job("j", 2)])
    decision = _solve(view, "j", ("capacity",), objectives=("placed", name))
    assert [c.machine_id for c in decision.claims] == ["m2", "m2"]
    assert {"capacity", "zone", "attribute", "different_machine", "max_per_machine"} <= set(CONSTRAINTS)


def test_borg_rank_packs_as_the_borg_scorer_does():
    machines = [machine(f"m{i}", cpu=4000, memory=8192, allocated=Resources.of(500 * i, 1024 * i)) for i in range(4)]
    view = DictView(machines, [job("j", 4, cpu=500, memory=1024)])
    entry = view.job("j")
    borg = make_scheduler("borg", "b", 1).decide(entry, list(range(4)), view)
    packed = _solve(view, "j", ("capacity",), objectives=("placed", "borg_rank"))
    spread = _solve(view, "j", ("capacity",), objectives=("placed", "balance"))
    on = lambda d: sorted(Counter(c.machine_id for c in d.claims).items())  # noqa: E731
    assert on(packed) == on(borg) == [("m3", 4)]  # the fullest machine that still fits them all
    assert on(spread) in ([("m0", 3), ("m1", 1)], [("m0", 2), ("m1", 2)])  # equal spreads: no load above 37.5 %
