"""Local reservation while deciding: a small overlay of free resources per touched machine
and each job's placement (existing allocations plus reserved claims). The view is never copied."""

from __future__ import annotations

from collections import Counter
from operator import attrgetter
from typing import Iterable, Mapping

from cellstate.model import Alloc, Machine
from cellstate.resources import Resources
from omega.protocols import CellView
from schedulers.placement_cache import PlacementCache
from schedulers.plugin import JobPlacement


class Reservations:
    """What this decision has reserved so far on top of ``view``."""

    def __init__(self, view: CellView, base_free: dict[str, tuple[Machine, Resources]] | None = None,
                 machines: Mapping[str, Machine] | None = None, placements: PlacementCache | None = None):
        """``base_free``: an optional cache of ``machine.free`` per machine id, kept by the
        caller across decisions; an entry is used only while it holds the same Machine object.
        ``machines``: optionally, the view's machines by id (e.g. a synced index's), which
        saves a view lookup per machine when counting a job's allocations. ``placements``:
        optionally, the caller's cache of jobs' placements across decisions."""
        self.view = view
        self._base = base_free
        self._machines = machines
        self._cache = placements
        self._free: dict[str, Resources] = {}
        self._placements: dict[str, JobPlacement] = {}

    @property
    def touched(self) -> frozenset[str]:
        """Machines whose free resources this decision changed."""
        return frozenset(self._free)

    def free(self, machine: Machine) -> Resources:
        """The machine's free resources minus what this decision reserved on it."""
        free = self._free.get(machine.id)
        if free is not None:
            return free
        if self._base is None:
            return machine.free
        cached = self._base.get(machine.id)
        if cached is not None and cached[0] is machine:
            return cached[1]
        free = machine.free
        self._base[machine.id] = (machine, free)
        return free

    def placement(self, job_id: str) -> JobPlacement:
        """Where the job's tasks are, counting existing allocations (from the view) once."""
        placement = self._placements.get(job_id)
        if placement is None:
            if self._cache is not None:
                placement = self._cache.placement(self.view, job_id, self._machines, count_placement)
            else:
                placement = count_placement(list(self.view.allocs_of(job_id)), self.view, self._machines)
            self._placements[job_id] = placement
        return placement

    def reserve(self, job_id: str, machine: Machine, request: Resources) -> None:
        """Hold ``request`` on ``machine`` for a task of ``job_id``; refuses to overcommit."""
        free = self.free(machine)
        if request.cpu > free.cpu or request.memory > free.memory or request.disk > free.disk \
                or (request.extra and not request.fits_in(free)):
            raise ValueError(f"reservation of {request} on {machine.id} exceeds free {free}")
        self._free[machine.id] = free - request
        self.placement(job_id).add(machine.id, machine.zone, 1, machine.rack)

    def release(self, job_id: str, machine: Machine, request: Resources) -> None:
        """Undo one ``reserve`` of ``request`` on ``machine`` for ``job_id``."""
        self._free[machine.id] = self.free(machine) + request
        self.placement(job_id).add(machine.id, machine.zone, -1, machine.rack)


_MACHINE_ID = attrgetter("machine_id")
_MACHINE, _ZONE, _RACK = attrgetter("machine"), attrgetter("zone"), attrgetter("rack")


def count_placement(allocs: list[Alloc], view: CellView, machines: Mapping[str, Machine] | None) -> JobPlacement:
    """A job's existing allocations ``allocs`` as a ``JobPlacement`` (what ``JobPlacement.add``
    per allocation gives, same dict orders): tasks are counted per machine first, so a machine's
    zone and rack are looked up once (in ``machines`` when given, else in ``view``); when every
    machine is known and holds one task (a big spread job), zones and racks are counted in C too."""
    if not allocs:
        return JobPlacement()
    on_machine = _counted(map(_MACHINE_ID, allocs), len(allocs))
    total = sum(on_machine.values())
    if machines is not None:
        held = list(map(machines.get, on_machine))
    else:
        entries = list(map(view.machine, on_machine))
        held = list(map(_MACHINE, entries)) if all(entries) else [e.machine if e else None for e in entries]
    if total == len(on_machine) and all(held):
        racks = _counted(map(_RACK, held), len(held))
        racks.pop("", None)  # racks are counted only when given
        return JobPlacement(on_machine, _counted(map(_ZONE, held), len(held)), total, racks)
    zones: dict[str, int] = {}
    racks = {}
    for machine, tasks in zip(held, on_machine.values()):
        zone, rack = (machine.zone, machine.rack) if machine is not None else ("", "")
        zones[zone] = zones.get(zone, 0) + tasks
        if rack:
            racks[rack] = racks.get(rack, 0) + tasks
    return JobPlacement(on_machine, zones, total, racks)


_FEW = 32  # fewer items than this are counted by a loop: Counter's own cost is larger


def _counted(items: Iterable[str], size: int) -> dict[str, int]:
    """``dict(Counter(items))`` (``size`` of them): in C for many, by a loop for a few."""
    if size >= _FEW:
        return dict(Counter(items))
    counts: dict[str, int] = {}
    for item in items:
        counts[item] = counts.get(item, 0) + 1
    return counts
