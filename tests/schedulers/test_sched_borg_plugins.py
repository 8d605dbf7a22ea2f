"""The Borg chain's scorers, table-driven: best_fit, worst_fit, borg_hybrid, domain_spread,
package_locality, priority_aware; their args validation and what they read."""

from __future__ import annotations

from dataclasses import replace

import pytest
from viewlib import job, machine

from cellstate.resources import Resources
from schedulers.plugin import JobPlacement, PluginConfigError, ScoreContext
from schedulers.registry import SCORERS, make_scorer

EMPTY = ScoreContext(JobPlacement())

# (scorer, args, request (cpu, mem), free (cpu, mem), capacity (cpu, mem), expected score)
PACKING = [
    ("best_fit", None, (1000, 1000), (4000, 4000), (4000, 4000), 0.25),
    ("best_fit", None, (1000, 1000), (1000, 1000), (4000, 4000), 1.0),
    ("best_fit", {"resources": ("cpu",)}, (1000, 3000), (2000, 4000), (4000, 4000), 0.75),
    ("worst_fit", None, (1000, 1000), (4000, 4000), (4000, 4000), 0.75),
    ("worst_fit", None, (1000, 1000), (4000, 1000), (4000, 4000), 0.0),
    ("worst_fit", None, (0, 0), (2000, 3000), (4000, 4000), 0.5),
    # hybrid, balanced leftovers: 1 - (0.5 * 0 + 0.5 * 0.5)
    ("borg_hybrid", None, (1000, 1000), (3000, 3000), (4000, 4000), 0.75),
    # hybrid, memory exhausted while cpu is 3/4 free: stranded = 0.75, mean = 0.375
    ("borg_hybrid", None, (0, 4000), (3000, 4000), (4000, 4000), 1 - (0.5 * 0.75 + 0.5 * 0.375)),
    # hybrid, imbalance without exhaustion: stranded = 0.5 - 0.25, mean = 0.375
    ("borg_hybrid", None, (0, 0), (2000, 1000), (4000, 4000), 1 - (0.5 * 0.25 + 0.5 * 0.375)),
    ("borg_hybrid", {"stranding": 0.0}, (0, 0), (2000, 1000), (4000, 4000), 1 - 0.375),
    # hybrid without the gap penalty: only exhaustion strands
    ("borg_hybrid", {"imbalance": 0.0}, (0, 0), (2000, 1000), (4000, 4000), 1 - 0.5 * 0.375),
]


@pytest.mark.parametrize("name,args,req,free,cap,want", PACKING,
                         ids=["best-empty", "best-exact", "best-cpu-only", "worst-empty", "worst-exhausts-memory",
                              "worst-min-dimension", "hybrid-balanced", "hybrid-stranded", "hybrid-imbalance",
                              "hybrid-pure-best-fit", "hybrid-no-imbalance"])
def test_packing_scorers(name, args, req, free, cap, want):
    scorer = make_scorer(name, args)
    m = machine("m", cpu=cap[0], memory=cap[1])
    got = scorer.score(job(cpu=req[0], memory=req[1]), m, Resources.of(*free), EMPTY)
    assert got == pytest.approx(want)
    assert 0.0 <= got <= 1.0


def test_hybrid_prefers_the_machine_it_does_not_strand():
    """Same best-fit mean on both machines; the one left balanced wins."""
    scorer = make_scorer("borg_hybrid")
    j = job(cpu=1000, memory=1000)
    balanced = scorer.score(j, machine("a", cpu=4000, memory=4000), Resources.of(2000, 2000), EMPTY)
    lopsided = scorer.score(j, machine("b", cpu=4000, memory=4000), Resources.of(3000, 1000), EMPTY)
    assert balanced > lopsided


def _placement(tasks: list[tuple[str, str, str]]) -> JobPlacement:
    p = JobPlacement()
    for machine_id, zone, rack in tasks:
        p.add(machine_id, zone, rack=rack)
    return p


