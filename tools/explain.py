"""Why a task goes where it goes, or nowhere: a scheduler chain run for one task of a job,
machine by machine, with every number kept (no sampling, no cache).

``explain(view, job_id, task, pipeline)`` returns an ``Explanation``: per filter (chain
order) how many machines it removed and its top reasons; the top machines with each
scorer's weighted contribution to their stage; and, when nothing fits, the reason the job
record would carry and (with a Borg scheduler that preempts) the eviction it would make.
``to_dict`` gives plain data for ``--json`` and the monitor. ``asks_text`` / ``request_text``
say what a task asks (GPUs as a share or whole devices), also for ``omega job status``;
``fits_no_machine`` why no machine could hold a task even empty (``omega submit`` warns of it).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from cellstate.devices import GPU, DeviceError, bind_in, gpu_ask, visible_devices
from omega.protocols import CellView
from schedulers.pipeline import Pipeline, Rejections
from schedulers.plugins.constraints import describe, satisfied
from schedulers.plugin import ScoreContext
from schedulers.reservation import Reservations


class ExplainError(ValueError):
    """The job or task to explain does not exist or has nothing to explain."""


@dataclass(frozen=True, slots=True)
class FilterStep:
    """One filter: machines it removed (it was the first to fail there) and why, most common first."""

    plugin: str
    removed: int
    reasons: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class MachineScore:
    """A feasible machine: its rank (one value per stage) and each scorer's weighted
    contribution, ``weight * score / sum of the stage's weights``."""

    machine_id: str
    rank: tuple[float, ...]
    contributions: dict[str, float]
    devices: str = ""
    """The GPU devices the task would hold there (``"0,3"``; empty when it asks none)."""


