"""Cell compaction (Borg, EuroSys'15 §5.1) on the fauxmaster: ``omega experiment compaction``.

A *snapshot* is the workload present in a trace's cell at one instant ``at``: the machines up
then, and every task submitted by then that had not ended nor been killed (running or pending in
the real cell). ``take_snapshot`` reads it from an omega trace (optionally a seeded sample of its
machines and tasks, the same fraction of each) and ``write_snapshot`` stores it as an omega trace
of its own: every ``machine_add`` and ``job_submit`` at t = 0 (a job: its present tasks).

Compacting one workload (``compact``): the snapshot's machines in a seeded random order (the
removal order: a cell of n machines is the first n); ``pending_on`` packs every task on such a
cell with the real scheduler code — one Borg scheduler (the ``[borg]`` scorer chain) replayed by
the fauxmaster on the virtual clock, all jobs submitted at t = 0, nothing departing — and counts
the tasks left pending. A cell *fits* when at most ``threshold`` (0.2 %) of the tasks are
pending; a binary search finds the smallest fitting n (it assumes fitting is monotone in n, as
Borg's does). When the whole cell does not fit, it grows by cloning machines of the same order
(``cell_of``) up to ``MAX_GROWTH`` times its size. Tasks that fit on no machine of the snapshot
even when it is empty are left out of the search and counted (``unfittable``).

Variants (``VARIANTS``): ``baseline``; ``segregated``: production (priority >=
``PRODUCTION_PRIORITY``, the importer's rule) and non-production work compacted separately, each
on its own sub-cell drawn from the same machine order, the two sizes summed; ``pow2``: every cpu
and memory request rounded up to a power of two, from 0.5 core and 1 GiB (the paper's buckets).

Each (variant, seed) search is one task of the sweep engine (``search_task``, run through
``tools.sweep.driver.run_sweep``); ``run_compaction`` aggregates the compacted sizes over the
seeds as % of the snapshot's machines: the 90th percentile (the paper's statistic) and the median.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import statistics
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from cellstate.model import Job, Machine
from cellstate.resources import Resources
from tools.trace.events import JobSubmit, MachineAdd
from tools.trace.format import TraceHeader, TraceWriter
from tools.fauxmaster.experiments.snapshot import (
    CompactionError, Snapshot, read_snapshot, take_snapshot, write_snapshot,
)
from tools.trace.google2011.schema import PRODUCTION_PRIORITY

VARIANTS = ("baseline", "segregated", "pow2")
THRESHOLD = 0.002
"""At most this share of the tasks left pending and the cell still fits (Borg: 0.2 %)."""
MAX_GROWTH = 4
"""A workload that does not fit its snapshot's cell is tried on clones up to this many times its size."""
POW2_CPU, POW2_MEMORY = 500, 1024
"""The smallest buckets of ``pow2``: 0.5 core (millicores) and 1 GiB (MiB)."""
T_JOB, T_TASK = 0.001, 0.0
"""Modelled decision time of the packing scheduler: only the order of decisions matters here."""
PASSES = 4
"""A probe replays this many times the virtual time of one decision per job (``T_JOB`` each):
the Borg scheduler re-decides a job with tasks pending (it keeps no "nothing fits" memo), and
some of those later decisions place more; on a 5 % sample of Google-2011 part 0 the pending
count stopped changing after 1.5 passes (the same at 3, 6 and 12)."""
SCHEDULER_OPTIONS = {"preemption": False}
"""The ``[borg]`` chain as configured, without preemption: jobs are decided highest priority first
(the fair order), so evicting would only reshuffle tasks of lower priority, and every eviction
re-opens every pending job's decision (what made a probe of a cell too small take minutes)."""
PAPER = {
    "source": "Verma et al., Large-scale cluster management at Google with Borg, EuroSys 2015, §5.1-5.4",
    "method": "remove machines in a random order, binary-search the smallest cell that still holds the workload "
              "with at most 0.2 % of tasks pending; 11 trials per cell, 90th percentile",
    "segregated_overhead_pct": [20, 30],
    "segregated_note": "segregating prod and non-prod work needs 20-30 % more machines in the median cell",
    "pow2_overhead_pct": [30, 50],
    "pow2_note": "rounding cpu and memory requests up to the next power of two (from 0.5 core, 1 GiB) needs "
                 "30-50 % more resources in the median case",
}


