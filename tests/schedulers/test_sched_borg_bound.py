"""The packed walk's proof: bucket bounds never underestimate borg_hybrid on a machine of
the bucket, the prover reads the chain's stages, and with the proof the packed walk picks
a machine of the full scan's best rank even with a small k."""

from __future__ import annotations

import random

import numpy as np
import pytest
from borglib import PriorityView
from viewlib import job, machine

from cellstate.resources import Resources
from schedulers.borg.bound import EPS, Prover, hybrid_upper
from schedulers.borg.index import LoadIndex, _level
from schedulers.borg.order import free_range
from schedulers.chain_config import ChainConfig, PluginSpec
from schedulers.chains import borg_pipeline, make_scheduler
from schedulers.plugin import JobPlacement, ScoreContext
from schedulers.plugins.borg_hybrid import BorgHybrid, BorgHybridArgs

ARGS = {"default": BorgHybridArgs(), "pure-fit": BorgHybridArgs(stranding=0.0),
        "strand-only": BorgHybridArgs(stranding=1.0, exhausted=0.1, imbalance=0.3),
        "no-imbalance": BorgHybridArgs(exhausted=0.0, imbalance=0.0)}


@pytest.mark.parametrize("steps", [1, 4, 16], ids=["1", "4", "16"])
def test_free_range_holds_every_free_amount_of_its_level(steps):
    rng = random.Random(steps)
    for _ in range(3000):
        capacity = rng.choice([1, 3, 17, 100, 4000, 8192])
        free = rng.randint(-5, capacity)
        low, high = free_range(_level(free, capacity, steps), capacity, steps)
        assert low <= max(free, 0) <= high, (free, capacity, low, high)


@pytest.mark.parametrize("args", ARGS.values(), ids=ARGS.keys())
def test_hybrid_upper_bounds_the_score_of_every_machine_of_the_bucket(args):
    """Exhaustively over small buckets: no machine of the bucket scores above the bound,
    and a one-machine bucket away from the exhausted threshold gets its exact score."""
    rng, scorer, steps = random.Random(7), BorgHybrid(args), 8
    for _ in range(300):
        cap_cpu, cap_memory = rng.choice([(40, 80), (64, 16), (100, 100), (17, 33)])
        asked = (rng.randint(0, cap_cpu), rng.randint(0, cap_memory))
        cpu = free_range(_level(rng.randint(0, cap_cpu), cap_cpu, steps), cap_cpu, steps)
        memory = free_range(_level(rng.randint(0, cap_memory), cap_memory, steps), cap_memory, steps)
        bound = float(hybrid_upper(([cap_cpu], [cpu[0]], [cpu[1]]), ([cap_memory], [memory[0]], [memory[1]]),
                                   asked, args)[0])
        best = max(scorer.score(_job(asked),
                                machine("m", cpu=cap_cpu, memory=cap_memory,
                                        allocated=Resources.of(cap_cpu - fc, cap_memory - fm)),
                                Resources.of(fc, fm), ScoreContext(JobPlacement()))
                   for fc in range(cpu[0], cpu[1] + 1) for fm in range(memory[0], memory[1] + 1))
        assert best <= bound + EPS, (cpu, memory, asked)


def _job(asked):
    return job(cpu=asked[0], memory=asked[1])


def test_one_point_bucket_bound_is_its_score():
    args = BorgHybridArgs()
    score = BorgHybrid(args).score(_job((10, 20)), machine("m", cpu=100, memory=100,
                                                          allocated=Resources.of(50, 40)),
                                   Resources.of(50, 60), ScoreContext(JobPlacement()))
    bound = hybrid_upper(([100], [50], [50]), ([100], [60], [60]), (10, 20), args)[0]
    assert bound == pytest.approx(score, abs=1e-12)
    assert hybrid_upper(([0], [0], [0]), ([100], [0], [100]), (0, 0), args)[0] == 1.0  # no cpu: no bound
    assert isinstance(hybrid_upper(([1], [0], [1]), ([1], [0], [1]), (0, 0), args), np.ndarray)


@pytest.mark.parametrize("scorers,stages", [
    (None, [(0.0, 1.0), (0.75, 0.25)]),
    ((PluginSpec("borg_hybrid"),), [(1.0, 0.0)]),
    ((PluginSpec("borg_hybrid", stage=1), PluginSpec("best_fit", stage=1, weight=3.0)), [(0.25, 0.75)]),
    ((PluginSpec("best_fit"),), None),
    ((PluginSpec("borg_hybrid", {"resources": ("cpu",)}),), None),
], ids=["default-chain", "hybrid-only", "hybrid-and-best-fit", "no-hybrid", "cpu-only-hybrid"])
def test_prover_reads_the_chains_stages(scorers, stages):
    if scorers is None:
        pipeline = borg_pipeline()
    else:
        pipeline = ChainConfig((PluginSpec("resources_fit"),), scorers).pipeline()
    hybrid = next((s.args for stage in pipeline.stages for s, _ in stage if s.name == "borg_hybrid"), None)
    prover = Prover.of(pipeline, hybrid)
    assert (prover.stages if prover else None) == stages


