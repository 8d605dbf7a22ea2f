"""The solver scheduler as a whole: it places a bin-packing trap the greedy Borg scorer
cannot (decide_batch, and decide with lookahead), falls back to the greedy choice when the
time limit leaves it without a solution, keeps claims fitting cumulatively on seeded random
cells, splits batches beyond max_tasks, and commits end to end through OptimisticPlacer +
StoreCommitter on a MemoryStore (also as a SchedulerProcess round, and from the CLI flags)."""

from __future__ import annotations

import argparse
import random
from collections import Counter

import pytest
from viewlib import DictView, FixedClock, NullSink, job, machine

from cellstate.check import check_cell
from cellstate.codec.records import encode_job_record, encode_machine
from cellstate.committer import StoreCommitter
from cellstate.keys import CellKeys
from cellstate.memory.store import MemoryStore
from cellstate.model import Constraint, ConstraintOp, JobRecord, MachineState
from cellstate.replica.view import ReplicaView
from cellstate.resources import Resources
from cellstate.store import Put
from omega.modes import CommitMode, ConflictMode
from omega.occ import OptimisticPlacer
from omega.protocols import Decision as OmegaDecision
from omega.retry import RetryPolicy
from omega.runtime import SchedulerProcess
from schedulers.chains import make_scheduler, retry_policy_for
from schedulers.pipeline import Pipeline
from schedulers.registry import make_filter
from schedulers.solver.scheduler import SolverScheduler
from schedulers.solver.candidates import PREFILTERS
from schedulers.solver.overlay import OverlayView


def trap() -> DictView:
    """Best-fit trap: a (3) goes to the 5-core machine, b (3) to the 6, c (5) fits nowhere;
    placing a and b together on the 6-core machine leaves room for c."""
    return DictView([machine("m1", cpu=5000, memory=5000), machine("m2", cpu=6000, memory=6000)],
                    [job("a", cpu=3000, memory=3000), job("b", cpu=3000, memory=3000),
                     job("c", cpu=5000, memory=5000)])


def greedy_in_turn(view, ids) -> dict:
    borg, overlay, out = make_scheduler("borg", "b", 1), OverlayView(view), {}
    for jid in ids:
        out[jid] = borg.decide(view.job(jid), view.job(jid).record.pending_tasks(), overlay)
        overlay.charge(view.job(jid), out[jid].claims)
    return out


def test_greedy_falls_into_the_trap_and_decide_batch_places_all():
    view = trap()
    greedy = greedy_in_turn(view, "abc")
    assert [len(greedy[j].claims) for j in "abc"] == [1, 1, 0]
    decisions = make_scheduler("solver", "s", 1).decide_batch([view.job(j) for j in "abc"], view)
    assert [len(decisions[j].claims) for j in "abc"] == [1, 1, 1]
    assert_fits_cumulatively(view, decisions)


def test_lookahead_plans_later_jobs_and_hands_them_out_on_their_turn():
    view = trap()
    sched = make_scheduler("solver", "s", 1, {"lookahead_jobs": 4})
    for jid in "abc":
        decision = sched.decide(view.job(jid), [0], view)
        assert len(decision.claims) == 1, (jid, decision)
        view.place(jid, 0, decision.claims[0].machine_id)
    assert sched.counters.lookahead_hits == 2 and sched.counters.solves == 1


def test_lookahead_plan_is_dropped_when_it_no_longer_fits():
    view = trap()
    sched = make_scheduler("solver", "s", 1, {"lookahead_jobs": 4})
    first = sched.decide(view.job("a"), [0], view)
    view.place("a", 0, first.claims[0].machine_id)
    view.add_machine(machine("m2", cpu=6000, memory=6000, allocated=Resources.of(5000, 5000)))  # a rival filled m2
    sched.decide(view.job("b"), [0], view)
    assert sched.counters.lookahead_hits == 0 and sched.counters.solves == 2


@pytest.mark.parametrize("fallback, placed, reason", [("borg", 2, "greedy fallback"), ("none", 0, "no fallback")],
                         ids=["borg", "none"])