@dataclass(frozen=True, slots=True)
class Explanation:
    job_id: str
    task: int
    machines: int
    feasible: int
    filters: tuple[FilterStep, ...]
    top: tuple[MachineScore, ...]
    unschedulable: str | None = None
    preemption: dict[str, Any] | None = None
    chain: tuple[str, ...] = field(default=())
    scheduler_class: str = ""
    """The class of scheduler that serves the job (``Job.scheduler_class``)."""
    served_by: tuple[str, ...] | None = None
    """The live schedulers of that class (None: not looked up)."""
    asks: str = ""
    """What the task asks (``asks_text``): resources, GPUs as shares or whole devices, constraints."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def request_text(request) -> str:
    """``4 cores, 8192 MiB, 300 milli of one GPU``: every resource a task asks, the GPU amount
    as the ask it stands for (a share of one device or whole devices), other extras by name."""
    parts = [f"{request.cpu / 1000:g} cores", f"{request.memory} MiB"]
    if request.disk:
        parts.append(f"{request.disk} MiB disk")
    try:
        ask = gpu_ask(request)
    except DeviceError:
        ask = None
    for name, amount in request.extra:
        if name == GPU and ask is not None:
            parts.append(f"{ask.milli} milli of one GPU" if ask.shared else f"{ask.count} whole GPU(s)")
        else:
            parts.append(f"{amount:,} {name}")
    return ", ".join(parts)


def asks_text(job) -> str:
    """What each task of ``job`` asks: its request and its constraints."""
    constraints = "; " + ", ".join(describe(c) for c in job.constraints) if job.constraints else ""
    return request_text(job.request) + constraints


def fits_no_machine(job, machines) -> str | None:
    """Why no machine of ``machines`` could hold one task of ``job`` even when empty (its
    constraints met by none, or the resources it asks more than any machine meeting them has);
    None when one could, or when there are no machines at all."""
    machines = list(machines)
    if not machines:
        return None
    held = [m for m in machines if all(satisfied(c, m) for c in job.constraints)]
    if not held:
        return f"no machine meets its constraints ({', '.join(describe(c) for c in job.constraints)})"
    request = job.request
    if any(request.fits_in(m.capacity) for m in held):
        return None
    where = " meeting its constraints" if job.constraints else ""
    short = []
    for name in request.names():
        most = max(m.capacity.get(name) for m in held)
        if request.get(name) > most:
            short.append(f"{name} {_amount(name, request.get(name))} (at most {_amount(name, most)} on a machine{where})")
    return "asks " + "; ".join(short) if short else f"no machine{where} has all it asks at once"


def _amount(name: str, value: int) -> str:
    if name == "cpu":
        return f"{value / 1000:g} cores"
    if name == GPU:
        return f"{value / 1000:g} GPUs"
    return f"{value:,} MiB" if name in ("memory", "disk") else f"{value:,}"


def pick_task(view: CellView, job_id: str, task: int | None) -> int:
    """``task`` checked against the job, or its first pending task; ExplainError otherwise."""
    entry = view.job(job_id)
    if entry is None:
        raise ExplainError(f"no job {job_id!r} in the cell")
    record = entry.record
    if task is None:
        pending = record.pending_tasks()
        if not pending:
            raise ExplainError(f"job {job_id!r} has no pending task; name one (0..{len(record.tasks) - 1})")
        return pending[0]
    if not 0 <= task < len(record.tasks):
        raise ExplainError(f"job {job_id!r} has no task {task} (0..{len(record.tasks) - 1})")
    return task


def explain(view: CellView, job_id: str, task: int | None, pipeline: Pipeline, top: int = 5,
            scheduler=None) -> Explanation:
    """Run ``pipeline`` for one task of ``job_id`` over every machine of ``view``. With a
    ``scheduler`` that has a ``preemption`` pass (BorgScheduler), an unschedulable task also
    gets the eviction that scheduler would make."""
    task = pick_task(view, job_id, task)
    spec = view.job(job_id).record.job
    res = Reservations(view)
    placement = res.placement(job_id)
    ctx = ScoreContext(placement)
    removed: dict[str, Counter] = {f.name: Counter() for f in pipeline.filters}
    rejections, scored, count = Rejections(), [], 0
    for entry in view.machines():
        count += 1
        machine = entry.machine
        free = res.free(machine)
        verdict = pipeline.check(spec, machine, free, placement.on_machine(machine.id))
        if not verdict.ok:
            removed[verdict.plugin][verdict.reason] += 1
            rejections.add(verdict)
            continue
        scored.append(_score(pipeline, spec, machine, free, ctx))
    scored.sort(key=lambda s: (tuple(-x for x in s.rank), s.machine_id))
    steps = tuple(FilterStep(name, sum(c.values()), tuple(c.most_common(3))) for name, c in removed.items())
    unschedulable = None if scored else rejections.reason()
    preemption = _preemption(scheduler, view, job_id, task) if unschedulable else None
    return Explanation(job_id, task, count, len(scored), steps, tuple(scored[:top]), unschedulable, preemption,
                       pipeline.names(), spec.scheduler_class, asks=asks_text(spec))


def _score(pipeline: Pipeline, spec, machine, free, ctx) -> MachineScore:
    contributions, rank = {}, []
    for stage in pipeline.stages:
        weights = sum(w for _, w in stage)
        total = 0.0
        for scorer, weight in stage:
            part = weight * scorer.score(spec, machine, free, ctx) / weights
            contributions[scorer.name] = part
            total += part
        rank.append(total)
    bound = bind_in(spec.request, free) if spec.request.extra else None
    return MachineScore(machine.id, tuple(rank), contributions, visible_devices(bound) if bound is not None else "")


def _preemption(scheduler, view: CellView, job_id: str, task: int) -> dict[str, Any] | None:
    if scheduler is None or not getattr(scheduler, "preemption", False):
        return None
    entry = view.job(job_id)
    if entry.record.tasks[task] != "p":
        return None
    decision = scheduler.decide(entry, [task], view)
    if not decision.claims:
        return None
    claim = decision.claims[0]
    return {"machine_id": claim.machine_id, "evicts": [list(v) for v in claim.evicts]}


def render(ex: Explanation) -> str:
    """A human-readable report of ``ex``."""
    lines = [f"job {ex.job_id} task {ex.task}: {ex.feasible} of {ex.machines} machines feasible"]
    if ex.asks:
        lines.append(f"asks: {ex.asks}")
    if ex.served_by is not None:
        lines.append(f"scheduler class {ex.scheduler_class}: served by {', '.join(ex.served_by)}" if ex.served_by
                     else f"scheduler class {ex.scheduler_class}: no live scheduler serves it; the job waits "
                          f"until one runs (omega scheduler run --kind {ex.scheduler_class})")
    lines += [f"chain: {' -> '.join(ex.chain)}", "filters (first failure removes the machine):"]
    for step in ex.filters:
        why = ", ".join(f"{reason or '-'} ({n})" for reason, n in step.reasons)
        lines.append(f"  {step.plugin:<20} removed {step.removed:>6}" + (f"   {why}" if why else ""))
    if ex.top:
        lines.append(f"top {len(ex.top)} machines (rank per stage; weighted contribution per scorer):")
        for m in ex.top:
            parts = ", ".join(f"{name} {value:.3f}" for name, value in m.contributions.items())
            devices = f"   GPU devices {m.devices}" if m.devices else ""
            lines.append(f"  {m.machine_id:<16} rank {', '.join(f'{x:.3f}' for x in m.rank)}   {parts}{devices}")
    if ex.unschedulable:
        lines.append(f"unschedulable: {ex.unschedulable}")
        if ex.preemption:
            victims = ", ".join(f"{j}/{t}" for j, t in ex.preemption["evicts"])
            lines.append(f"preemption would place it on {ex.preemption['machine_id']} evicting {victims}")
    return "\n".join(lines)
