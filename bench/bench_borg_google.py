"""Benchmark: the Borg scheduler's tricks on the Google-2011 part-0 initial state.

Schedules the 144,339 tasks present at the trace's start (3,981 jobs) from scratch on its
12,492 machines, in process, against a replica-like in-memory view (no etcd: the decision
cost is the point), jobs in priority order (highest first, then job id), each job decided
once and its claims committed before the next. Configurations: all tricks on, each one off,
all off, and all on without the packed walk's proof (``prove = false``). Times are CPU
seconds of the process spent in ``decide`` (time.process_time: the figure does not depend
on what else the shared machine runs). All-off scores every machine
for every task; it is timed on a random sample of
``--sample`` tasks, each decided alone on the cell as the all-on run has filled it at that
point (not committed), and extrapolated: mean seconds per task x all tasks. Its decisions
equal no-randomization's (a full scan finds the same best machine with or without classes
and cache: tests/schedulers/test_sched_borg.py), so its packing is that run's.

    .venv/bin/python bench/bench_borg_google.py [--sample 200] [--k 50] [--skip no-randomization ...]
    .venv/bin/python bench/bench_borg_google.py --fitting 0.4   # packing where the workload fits

The initial state asks for ~180 % of the cell's cpu (the trace's requests exceed capacity),
so every machine ends up used; ``--fitting F`` instead schedules a seeded random F of the
jobs (all their tasks) with every configuration (and all-on with the other walks) and
compares each with the full scan, where machines used and stranded resources say how well
each packs. Packing verdicts against the full scan, all relative: at most 2 % fewer tasks
placed, at most 2 % more machines used, stranded cpu and memory at most 2 % above the full
scan's (the percentage-point gap is printed too); doing better than the full scan is no miss.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from dataclasses import dataclass, field

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from borg_google_cell import MemoryCellView, load_initial_state, packing  # noqa: E402

from schedulers.chains import make_scheduler  # noqa: E402
from tools.trace.google2011.cell import CapacityModel  # noqa: E402
from tools.trace.shared import traces_dir  # noqa: E402

TRACE = str(traces_dir() / "google-2011/task_events/part-00000-of-00500.csv.gz")
OFF = dict(equivalence_classes=False, score_cache=False, relaxed_randomization=False)
CONFIGS = {
    "all-on": {},
    "no-classes": {"equivalence_classes": False},
    "no-cache": {"score_cache": False},
    "no-randomization": {"relaxed_randomization": False},
    "no-proof": {"prove": False},  # all on, the packed walk stops at k (before the proof)
}


@dataclass
class Run:
    name: str
    seconds: float = 0.0
    tasks: int = 0
    placed: int = 0
    packing: dict = field(default_factory=dict)
    sampled: list[float] = field(default_factory=list)  # all-off seconds per sampled task
    counters: object = None


def ordered(jobs):
    return sorted(jobs, key=lambda j: (-j.priority, int(j.id[1:])))


def run(name, config, machines, jobs, seed, sample_at=frozenset(), sampler=None) -> Run:
    """Decide every job in order, committing each decision; time only ``decide``. At the
    global task positions in ``sample_at``, time ``sampler`` deciding that task alone first."""
    view = MemoryCellView(machines, jobs)
    sched = make_scheduler("borg", name, seed, config)
    out, position = Run(name), 0
    for spec in ordered(jobs):
        entry = view.job(spec.id)
        tasks = entry.record.pending_tasks()
        for t in tasks:
            if position + t in sample_at:
                t0 = time.process_time()
                sampler.decide(entry, [t], view)
                out.sampled.append(time.process_time() - t0)
        position += len(tasks)
        t0 = time.process_time()
        decision = sched.decide(entry, tasks, view)
        out.seconds += time.process_time() - t0
        view.commit(spec.id, decision.claims)
        out.tasks += len(tasks)
        out.placed += len(decision.claims)
    out.packing, out.counters = packing(view), sched.counters
    return out


def line(r: Run, seconds: float, ratio: str) -> str:
    p = r.packing
    return (f"{r.name:<22} {seconds:9.1f} s {1e6 * seconds / max(r.tasks, 1):9.1f} µs/task  {ratio:>14}  "
            f"placed {r.placed:7,}  machines used {p['machines_used']:6,}  "
            f"stranded cpu {p['stranded_cpu_pct']:5.2f} %  memory {p['stranded_memory_pct']:5.2f} %")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default=TRACE)
    ap.add_argument("--sample", type=int, default=200, help="tasks timed for the all-off extrapolation")
    ap.add_argument("--k", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--skip", nargs="*", default=[], choices=list(CONFIGS)[1:], help="configurations not to run")
    ap.add_argument("--fitting", type=float, default=0.0, help="only: packing of this seeded fraction of the jobs")
    a = ap.parse_args()
    capacity = CapacityModel("mix", seed=0)
    machines, jobs = load_initial_state(a.trace, capacity)
    total = sum(j.tasks for j in jobs)
    print(f"Google-2011 part 0 initial state: {len(jobs):,} jobs, {total:,} tasks, {len(machines):,} machines")
    print(f"capacity model: {capacity.describe()}")
    print(f"borg default chain, k={a.k}, seed {a.seed}; all-off timed on {a.sample} random tasks and extrapolated")
    if a.fitting:
        fitting(a, machines, jobs)
        return
    sample_at = frozenset(random.Random(a.seed).sample(range(total), a.sample))
    all_off = make_scheduler("borg", "all-off", a.seed, dict(OFF, k=a.k))
    on = run("all-on", {"k": a.k}, machines, jobs, a.seed, sample_at, all_off)
    off_seconds = sum(on.sampled) / len(on.sampled) * total
    print(line(on, on.seconds, "") + f"\n    counters {on.counters}", flush=True)
    runs = {}
    for name, config in list(CONFIGS.items())[1:]:
        if name not in a.skip:
            runs[name] = r = run(name, dict(config, k=a.k), machines, jobs, a.seed)
            print(line(r, r.seconds, f"{r.seconds / on.seconds:6.1f}x all-on") + f"\n    counters {r.counters}",
                  flush=True)
    print(f"{'all-off (sampled)':<18} {off_seconds:9.1f} s {1e6 * off_seconds / total:9.1f} µs/task  "
          f"{off_seconds / on.seconds:6.0f}x all-on  (mean of {len(on.sampled)} sampled tasks x {total:,} tasks; "
          f"decisions and packing = no-randomization's)")
    verdicts(on, off_seconds, runs.get("no-randomization"))
    for name in ("no-classes", "no-cache", "no-proof"):
        if name in runs:
            verdicts(runs[name], None, runs.get("no-randomization"))


WALKS = {"all-on, random walk": {"walk_start": "random"}, "all-on, first-fit walk": {"walk_start": "first"}}


def fitting(a, machines, jobs) -> None:
    """Every configuration (and all-on with the other walks) vs the full scan on a seeded
    fraction of the jobs: packing quality."""
    if not 0.0 < a.fitting <= 1.0:
        raise SystemExit(f"--fitting must be in (0, 1], got {a.fitting}")
    chosen = [j for j in jobs if random.Random(f"{a.seed}:{j.id}").random() < a.fitting]
    print(f"--fitting {a.fitting}: {len(chosen):,} jobs, {sum(j.tasks for j in chosen):,} tasks")
    on = run("all-on", {"k": a.k}, machines, chosen, a.seed)
    print(line(on, on.seconds, ""), flush=True)
    runs = [on]
    configs = {name: c for name, c in CONFIGS.items() if name != "all-on" and name not in a.skip}
    for name, config in {**WALKS, **configs}.items():
        r = run(name, dict(config, k=a.k), machines, chosen, a.seed)
        print(line(r, r.seconds, f"{r.seconds / on.seconds:6.1f}x all-on"), flush=True)
        runs.append(r)
    full = next((r for r in runs if r.name == "no-randomization"), None)
    for r in runs:
        if r is not full:
            verdicts(r, None, full)


def verdicts(on: Run, off_seconds: float | None, full: Run | None) -> None:
    if off_seconds is not None:
        speedup = off_seconds / on.seconds
        print(f"speedup all-on vs all-off: {speedup:,.0f}x (goal >= 100x: {'meets' if speedup >= 100 else 'MISSES'} it)")
        print(f"all-on time: {on.seconds:.1f} s (goal < 30 s: {'meets' if on.seconds < 30 else 'MISSES'} it)")
    if full is None:
        return
    print(f"{on.name} vs full scan (goals, relative: at most 2 % fewer tasks placed, 2 % more machines used, "
          f"2 % more stranded cpu and memory):")
    for label, a, b, sign in (("tasks placed", on.placed, full.placed, -1),
                              ("machines used", on.packing["machines_used"], full.packing["machines_used"], 1)):
        diff = 100 * (a - b) / b
        print(f"  {label}: {a:,} vs {b:,} ({diff:+.2f} %: {'meets' if sign * diff <= 2 else 'MISSES'} it)")
    for key in ("stranded_cpu_pct", "stranded_memory_pct"):
        a, b = on.packing[key], full.packing[key]
        rel = 100 * (a - b) / b if b else (0.0 if a == b else float("inf"))
        print(f"  {key}: {a:.2f} vs {b:.2f} ({a - b:+.2f} percentage points, {rel:+.1f} % "
              f"relative: {'meets' if rel <= 2 else 'MISSES'} it)")


if __name__ == "__main__":
    main()