@pytest.mark.parametrize("rank,threshold", [
    (None, float("-inf")),
    ((1.0, 0.85), (0.85 - 0.25 + EPS) / 0.75),
    ((0.5, 0.99), float("-inf")),  # a stage without borg_hybrid below its bound proves nothing
], ids=["empty-pool", "ordinary", "preempting"])
def test_prover_threshold(rank, threshold):
    assert Prover([(0.0, 1.0), (0.75, 0.25)]).threshold(rank) == pytest.approx(threshold)


def _loaded_cell(seed: int, n: int = 240) -> PriorityView:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        cpu, memory = rng.choice([(4000, 8192), (8000, 4096), (2000, 16384)])
        used = Resources.of(rng.randint(0, cpu), rng.randint(0, memory)) if rng.random() < 0.8 else Resources()
        out.append(machine(f"m{i:03d}", cpu=cpu, memory=memory, allocated=used))
    return PriorityView(out)


def _rank(sched, view, spec, machine_id):
    m = view.machine(machine_id).machine
    return sched.pipeline.rank(spec, m, m.free, ScoreContext(JobPlacement()))


@pytest.mark.parametrize("classes", [True, False], ids=["classes", "no-classes"])
@pytest.mark.parametrize("seed", range(4), ids=[f"seed{s}" for s in range(4)])
def test_packed_walk_picks_the_full_scans_best_rank_with_a_small_k(seed, classes):
    """k = 2 on 240 machines: without the proof the best of the first two feasible machines
    in bucket order is often worse than the full scan's; with it, never (one-task jobs)."""
    config = {"k": 2, "preemption": False, "equivalence_classes": classes}
    view = _loaded_cell(seed)
    packed = make_scheduler("borg", "p", seed, config)
    unproved = make_scheduler("borg", "u", seed, dict(config, prove=False))
    assert packed.prover is not None and unproved.prover is None
    full = make_scheduler("borg", "f", seed, {"relaxed_randomization": False, "preemption": False})
    rng, worse = random.Random(seed), 0
    for n in range(40):
        spec = job(f"j{n}", tasks=1, cpu=rng.choice([50, 300, 1000, 2500]),
                   memory=rng.choice([64, 700, 3000, 6000]))
        entry = view.add_job(spec)
        got, want = (s.decide(entry, [0], view) for s in (packed, full))
        other = unproved.decide(entry, [0], view)
        if not want.claims:
            assert not got.claims
            continue
        best = _rank(full, view, spec, want.claims[0].machine_id)
        assert _rank(packed, view, spec, got.claims[0].machine_id) == pytest.approx(best, abs=1e-9)
        worse += _rank(unproved, view, spec, other.claims[0].machine_id)[1] < best[1] - 1e-9
        view.apply(spec.id, got)
    assert worse > 0  # the small k alone would miss the best


def test_refresh_order_does_not_depend_on_the_changed_collections_order():
    """Buckets keep arrival order and the walk follows it: re-keying in id order keeps the
    walk seeded whatever order a set of changed ids iterates in."""
    walks = []
    for changed in (["m3", "m1", "m5"], ["m5", "m3", "m1"]):
        view = PriorityView([machine(f"m{i}") for i in range(8)])
        index = LoadIndex([f"m{i}" for i in range(8)], view, sweep=0)
        for machine_id in ("m1", "m3", "m5"):
            view.add_machine(machine(machine_id, allocated=Resources.of(1000, 2048)))
        index.refresh(view, changed)
        walks.append(list(index.walk(Resources.of(100, 100))))
    assert walks[0] == walks[1] and walks[0][:3] == ["m1", "m3", "m5"]