# ---------------------------------------------------------------- variants

def pow2_up(amount: int, floor: int) -> int:
    """``amount`` rounded up to ``floor`` × a power of two (0 stays 0)."""
    if amount <= 0:
        return amount
    size = floor
    while size < amount:
        size *= 2
    return size


def pow2_request(request: Resources) -> Resources:
    """cpu and memory rounded up (``pow2_up``); the production copies of them (``prod_cpu``,
    ``prod_memory`` of the overcommit cell model) follow; disk and the rest unchanged."""
    cpu, memory = pow2_up(request.cpu, POW2_CPU), pow2_up(request.memory, POW2_MEMORY)
    follow = {"prod_cpu": cpu, "prod_memory": memory}
    extra = tuple((k, follow[k] if k in follow and v else v) for k, v in request.extra)
    return Resources(cpu, memory, request.disk, extra)


def variant_groups(variant: str, jobs: list[Job]) -> list[tuple[str, list[Job]]]:
    """The workloads a variant compacts separately (their sizes are summed), each named."""
    if variant == "baseline":
        return [("all", list(jobs))]
    if variant == "segregated":
        prod = [j for j in jobs if j.priority >= PRODUCTION_PRIORITY]
        other = [j for j in jobs if j.priority < PRODUCTION_PRIORITY]
        return [(name, group) for name, group in (("prod", prod), ("non-prod", other)) if group]
    if variant == "pow2":
        return [("all", [replace(j, request=pow2_request(j.request)) for j in jobs])]
    raise CompactionError(f"unknown variant {variant!r}; known: {', '.join(VARIANTS)}")


def parse_variants(text: str) -> list[str]:
    """``baseline,segregated,pow2`` → the list (baseline always first: the overheads are over it)."""
    chosen = [v.strip() for v in text.split(",") if v.strip()]
    unknown = [v for v in chosen if v not in VARIANTS]
    if unknown or not chosen:
        raise CompactionError(f"--variants: unknown {', '.join(unknown) or '(none given)'}; "
                              f"known: {', '.join(VARIANTS)}")
    return ["baseline"] + [v for v in dict.fromkeys(chosen) if v != "baseline"]


# ---------------------------------------------------------------- one cell size

def machine_order(machines: list[Machine], seed: int) -> list[Machine]:
    """The seeded removal order: a cell of n machines is the first n (sorted by id first, so
    the order depends on the seed only)."""
    order = sorted(machines, key=lambda m: m.id)
    random.Random(seed).shuffle(order)
    return order


def cell_of(order: list[Machine], n: int) -> list[Machine]:
    """The first ``n`` machines of ``order``; past its end, clones of it in the same order
    (ids suffixed ``~cK`` for the K-th copy)."""
    size = len(order)
    return [order[i] if i < size else replace(order[i % size], id=f"{order[i % size].id}~c{i // size}")
            for i in range(n)]


def fits_empty(request: Resources, machines: list[Machine]) -> bool:
    """Whether ``request`` fits some machine of ``machines`` when it is empty."""
    return any(request.fits_in(m.capacity) for m in machines)


def pending_on(machines: list[Machine], jobs: list[Job], seed: int, workdir: str | None = None) -> tuple[int, bool]:
    """Pack ``jobs`` on an empty cell of ``machines`` with one Borg scheduler on the fauxmaster
    (all submitted at t = 0, nothing departs); the tasks left pending and whether the cell's
    invariants held."""
    from tools.fauxmaster.replay import ReplayConfig, replay
    from tools.fauxmaster.scheduler_process import SchedulerConfig

    fd, path = tempfile.mkstemp(suffix=".omt", dir=workdir)
    os.close(fd)
    try:
        header = TraceHeader(source="compaction probe", created_at="1970-01-01T00:00:00+00:00",
                             capacity_model="a compaction probe's cell")
        with TraceWriter(path, header) as writer:
            for machine in machines:
                writer.write(MachineAdd(0.0, machine))
            for job in jobs:
                writer.write(JobSubmit(0.0, job))
        config = ReplayConfig(schedulers=[SchedulerConfig("borg", "borg", seed=seed, t_job=T_JOB, t_task=T_TASK,
                                                          options=dict(SCHEDULER_OPTIONS))],
                              initial_state="scheduled", until=PASSES * max(1, len(jobs)) * T_JOB,
                              sample_every_s=1e9, max_txn_ops=4096)
        result = replay(path, config)
    finally:
        os.unlink(path)
    placed = len(result.store.range(result.keys.kind_prefix("allocs")).kvs)
    total = sum(j.tasks for j in jobs)
    return total - placed, bool(result.check is None or result.check["ok"])


