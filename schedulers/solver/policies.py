"""The built-in declarations of the solver scheduler (see ``schedulers/solver/decl.py``).

Hard constraints mirror the filters of the Borg chain, but over the whole batch at once:
capacity is cumulative per machine against its current ledger, different-machine and
max-per-machine count the job's existing allocations plus the batch's tasks. Objectives are
costs: ``placed`` (tasks left out; dominant: optimized first), ``balance`` (sum of squared machine loads in
percent: spreads load), ``max_load`` (the highest machine load), ``domain_spread`` (per job,
its most crowded zone), ``borg_rank`` (how far below Borg's favourite machine a placement
ranks by the Borg chain's scorers: packs as Borg does).
"""

from __future__ import annotations

from functools import cache

from cellstate.model import MachineState
from schedulers.plugin import ScoreContext
from schedulers.plugins.constraints import satisfied
from schedulers.solver.decl import CONSTRAINT, OBJECTIVE, ObjectiveTerm, declare
from schedulers.solver.model import SolverModel

# -- hard constraints -------------------------------------------------------------------------


@declare(CONSTRAINT, "capacity", reads=("request",))
def capacity(sm: SolverModel) -> None:
    """Per machine and resource: what the batch adds fits what the ledger has free."""
    for mid, machine in sm.machines.items():
        if not sm.by_machine[mid]:
            continue
        free = machine.free
        for r in sm.resources(mid):
            sm.model.add(sm.usage(mid, r) <= max(0, free.get(r)))


@declare(CONSTRAINT, "machine_state", reads=())
def machine_state(sm: SolverModel) -> None:
    """Only machines that are up take new tasks."""
    for mid, machine in sm.machines.items():
        if machine.state is not MachineState.UP:
            for j in range(len(sm.jobs)):
                sm.forbid(j, mid)


@declare(CONSTRAINT, "different_machine", reads=("different_machine",))
def different_machine(sm: SolverModel) -> None:
    """A job marked different_machine has at most one task per machine, counting its
    existing allocations."""
    for j, job in enumerate(sm.jobs):
        if job.spec.different_machine:
            _at_most_per_machine(sm, j, 1)


@declare(CONSTRAINT, "max_per_machine", reads=("max_per_machine",))
def max_per_machine(sm: SolverModel) -> None:
    """At most ``job.max_per_machine`` tasks of a job per machine (0: no limit), counting
    its existing allocations."""
    for j, job in enumerate(sm.jobs):
        if job.spec.max_per_machine:
            _at_most_per_machine(sm, j, job.spec.max_per_machine)


def _at_most_per_machine(sm: SolverModel, j: int, limit: int) -> None:
    existing = sm.jobs[j].existing
    for mid in sm.machines:
        tasks = sm.tasks_of(j, mid)
        if tasks:
            sm.model.add(sum(tasks) <= max(0, limit - existing.on_machine(mid)))


@declare(CONSTRAINT, "zone", reads=("constraints",))
def zone(sm: SolverModel) -> None:
    """The job's constraints on the ``zone`` attribute (eq / in / not-in / exists)."""
    _attribute_constraints(sm, lambda attribute: attribute == "zone")


@declare(CONSTRAINT, "attribute", reads=("constraints",))
def attribute(sm: SolverModel) -> None:
    """The job's constraints on any other attribute (rack, platform, labels)."""
    _attribute_constraints(sm, lambda attribute: attribute != "zone")


def _attribute_constraints(sm: SolverModel, applies) -> None:
    for j, job in enumerate(sm.jobs):
        rules = [c for c in job.spec.constraints if applies(c.attribute)]
        if not rules:
            continue
        for mid, machine in sm.machines.items():
            if not all(satisfied(c, machine) for c in rules):
                sm.forbid(j, mid)