SPREAD = [
    # args, tasks already placed (machine, zone, rack), candidate (id, zone, rack), score
    (None, [], ("m1", "z1", "r1"), 1.0),
    (None, [("m1", "z1", "r1")], ("m2", "z1", "r1"), 0.5),
    (None, [("m1", "z1", "r1")], ("m3", "z1", "r2"), 1.0),
    (None, [("m1", "z1", "r1"), ("m2", "z1", "r1")], ("m2", "z1", "r1"), 1 / 3),
    (None, [("m1", "z1", "")], ("m2", "z1", ""), 1.0),
    (None, [("m1", "z1", "")], ("m1", "z1", ""), 0.5),
    ({"domain": "zone"}, [("m1", "z1", "r1")], ("m3", "z1", "r2"), 0.5),
    ({"domain": "zone"}, [("m1", "z1", "r1")], ("m3", "z2", "r1"), 1.0),
]


@pytest.mark.parametrize("args,tasks,cand,want", SPREAD,
                         ids=["no-tasks", "same-rack", "other-rack", "two-in-rack", "rackless-other-machine",
                              "rackless-same-machine", "zone-domain-same-zone", "zone-domain-other-zone"])
def test_domain_spread(args, tasks, cand, want):
    m = machine(cand[0], zone=cand[1], rack=cand[2])
    got = make_scorer("domain_spread", args).score(job(), m, m.free, ScoreContext(_placement(tasks)))
    assert got == pytest.approx(want)


@pytest.mark.parametrize("package,cached,args,want", [
    ("", frozenset(), None, 1.0),
    ("web", frozenset({"web", "db"}), None, 1.0),
    ("web", frozenset({"db"}), None, 0.0),
    ("web", frozenset(), {"missing": 0.25}, 0.25),
], ids=["no-package", "cached", "missing", "missing-custom"])
def test_package_locality(package, cached, args, want):
    m = replace(machine("m"), packages=cached)
    assert make_scorer("package_locality", args).score(job(package=package), m, m.free, EMPTY) == want


@pytest.mark.parametrize("victims,want", [
    ((), 1.0),
    ((0,), 1 / 2 - (1 / 13) / 6),
    ((5,), 1 / 2 - (6 / 13) / 6),
    ((0, 0), 1 / 3 - (1 / 13) / 12),
], ids=["none", "one-low", "one-mid", "two-low"])
def test_priority_aware(victims, want):
    m = machine("m")
    got = make_scorer("priority_aware").score(job(priority=9), m, m.free,
                                              ScoreContext(JobPlacement(), victims))
    assert got == pytest.approx(want)


def test_priority_aware_orders_fewer_then_lower_victims():
    """Every 1-victim set beats every 2-victim set; at equal count the lower top priority wins."""
    scorer, m = make_scorer("priority_aware"), machine("m")

    def score(victims):
        return scorer.score(job(), m, m.free, ScoreContext(JobPlacement(), victims))

    assert min(score((p,)) for p in range(12)) > max(score((p, q)) for p in range(12) for q in range(12))
    assert score((1,)) > score((7,)) > score((11,)) == score((40,))


@pytest.mark.parametrize("name,args,field", [
    ("best_fit", {"resources": "cpu"}, "resources"),
    ("worst_fit", {"resources": ()}, "resources"),
    ("borg_hybrid", {"stranding": 1.5}, "stranding"),
    ("borg_hybrid", {"exhausted": "x"}, "exhausted"),
    ("borg_hybrid", {"bogus": 1}, "unknown args"),
    ("domain_spread", {"domain": "row"}, "domain"),
    ("package_locality", {"missing": 1.0}, "missing"),
    ("priority_aware", {"max_priority": -1}, "max_priority"),
], ids=["best-resources-str", "worst-resources-empty", "hybrid-stranding", "hybrid-exhausted", "hybrid-unknown",
        "spread-domain", "package-missing", "priority-max"])
def test_bad_args_name_plugin_and_field(name, args, field):
    with pytest.raises(PluginConfigError, match=f"{name}.*{field}"):
        make_scorer(name, args)


@pytest.mark.parametrize("name,reads", [
    ("best_fit", {"request"}), ("worst_fit", {"request"}), ("borg_hybrid", {"request"}),
    ("package_locality", {"package"}), ("priority_aware", set()), ("domain_spread", None),
], ids=lambda x: str(x))
def test_reads(name, reads):
    assert name in SCORERS
    got = make_scorer(name).reads
    assert (None if got is None else set(got)) == reads