@pytest.mark.parametrize("cache", [True, False], ids=["cache", "no-cache"])
def test_fits_nowhere_memo_follows_machine_changes(cache):
    """The exact "fits nowhere" walk keeps the verdicts of the filters before resources_fit
    per machine revision (with the score cache): a machine that goes down or comes back
    between two such decisions is tallied as a full scan tallies it."""
    from dataclasses import replace

    from cellstate.model import MachineState
    view = PriorityView([machine(f"m{i}", allocated=Resources.of(3500, 1000)) for i in range(6)])
    packed = make_scheduler("borg", "p", 1, {"k": 2, "preemption": False, "score_cache": cache})
    full = make_scheduler("borg", "f", 1, {"relaxed_randomization": False, "preemption": False})
    assert (packed.before_signer is not None) is cache
    for n, down in enumerate([(), ("m2",), ("m2", "m4"), ("m4",)]):
        for i in range(6):
            state = MachineState.DOWN if f"m{i}" in down else MachineState.UP
            if view.machine(f"m{i}").machine.state is not state:
                view.add_machine(replace(view.machine(f"m{i}").machine, state=state))
        entry = view.add_job(job(f"j{n}", tasks=2, cpu=1000, memory=100))
        got, want = (s.decide(entry, [0, 1], view) for s in (packed, full))
        assert got.unplaced == want.unplaced and not got.claims
        assert f"resources_fit: cpu ({6 - len(down)}" in got.unplaced[0]


def _best_ranks_in_turn(sched, view, spec, claims):
    """Per claim: (its rank, the best rank of any feasible machine) given the claims before."""
    reserved: dict[str, int] = {}
    out = []
    for claim in claims:
        ranks = {}
        for entry in view.machines():
            m = entry.machine
            free = m.free
            for _ in range(reserved.get(m.id, 0)):
                free = free - spec.request
            if sched.pipeline.check(spec, m, free, reserved.get(m.id, 0)).ok:
                ranks[m.id] = sched.pipeline.rank(spec, m, free, ScoreContext(JobPlacement()))
        out.append((ranks[claim.machine_id], max(ranks.values())))
        reserved[claim.machine_id] = reserved.get(claim.machine_id, 0) + 1
    return out


@pytest.mark.parametrize("classes", [True, False], ids=["classes", "no-classes"])
@pytest.mark.parametrize("seed", range(3), ids=[f"seed{s}" for s in range(3)])
def test_every_task_of_a_job_gets_a_best_ranked_machine(seed, classes):
    """Within a decision too: the machines reserved on so far are walked by what is left of
    them (classes: re-evaluated in the shared walk; no classes: re-filed in the index)."""
    view = _loaded_cell(seed, n=120)
    sched = make_scheduler("borg", "p", seed, {"k": 2, "preemption": False, "equivalence_classes": classes})
    rng = random.Random(seed)
    for n in range(10):
        spec = job(f"j{n}", tasks=rng.randint(2, 12), cpu=rng.choice([50, 300, 1000]),
                   memory=rng.choice([64, 700, 3000]))
        entry = view.add_job(spec)
        decision = sched.decide(entry, list(range(spec.tasks)), view)
        for got, best in _best_ranks_in_turn(sched, view, spec, decision.claims):
            assert got == pytest.approx(best, abs=1e-9)
        view.apply(spec.id, decision)


@pytest.mark.parametrize("classes", [True, False], ids=["classes", "no-classes"])
def test_tasks_of_a_job_pack_onto_the_machine_they_fill(classes):
    """On identical empty machines each task's best machine is the one the job's earlier
    tasks already fill, although the index files it as empty by its ledger."""
    view = PriorityView([machine(f"m{i:02d}") for i in range(30)])
    sched = make_scheduler("borg", "p", 3, {"k": 2, "preemption": False, "equivalence_classes": classes})
    entry = view.add_job(job("a", tasks=4, cpu=900, memory=1800))
    decision = sched.decide(entry, [0, 1, 2, 3], view)
    assert len({c.machine_id for c in decision.claims}) == 1
    for got, best in _best_ranks_in_turn(sched, view, entry.record.job, decision.claims):
        assert got == pytest.approx(best, abs=1e-9)


def test_file_reserved_files_by_what_is_left_until_the_next_refresh():
    from schedulers.borg.index import RESERVED
    view = PriorityView([machine("half", allocated=Resources.of(2000, 4096))] +
                        [machine(f"e{i}") for i in range(3)])
    index = LoadIndex(["half", "e0", "e1", "e2"], view, bounds=True)
    asked = Resources.of(500, 1000)
    assert next(index.walk(asked)) == "half"
    index.file_reserved(view.machine("e2").machine, Resources.of(1000, 2000))  # fuller than half
    bound = [0.0]
    walk = index.walk(asked, bound)
    assert next(walk) == "e2" and bound[0] < 1.0
    assert index.revision_of("e2") == RESERVED
    index.refresh(view, {"e2"})
    assert next(index.walk(asked)) == "half" and index.revision_of("e2") == view.machine("e2").mod_revision