# ---------------------------------------------------------------- the search

@dataclass
class SearchResult:
    """One compaction: the smallest fitting cell (``machines``; None if none up to ``MAX_GROWTH``
    times the snapshot fits), every probe as (machines, pending), the tasks searched and those
    left out because no machine could hold them."""

    machines: int | None
    probes: list[tuple[int, int]]
    tasks: int
    unfittable: int
    allowed_pending: int
    invariants_ok: bool = True


def compact(order: list[Machine], jobs: list[Job], threshold: float = THRESHOLD,
            pending: Callable[[int], int] | None = None, seed: int = 0) -> SearchResult:
    """Binary-search the smallest n such that packing ``jobs`` on ``cell_of(order, n)`` leaves at
    most ``threshold`` of the tasks pending (``pending(n)``: default ``pending_on``)."""
    fittable = [j for j in jobs if fits_empty(j.request, order)]
    tasks = sum(j.tasks for j in fittable)
    unfittable = sum(j.tasks for j in jobs) - tasks
    allowed = math.floor(threshold * tasks)
    state = {"ok": True}
    if pending is None:
        def pending(n: int) -> int:
            left, ok = pending_on(cell_of(order, n), fittable, seed)
            state["ok"] &= ok
            return left
    probes: dict[int, int] = {}

    def fits(n: int) -> bool:
        if n not in probes:
            probes[n] = pending(n)
        return probes[n] <= allowed

    result = SearchResult(None, [], tasks, unfittable, allowed)
    if tasks == 0:
        result.machines = 0
        return result
    low, high = lower_bound(order, fittable, allowed), len(order)  # low cannot fit, high is tried next
    if low >= high:  # not even the whole snapshot has the room: start growing from there
        high = min(low + 1, MAX_GROWTH * len(order))
    while not fits(high):
        if high >= MAX_GROWTH * len(order):
            result.probes = sorted(probes.items())
            result.invariants_ok = state["ok"]
            return result
        low, high = high, min(2 * high, MAX_GROWTH * len(order))
    while high - low > 1:
        mid = (low + high) // 2
        if fits(mid):
            high = mid
        else:
            low = mid
    result.machines, result.probes, result.invariants_ok = high, sorted(probes.items()), state["ok"]
    return result


def lower_bound(order: list[Machine], jobs: list[Job], allowed: int) -> int:
    """The largest n (up to ``MAX_GROWTH`` x the order) whose machines' total cpu or memory is less
    than the workload's minus the ``allowed`` largest tasks' could leave pending: no cell of n or
    fewer machines can fit (a placed task takes its request from its machine's capacity)."""
    bounds = []
    for resource in ("cpu", "memory"):
        sizes = sorted((j.request.get(resource) for j in jobs for _ in range(min(j.tasks, allowed))), reverse=True)
        need = sum(j.request.get(resource) * j.tasks for j in jobs) - sum(sizes[:allowed])
        n, room = 0, 0
        cell = cell_of(order, MAX_GROWTH * len(order))
        while n < len(cell) and room + cell[n].capacity.get(resource) < need:
            room += cell[n].capacity.get(resource)
            n += 1
        bounds.append(n)
    return max(bounds)


