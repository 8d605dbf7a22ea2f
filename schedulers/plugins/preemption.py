"""preemption (post-filter): when a task fits nowhere, one machine and the lower-priority
allocations to evict there, the cheapest (fewest victims, then lowest priorities:
``schedulers.preemption``), then best rank, then machine id. The Borg scheduler's post-filter
stage (``preemption`` on); a claim lists the victims in ``evicts``."""

from __future__ import annotations

from cellstate.model import Alloc, Machine
from cellstate.plan import MachineEntry
from cellstate.resources import Resources
from schedulers.pipeline import Pipeline, PostFilterContext
from schedulers.plugin import ScoreContext
from schedulers.preemption import choose_victims, cost, preemptible

_NO_ALLOCS = 1 << 62  # the floor of a machine without allocations: nothing to evict


class Preemption:
    """Walks the machines in the decision's order; with ``ctx.options`` the walk stops once
    that many machines could make room, and a machine that needs no victim (room freed by this
    decision's evictions) ends it at once. A machine untouched by the decision whose lowest
    allocated priority (``ctx.floors``, at its revision) is not below the task's is skipped."""

    name = "preemption"

    def nominate(self, pipeline: Pipeline, ctx: PostFilterContext) -> tuple[Machine, list[Alloc]] | None:
        spec, best, options, limit = ctx.spec, None, 0, ctx.options
        floors, machine_of, touched, priority = ctx.floors, ctx.view.machine, ctx.touched, spec.priority
        for machine_id in ctx.ids:
            entry = machine_of(machine_id)
            if entry is None:
                continue
            if machine_id not in touched:
                floor = floors.get(machine_id)
                lowest = floor[1] if floor is not None and floor[0] == entry.mod_revision else _floor(ctx, entry)
                if lowest >= priority:
                    continue  # untouched and nothing of lower priority on it: no eviction can help
            option = _victims_on(pipeline, ctx, entry.machine)
            if option is None:
                continue
            victims, free = option
            rank = pipeline.rank(spec, entry.machine, free,
                                 ScoreContext(ctx.placement, tuple(a.priority for a in victims)))
            key = (cost(victims), tuple(-x for x in rank), machine_id)
            if best is None or key < best[0]:
                best = (key, entry.machine, victims)
            options += 1
            if not victims or (limit is not None and options >= limit):
                break
        return (best[1], best[2]) if best else None


def _floor(ctx: PostFilterContext, entry: MachineEntry) -> int:
    """The lowest priority allocated on the machine, kept in ``ctx.floors`` at its revision
    (allocation changes always rewrite the machine's ledger, so the revision covers them)."""
    lowest = min((a.priority for a in ctx.view.allocs_on(entry.id)), default=_NO_ALLOCS)
    ctx.floors[entry.id] = (entry.mod_revision, lowest)
    return lowest


def _victims_on(pipeline: Pipeline, ctx: PostFilterContext, machine: Machine) -> tuple[list[Alloc], Resources] | None:
    """(victims, free after evicting them) when evicting lower-priority allocations lets
    the task pass every filter on ``machine``; None otherwise."""
    spec, check = ctx.spec, pipeline.check
    free = ctx.res.free(machine)
    here = ctx.placement.on_machine(machine.id)
    verdict = check(spec, machine, free, here)
    if verdict.ok:
        return [], free
    if verdict.unresolvable:
        return None
    candidates = [a for a in preemptible(ctx.view.allocs_on(machine.id), spec.priority, spec.id, ctx.evicted)
                  if _live(ctx, a)]
    if not candidates:
        return None
    victims = choose_victims(spec.request, free, candidates)
    if victims is None:
        return None
    for a in victims:
        free = free + a.resources
    return (victims, free) if check(spec, machine, free, here).ok else None


def _live(ctx: PostFilterContext, alloc: Alloc) -> bool:
    """The alloc's task is placed or running in its job record (a replica may see a
    rival's eviction in the job record before the alloc's deletion)."""
    entry = ctx.view.job(alloc.job_id)
    tasks = entry.record.tasks if entry is not None else ""
    return alloc.task_index < len(tasks) and tasks[alloc.task_index] in "ar"