def test_no_solution_in_time_falls_back_to_greedy(fallback, placed, reason):
    view = DictView([machine("m1", cpu=2000)], [job("j", 3, cpu=1000)])
    sched = make_scheduler("solver", "s", 1, {"time_limit_s": 1e-9, "fallback": fallback})
    decision = sched.decide(view.job("j"), [0, 1, 2], view)
    assert sched.last.status == "UNKNOWN" and sched.counters.fallbacks == 1
    assert len(decision.claims) == placed
    assert all(why.startswith("solver UNKNOWN after") and reason in why for why in decision.unplaced.values())
    assert len(decision.unplaced) == 3 - placed


def test_tasks_beyond_max_tasks_go_to_the_greedy_scorer_after_the_solved_ones():
    view = DictView([machine("m1", cpu=4000), machine("m2", cpu=4000)], [job("j", 7, cpu=1000)])
    sched = make_scheduler("solver", "s", 1, {"max_tasks": 4})
    decision = sched.decide(view.job("j"), list(range(7)), view)
    assert sorted(c.task_index for c in decision.claims) == list(range(7))
    assert sched.counters.solver_placed == 4
    assert_fits_cumulatively(view, {"j": decision})


def test_no_candidate_gives_the_filters_reason():
    view = DictView([machine("m1", state=MachineState.DOWN)], [job("j", 2)])
    decision = make_scheduler("solver", "s", 1).decide(view.job("j"), [0, 1], view)
    assert decision.claims == [] and set(decision.unplaced.values()) == {"no machine fits: machine_state: down (1 machines)"}


def assert_fits_cumulatively(view, decisions) -> None:
    """Every claim of every job passes the hard filters on the ledgers charged with the
    claims before it (capacity, constraints, per-machine limits)."""
    check = Pipeline([make_filter(name) for name in PREFILTERS])
    overlay = OverlayView(view)
    for jid, decision in decisions.items():
        entry = view.job(jid)
        here = Counter(a.machine_id for a in view.allocs_of(jid))
        for claim in decision.claims:
            m = overlay.machine(claim.machine_id).machine
            verdict = check.check(entry.record.job, m, m.free, here[m.id])
            assert verdict.ok, (jid, claim, verdict)
            overlay.charge(entry, [claim])
            here[m.id] += 1


def random_cell(seed: int) -> DictView:
    rng = random.Random(seed)
    machines = [machine(f"m{i}", zone=f"z{i % 3}", cpu=rng.choice([2000, 4000, 8000]),
                        memory=rng.choice([4096, 8192]), rack=f"r{i % 4}",
                        allocated=Resources.of(rng.randrange(0, 2000, 250), rng.randrange(0, 4096, 256)),
                        state=rng.choice([MachineState.UP] * 5 + [MachineState.DRAINING]))
                for i in range(rng.randint(3, 12))]
    jobs = []
    for n in range(rng.randint(1, 5)):
        constraints = (Constraint("zone", ConstraintOp.NOT_IN, (f"z{rng.randrange(3)}",)),) if rng.random() < 0.3 else ()
        jobs.append(job(f"j{n}", rng.randint(1, 8), cpu=rng.choice([250, 500, 1000, 1500]),
                        memory=rng.choice([256, 1024, 2048]), constraints=constraints,
                        different_machine=rng.random() < 0.2, max_per_machine=rng.choice([0, 0, 2]),
                        gang=rng.random() < 0.15))
    return DictView(machines, jobs)


@pytest.mark.parametrize("seed", range(25), ids=[f"seed{s}" for s in range(25)])
def test_claims_fit_cumulatively_on_random_cells(seed):
    view = random_cell(seed)
    entries = [view.job(f"j{n}") for n in range(len(view.pending_jobs()))]
    sched = make_scheduler("solver", "s", seed, {"time_limit_s": 0.2, "candidates": 6})
    decisions = sched.decide_batch(entries, view)
    assert_fits_cumulatively(view, decisions)
    greedy = greedy_in_turn(view, [e.id for e in entries])
    assert sum(len(d.claims) for d in decisions.values()) >= sum(len(d.claims) for d in greedy.values())
    for e in entries:
        d = decisions[e.id]
        assert sorted([c.task_index for c in d.claims] + list(d.unplaced)) == list(range(e.record.job.tasks))