def search_task(run) -> tuple[dict[str, Any], dict[str, Any]]:
    """A sweep task: one (variant, seed) compaction of the snapshot trace ``run.trace.path``;
    (its row of the merged table, its detail). Settings: ``variant``, ``threshold``."""
    machines, jobs = read_snapshot(run.trace.path)
    variant, threshold = run.settings["variant"], run.settings["threshold"]
    order = machine_order(machines, run.seed)
    groups = {}
    total = 0
    ok = True
    unfittable = 0
    for name, group in variant_groups(variant, jobs):
        found = compact(order, group, threshold, seed=run.seed)
        groups[name] = {"machines": found.machines, "tasks": found.tasks, "unfittable": found.unfittable,
                        "allowed_pending": found.allowed_pending, "probes": found.probes}
        ok &= found.invariants_ok
        unfittable += found.unfittable
        total = None if total is None or found.machines is None else total + found.machines
    summary = {"id": run.id, "trace": run.trace.name, "seed": run.seed, "variant": variant,
               "machines": total if total is not None else "", "original": len(machines),
               "machines_pct": round(100 * total / len(machines), 3) if total is not None else "",
               "probes": sum(len(g["probes"]) for g in groups.values()), "unfittable_tasks": unfittable,
               "invariants_ok": ok}
    return summary, {"groups": groups}


# ---------------------------------------------------------------- the experiment

@dataclass
class CompactionReport:
    """The experiment's result (``to_dict``: the JSON of ``omega experiment compaction -o json``)."""

    trace: str
    snapshot: dict[str, Any]
    variants: dict[str, dict[str, Any]]
    overheads: dict[str, dict[str, Any]]
    failed: list[dict[str, Any]]
    sweep: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"trace": self.trace, "snapshot": self.snapshot, "variants": self.variants,
                "overheads": self.overheads, "failed": self.failed, "sweep": self.sweep, "paper": PAPER,
                "method": {"threshold_pending": THRESHOLD, "max_growth": MAX_GROWTH,
                           "production_priority": PRODUCTION_PRIORITY, "pow2_floor": {"cpu_millicores": POW2_CPU,
                                                                                      "memory_mib": POW2_MEMORY},
                           "scheduler": "one borg scheduler ([borg] chain), fauxmaster, all jobs at t = 0",
                           "percentile": "linear interpolation between closest ranks"}}