@declare(CONSTRAINT, "gang", reads=("gang",))
def gang(sm: SolverModel) -> None:
    """A gang job's batch tasks are placed all together or not at all."""
    for j, job in enumerate(sm.jobs):
        if job.spec.gang and len(job.tasks) > 1:
            first = sm.placed[(j, job.tasks[0])]
            for t in job.tasks[1:]:
                sm.model.add(sm.placed[(j, t)] == first)


# -- objectives (costs) ------------------------------------------------------------------------


@declare(OBJECTIVE, "placed", reads=())
def placed(sm: SolverModel) -> ObjectiveTerm:
    """Tasks left unplaced (dominant: minimized first, then held while the others are)."""
    return ObjectiveTerm(len(sm.placed) - sum(sm.placed.values()), dominant=True)


@declare(OBJECTIVE, "balance", reads=("request",))
def balance(sm: SolverModel) -> ObjectiveTerm | None:
    """Sum over the used candidate machines of (load in percent) squared: for a given total
    it is least when load is spread evenly."""
    squares = []
    for mid in sm.machines:
        if not sm.by_machine[mid]:
            continue
        load = sm.load_percent(mid)
        top = sm.load_top[mid]
        square = sm.model.new_int_var(0, top * top, f"load2[{mid}]")
        sm.model.add_multiplication_equality(square, [load, load])
        squares.append(square)
    if not squares:
        return None
    return ObjectiveTerm(sum(squares))


@declare(OBJECTIVE, "max_load", reads=("request",))
def max_load(sm: SolverModel) -> ObjectiveTerm | None:
    """The highest load (percent) among the candidate machines the batch may use."""
    used = [mid for mid in sm.machines if sm.by_machine[mid]]
    if not used:
        return None
    loads = [sm.load_percent(mid) for mid in used]
    top = max(sm.load_top[mid] for mid in used)
    peak = sm.model.new_int_var(0, top, "max_load")
    sm.model.add_max_equality(peak, loads)
    return ObjectiveTerm(peak)


@declare(OBJECTIVE, "domain_spread", reads=())
def domain_spread(sm: SolverModel) -> ObjectiveTerm | None:
    """Per job of several tasks: the task count of its most crowded zone (its existing
    allocations included), summed over jobs: spreads each job across failure domains."""
    peaks = []
    for j, job in enumerate(sm.jobs):
        if len(job.tasks) + job.existing.total < 2:
            continue
        zones: dict[str, list] = {}
        for m in job.candidates:
            zones.setdefault(m.zone, []).extend(sm.tasks_of(j, m.id))
        most = job.existing.total + len(job.tasks)
        peak = sm.model.new_int_var(0, most, f"zone_peak[{job.entry.id}]")
        for zone_name, tasks in zones.items():
            sm.model.add(peak >= job.existing.in_zone(zone_name) + sum(tasks))
        peaks.append(peak)
    if not peaks:
        return None
    return ObjectiveTerm(sum(peaks))



@declare(OBJECTIVE, "borg_rank", reads=("request", "priority", "package"))
def borg_rank(sm: SolverModel) -> ObjectiveTerm | None:
    """How much worse than the best candidate each placement ranks by the Borg chain's
    scorers (stages flattened lexicographically, each in thousandths), on the ledger before
    the batch: among the placements of most tasks, prefer what Borg would (it packs without
    stranding, keeping room for the jobs after this batch)."""
    pipeline = _borg_chain()
    costs = []
    for j, job in enumerate(sm.jobs):
        ctx = ScoreContext(job.existing)
        scores = {m.id: _flat(pipeline.rank(job.spec, m, m.free, ctx)) for m in job.candidates}
        if not scores:
            continue
        best = max(scores.values())
        for t in job.tasks:
            costs.extend((best - scores[mid]) * var for mid, var in sm.x[(j, t)].items() if best > scores[mid])
    return ObjectiveTerm(sum(costs)) if costs else None


def _flat(rank: tuple[float, ...]) -> int:
    value = 0
    for stage in rank:
        value = value * 1001 + round(1000 * stage)
    return value


@cache
def _borg_chain():
    from schedulers.chain_spec import default_chain

    return default_chain("borg").pipeline()
