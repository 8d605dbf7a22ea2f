"""Benchmark: the solver scheduler (CP-SAT, DCM-style) against the Borg scorer's greedy
choice on a tight, constrained workload, in one run.

Workload (seeded, ``--seed`` default 7): ``--machines`` machines (default 40) in 4 zones,
two shapes (cpu-heavy 16 cores / 32 GiB and memory-heavy 8 cores / 64 GiB), each with a
random existing load of 0-40 %; ``--jobs`` jobs (default 60) of 1-8 tasks with cpu-heavy,
memory-heavy or large balanced requests, 30 % restricted to two zones, 20 % different-machine,
15 % at most 2 per machine; the total request is about ``--demand`` (default 0.95) of the
free resources, so packing matters. Jobs are decided in the fair queue order, each decision's
claims applied before the next, as commits would be (no conflicts: one scheduler).

Variants: ``borg`` (the default Borg chain), ``solver`` (per job; default objectives placed,
balance, domain_spread; also with objectives placed + borg_rank), ``solver-lookahead``
(``decide`` with ``lookahead_jobs`` = ``--window``: the runtime path) and ``solver-batch``
(``decide_batch`` over windows of ``--window`` jobs) and ``decide_batch`` over all jobs at
once (time limit ``--whole-time-limit``: the DCM end of the scale; both objective sets). Reports placed tasks, balance (std/mean
of machine load, load = max(cpu, memory) fraction, over all machines) and the median decision
time per decide / decide_batch call, and the total.

    .venv/bin/python bench/bench_solver.py [--seed 7] [--machines 40] [--jobs 60] [--window 8]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from cellstate.model import Alloc, Constraint, ConstraintOp, Job, JobKind, JobRecord, Machine
from cellstate.resources import Resources
from cellstate.plan import JobEntry, MachineEntry
from omega.queue import fair_order
from schedulers.chains import make_scheduler
from schedulers.solver.overlay import OverlayView

SHAPES = [Resources.of(16_000, 32_768), Resources.of(8_000, 65_536)]
REQUESTS = [Resources.of(3_000, 4_096), Resources.of(1_000, 12_288), Resources.of(4_000, 16_384)]
PINNED = 0.25  # share of jobs pinned to zone z0 (say, the zone with the special hardware)


class StaticView:
    """The cell before any decision: dicts of machines and jobs (no allocations of the jobs)."""

    def __init__(self, machines: list[Machine], jobs: list[Job]) -> None:
        self.revision = 1
        self._machines = {m.id: MachineEntry(m, 1) for m in machines}
        self._jobs = {j.id: JobEntry(JobRecord.new(j, float(n)), 1) for n, j in enumerate(jobs)}

    def machines(self):
        return iter(self._machines.values())

    def machine(self, machine_id):
        return self._machines.get(machine_id)

    def machine_count(self):
        return len(self._machines)

    def job(self, job_id):
        return self._jobs.get(job_id)

    def pending_jobs(self, kind=None):
        return list(self._jobs.values())

    def allocs_on(self, machine_id) -> list[Alloc]:
        return []

    def allocs_of(self, job_id) -> list[Alloc]:
        return []

    def alloc_entry(self, job_id, task_index):
        return None


class DecidedView(OverlayView):
    """The cell as decided so far: charged claims, and decided jobs no longer pending."""

    def __init__(self, view: StaticView) -> None:
        super().__init__(view)
        self.decided: set[str] = set()

    def pending_jobs(self, kind=None):
        return [e for e in self.view.pending_jobs(kind) if e.id not in self.decided]


def workload(seed: int, machines: int, jobs: int, demand: float) -> StaticView:
    rng = random.Random(seed)
    cell = []
    for i in range(machines):
        shape = SHAPES[i % 2]
        used = rng.uniform(0.0, 0.4)
        cell.append(Machine(f"m{i:03}", shape, zone=f"z{i % 4}",
                            allocated=Resources.of(int(shape.cpu * used) // 100 * 100,
                                                   int(shape.memory * used) // 256 * 256)))
    free = Resources()
    for m in cell:
        free = free + m.free
    specs, asked = [], Resources()
    while len(specs) < jobs:
        request, tasks = rng.choice(REQUESTS), rng.randint(1, 8)
        pinned = rng.random() < PINNED
        constraints = (Constraint("zone", ConstraintOp.EQ, ("z0",)),) if pinned else ()
        specs.append(Job(f"j{len(specs):03}", JobKind.BATCH, tasks, request, owner=f"u{rng.randrange(4)}",
                         constraints=constraints, different_machine=rng.random() < 0.2,
                         max_per_machine=2 if rng.random() < 0.15 else 0))
        asked = asked + request.scaled(tasks)
    # trim or grow task counts so the scarcer of cpu and memory is asked at ``demand`` of free
    scale = demand / max(asked.cpu / free.cpu, asked.memory / free.memory)
    specs = [Job(s.id, s.kind, max(1, round(s.tasks * scale)), s.request, owner=s.owner, constraints=s.constraints,
                 different_machine=s.different_machine, max_per_machine=s.max_per_machine) for s in specs]
    return StaticView(cell, specs)


def run_per_job(sched, base: StaticView) -> tuple[DecidedView, list[float]]:
    view, times = DecidedView(base), []
    for entry in fair_order(base.pending_jobs()):
        started = time.perf_counter()
        decision = sched.decide(entry, entry.record.pending_tasks(), view)
        times.append(time.perf_counter() - started)
        view.charge(entry, decision.claims)
        view.decided.add(entry.id)
    return view, times


def run_batches(sched, base: StaticView, window: int) -> tuple[DecidedView, list[float]]:
    view, times = DecidedView(base), []
    order = fair_order(base.pending_jobs())
    for start in range(0, len(order), window):
        batch = order[start:start + window]
        started = time.perf_counter()
        decisions = sched.decide_batch(batch, view)
        times.append(time.perf_counter() - started)
        for entry in batch:
            view.charge(entry, decisions[entry.id].claims)
            view.decided.add(entry.id)
    return view, times


def balance(view: DecidedView) -> float:
    loads = [max(e.machine.allocated.cpu / e.machine.capacity.cpu, e.machine.allocated.memory / e.machine.capacity.memory)
             for e in view.machines()]
    return statistics.pstdev(loads) / statistics.mean(loads)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--machines", type=int, default=40)
    p.add_argument("--jobs", type=int, default=60)
    p.add_argument("--demand", type=float, default=0.95)
    p.add_argument("--window", type=int, default=8)
    p.add_argument("--time-limit", type=float, default=0.5, help="solver time limit per solve (s)")
    p.add_argument("--whole-time-limit", type=float, default=5.0, help="time limit of the all-jobs solve (s)")
    args = p.parse_args()
    base = workload(args.seed, args.machines, args.jobs, args.demand)
    total = sum(e.record.job.tasks for e in base.pending_jobs())
    solver_config = {"time_limit_s": args.time_limit}
    packing = {**solver_config, "objectives": ["placed", "borg_rank"]}
    whole = {"time_limit_s": args.whole_time_limit, "max_tasks": total}
    n = len(base.pending_jobs())

    def solver(config):
        return make_scheduler("solver", "s", args.seed, config)

    variants = [
        ("borg (greedy scorer)", "job", lambda: run_per_job(make_scheduler("borg", "b", args.seed), base)),
        ("solver", "job", lambda: run_per_job(solver(solver_config), base)),
        ("solver [placed, borg_rank]", "job", lambda: run_per_job(solver(packing), base)),
        (f"solver, lookahead {args.window} jobs", "job",
         lambda: run_per_job(solver({**solver_config, "lookahead_jobs": args.window}), base)),
        (f"solver decide_batch({args.window} jobs)", "batch", lambda: run_batches(solver(solver_config), base, args.window)),
        (f"solver decide_batch(all), {args.whole_time_limit:g} s", "batch", lambda: run_batches(solver(whole), base, n)),
        (f"solver [placed, borg_rank] decide_batch(all), {args.whole_time_limit:g} s", "batch",
         lambda: run_batches(solver({**whole, "objectives": ["placed", "borg_rank"]}), base, n)),
    ]
    print(f"seed {args.seed}: {args.machines} machines, {len(base.pending_jobs())} jobs, {total} tasks, "
          f"demand {args.demand:.2f} of the scarcer free resource; solver time limit {args.time_limit} s\n")
    print("| variant | placed tasks | unplaced | balance (std/mean load) | median decision ms | per | total decision s |")
    print("|---|---:|---:|---:|---:|---|---:|")
    for name, per, run in variants:
        view, times = run()
        placed = sum(len(v) for v in view._of.values())
        print(f"| {name} | {placed} / {total} | {total - placed} | {balance(view):.3f} | "
              f"{1000 * statistics.median(times):.1f} | {per} | {sum(times):.2f} |", flush=True)


if __name__ == "__main__":
    main()