def run_compaction(trace: str, seeds: list[int], variants: list[str], at: float | None = None,
                   sample: float = 1.0, engine=None, out: str | None = None,
                   threshold: float = THRESHOLD, progress=None) -> CompactionReport:
    """Take the snapshot of ``trace``, write it under ``out`` (default: a temp folder), run one
    sweep task per (variant, seed) on ``engine`` (default: the local pool) and aggregate."""
    from tools.sweep.driver import run_sweep
    from tools.sweep.engines import LocalEngine
    from tools.sweep.spec import Spec, SweepRun, Trace, run_id

    if not 0 <= threshold < 1:
        raise CompactionError(f"threshold must be in [0, 1), got {threshold!r}")
    snapshot = take_snapshot(trace, at, sample)
    out_dir = Path(out) if out else Path(tempfile.mkdtemp(prefix="omega-compaction-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "snapshot.omt.gz"
    write_snapshot(snapshot, path, Path(trace).name)
    digest = hashlib.sha256(_snapshot_identity(snapshot).encode()).hexdigest()
    source = Trace("snapshot", str(path), digest)
    runs = []
    for variant in variants:
        for seed in seeds:
            settings = {"variant": variant, "threshold": threshold}
            runs.append(SweepRun(run_id(source, settings, seed), source, settings, seed,
                                 task="tools.fauxmaster.experiments.compaction:search_task"))
    spec = Spec(f"compaction-{Path(trace).name}", str(out_dir), [source], runs)
    sweep = run_sweep(spec, engine or LocalEngine(), out_dir, progress)
    return summarize(trace, snapshot, variants, sweep)


def _snapshot_identity(snapshot: Snapshot) -> str:
    """What the snapshot is, as text (its runs' ids hash it: a different instant or sample, new runs)."""
    return json.dumps({"at": snapshot.at, "counts": snapshot.counts,
                       "machines": sorted(m.id for m in snapshot.machines)}, sort_keys=True)


def summarize(trace: str, snapshot: Snapshot, variants: list[str], sweep) -> CompactionReport:
    """The report of a compaction sweep: per variant the sizes by seed, p90 and median as % of
    the snapshot's machines; overheads of each variant's p90 (and median) over baseline's."""
    original = len(snapshot.machines)
    table: dict[str, dict[str, Any]] = {}
    failed = []
    for variant in variants:
        rows = [r for r in sweep.rows if r.get("variant") == variant]
        sizes = [r["machines"] for r in rows if r["status"] != "failed" and r.get("machines") not in ("", None)]
        for r in rows:
            if r["status"] == "failed" or r.get("machines") in ("", None):
                failed.append({"variant": variant, "seed": r.get("seed"),
                               "error": r.get("error") or f"no cell up to {MAX_GROWTH}x the snapshot fits"})
        pct = [100 * s / original for s in sizes]
        table[variant] = {
            "p90_machines_pct": round(float(np.percentile(pct, 90)), 2) if pct else None,  # linear, numpy's default
            "median_machines_pct": round(statistics.median(pct), 2) if pct else None,
            "seeds": [{"seed": r.get("seed"), "machines": r.get("machines"), "machines_pct": r.get("machines_pct"),
                       "probes": r.get("probes"), "unfittable_tasks": r.get("unfittable_tasks"),
                       "invariants_ok": r.get("invariants_ok"), "status": r["status"]} for r in rows]}
    overheads = {}
    base = table.get("baseline", {})
    for variant in variants:
        if variant == "baseline":
            continue
        mine = table[variant]
        overheads[variant] = {
            stat: (round(100 * (mine[stat] / base[stat] - 1), 1) if mine.get(stat) and base.get(stat) else None)
            for stat in ("p90_machines_pct", "median_machines_pct")}
        overheads[variant]["paper_pct"] = PAPER.get(f"{variant}_overhead_pct")
    return CompactionReport(trace, {"at_s": snapshot.at, "machines": original, "tasks": snapshot.tasks,
                                    "jobs": len(snapshot.jobs), **snapshot.counts},
                            table, overheads, failed,
                            {"out": str(Path(sweep.table).parent), "ran": sweep.ran, "resumed": sweep.resumed,
                             "retried": sweep.retried, "wall_s": round(sweep.wall_s, 1)})


def write_compaction_html(data: dict[str, Any], directory) -> Path:
    """``index.html`` (the variants' table beside the paper's, the sizes by seed) and
    ``compaction.json`` in ``directory`` (created); the index path."""
    import html

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    (out / "compaction.json").write_text(json.dumps(data, indent=2, default=str) + "\n")
    rows = []
    for name, figures in data["variants"].items():
        over = data["overheads"].get(name, {})
        paper = over.get("paper_pct")
        sizes = ", ".join(str(s["machines"]) for s in figures["seeds"])
        rows.append("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in (
            name, figures["p90_machines_pct"], figures["median_machines_pct"], over.get("p90_machines_pct", ""),
            f"+{paper[0]}..{paper[1]}" if paper else "", sizes)) + "</tr>")
    snap = data["snapshot"]
    failed = "".join(f"<p>FAILED {html.escape(str(f))}</p>" for f in data["failed"])
    index = out / "index.html"
    index.write_text(f"""<!doctype html>
<html><head><meta charset="utf-8"><title>cell compaction</title>
<style>body{{font-family:sans-serif;margin:2em}} table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}} td:first-child{{text-align:left}}</style></head>
<body><h1>Cell compaction: {html.escape(data["trace"])}</h1>
<p>snapshot at {snap["at_s"]:g} s: {snap["machines"]} machines, {snap["tasks"]} tasks in {snap["jobs"]} jobs.
<a href="compaction.json">compaction.json</a></p>
<table><tr><th>variant</th><th>p90 % of cell</th><th>median %</th><th>overhead p90 %</th><th>paper %</th>
<th>machines by seed</th></tr>{"".join(rows)}</table>{failed}
<p>{html.escape(PAPER["source"])}: {html.escape(PAPER["method"])}.</p>
</body></html>
""")
    return index