def test_a_deterministic_work_limit_gives_the_same_answer_every_time():
    """Replays need it: the wall-clock limit depends on the host's load, the work limit does not."""
    config = {"deterministic_time": 0.05, "time_limit_s": 30.0, "candidates": 12}

    def claims(seed):
        view = random_cell(seed)
        entries = [view.job(f"j{n}") for n in range(len(view.pending_jobs()))]
        decisions = make_scheduler("solver", "s", 3, config).decide_batch(entries, view)
        return {job: sorted((c.task_index, c.machine_id) for c in d.claims) for job, d in decisions.items()}

    for seed in (2, 7, 11):
        assert claims(seed) == claims(seed)


def test_an_exhausted_work_limit_falls_back_to_greedy():
    view = DictView([machine("m1", cpu=2000)], [job("j", 3, cpu=1000)])
    sched = make_scheduler("solver", "s", 1, {"deterministic_time": 1e-9, "time_limit_s": 30.0})
    decision = sched.decide(view.job("j"), [0, 1, 2], view)
    assert sched.last.status == "UNKNOWN" and sched.counters.fallbacks == 1
    assert len(decision.claims) == 2


# -- end to end -------------------------------------------------------------------------------


def seeded_store(jobs):
    store, keys = MemoryStore(), CellKeys("solver")
    ops = [Put(keys.machine(f"m{i}"), encode_machine(machine(f"m{i}", zone=f"z{i % 2}", cpu=4000, memory=8192)))
           for i in range(4)]
    ops += [Put(keys.job(j.id), encode_job_record(JobRecord.new(j, 0.0))) for j in jobs]
    store.txn((), ops)
    return store, keys


def omega_decide(sched):
    def decide(entry, tasks, view):
        d = sched.decide(entry, tasks, view)
        return OmegaDecision(list(d.claims), dict(d.unplaced))
    return decide


def test_commit_through_optimistic_placer_and_store_committer():
    store, keys = seeded_store([job("j", 10, cpu=1500, memory=1024)])
    view = ReplicaView(store, keys)
    placer = OptimisticPlacer("s", StoreCommitter(store, keys), ConflictMode.RESOURCE_FIT, CommitMode.INCREMENTAL,
                              RetryPolicy(max_attempts=3), FixedClock(1.0))
    result = placer.place("j", view, omega_decide(make_scheduler("solver", "s", 1)))
    assert len(result.placed) == 8 and len(result.pending) == 2  # 2 per machine fit
    report = check_cell(store, keys)
    assert report.ok, report.violations
    assert Counter(c.machine_id for c in result.placed) == {f"m{i}": 2 for i in range(4)}


def test_scheduler_process_round_with_the_solver_kind():
    from dataclasses import replace

    # a solver process serves the jobs that name its class; a batch-class job is not its to place
    store, keys = seeded_store([replace(job(f"j{n}", 3, cpu=1000, memory=1024), scheduler="solver") for n in range(4)]
                               + [job("batch-class", 3, cpu=1000, memory=1024)])
    process = SchedulerProcess(make_scheduler("solver", "solver-1", 1, {"lookahead_jobs": 8}),
                               ReplicaView(store, keys), StoreCommitter(store, keys), NullSink(), retry=retry_policy_for("solver"),
                               clock=FixedClock(1.0))
    assert process.work_round() == 4
    report = check_cell(store, keys)
    assert report.ok and report.allocs == 12, report.violations
    assert process.snapshot().kind == "solver" and process.snapshot().tasks_placed == 12
    assert process.scheduler.counters.lookahead_hits == 3


def test_cli_builds_a_solver_scheduler_from_flags_and_toml(tmp_path):
    from tools.cli.scheduler import build_parts, register

    config = tmp_path / "solver.toml"
    config.write_text('time_limit_s = 0.25\ncandidates = 16\nobjectives = ["placed", "max_load"]\n'
                      '[weights]\nmax_load = 5\n')
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["scheduler", "run", "--kind", "solver", "--config", str(config)])
    scheduler = build_parts(args)[0]
    assert isinstance(scheduler, SolverScheduler)
    assert (scheduler.config.time_limit_s, scheduler.config.candidates, scheduler.config.weight("max_load")) == \
        (0.25, 16, 5)
