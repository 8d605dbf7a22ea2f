"""Candidate machines of a job for the solver: pre-filtered by the hard filters of the Borg
chain (on the view's ledgers and the job's existing allocations), then capped to the ``cap``
machines with the most room for the job's task (how many of its tasks fit the free
resources; ties by total free share, then id). Machines the greedy choice used are always
kept, so its solution is a valid hint. The model stays at ``tasks x candidates`` booleans."""

from __future__ import annotations

from typing import Iterable

from cellstate.model import Job, Machine
from cellstate.resources import Resources
from omega.protocols import CellView
from schedulers.pipeline import Pipeline, Rejections
from schedulers.plugin import JobPlacement
from schedulers.registry import make_filter

PREFILTERS = ("machine_state", "different_machine", "max_per_machine", "resources_fit", "constraints")


def placement_of(view: CellView, job_id: str) -> JobPlacement:
    """Where the job's tasks already are (its allocations in the view), by machine and zone."""
    placement = JobPlacement()
    for alloc in view.allocs_of(job_id):
        entry = view.machine(alloc.machine_id)
        placement.add(alloc.machine_id, entry.machine.zone if entry else "")
    return placement


def room(request: Resources, free: Resources) -> tuple[int, float]:
    """(tasks of ``request`` that fit ``free``, sum of free/request over asked resources)."""
    shares = [(free.get(r), request.get(r)) for r in request.names() if request.get(r) > 0]
    if not shares:
        return (1 << 30, 0.0)
    fit = min(max(0, f) // q for f, q in shares)
    return fit, sum(max(0, f) / q for f, q in shares)


class CandidatePicker:
    """Picks each job's candidate machines (see the module docstring); ``prefilter`` False
    keeps every machine (the declarations alone then decide feasibility)."""

    def __init__(self, cap: int, prefilter: bool = True) -> None:
        self.cap = cap
        self.pipeline = Pipeline([make_filter(name) for name in PREFILTERS]) if prefilter else None

    def pick(self, spec: Job, existing: JobPlacement, view: CellView,
             keep: Iterable[str] = ()) -> tuple[list[Machine], Rejections]:
        """The candidates (best room first) and the tally of why the others were excluded."""
        rejections = Rejections()
        feasible: list[Machine] = []
        for entry in view.machines():
            m = entry.machine
            if self.pipeline is not None:
                verdict = self.pipeline.check(spec, m, m.free, existing.on_machine(m.id))
                if not verdict.ok:
                    rejections.add(verdict)
                    continue
            feasible.append(m)
        feasible.sort(key=lambda m: (tuple(-v for v in room(spec.request, m.free)), m.id))
        chosen = feasible[:self.cap]
        have = {m.id for m in chosen}
        for mid in keep:
            entry = view.machine(mid)
            if mid not in have and entry is not None:
                chosen.append(entry.machine)
                have.add(mid)
        return chosen, rejections
