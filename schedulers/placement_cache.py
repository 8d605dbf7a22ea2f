"""``PlacementCache``: a scheduler's jobs' placements (their existing allocations counted per
machine, zone and rack) kept across decisions.

A failing big job is decided again and again while its allocations stay the same; counting
thousands of them each time was a large part of a decision. A cached placement is handed out
(shared, ``JobPlacement.share``: a decision's first reservation copies its counts) only while
the view holds the same allocations in the same order (equal ones count alike; list equality
tests identity first, in C) and no machine appeared, went or changed zone or rack
(``epoch``, followed through ``MachineChanges``; a view that cannot report its changed machines
gets no caching). When the view holds those allocations followed by more (a job's new tasks
come after its older ones), only the new ones are counted in; ``count`` must count as
``JobPlacement.add`` per allocation does (``reservation.count_placement``). A kept placement
and its shares carry one ``stamp`` until it is counted again, so a ``HostMemo`` knows them
equal without comparing."""

from __future__ import annotations

from itertools import count as counter
from itertools import islice
from typing import Any, Callable, Mapping

from cellstate.model import Alloc, Machine
from omega.protocols import CellView
from schedulers.machine_changes import MachineChanges, tracks_changes
from schedulers.plugin import JobPlacement

Count = Callable[[list[Alloc], CellView, "Mapping[str, Machine] | None"], JobPlacement]
_STAMPS = counter(1)  # every kept placement's stamp is new


class PlacementCache:
    """Placements by job id, each with the allocations and the ``epoch`` it was counted at."""

    def __init__(self, limit: int = 4096, smallest: int = 32) -> None:
        """``limit``: jobs kept (all are forgotten past it); ``smallest``: fewer allocations
        than this are counted anew, not kept."""
        self.limit = limit
        self.smallest = smallest
        self.epoch = 0
        self._view: CellView | None = None
        self._changes: MachineChanges | None = None
        self._where: dict[str, tuple[str, str]] = {}  # machine id -> (zone, rack)
        self._held: dict[str, tuple[int, list[Alloc], JobPlacement]] = {}

    def placement(self, view: CellView, job_id: str, machines: Mapping[str, Machine] | None,
                  count: Count) -> JobPlacement:
        """The job's placement: the cached one's copy when still exact, else ``count``'s."""
        allocs = list(view.allocs_of(job_id))
        if len(allocs) < self.smallest or not self._follow(view):
            return count(allocs, view, machines)
        held = self._held.get(job_id)
        if held is not None and held[0] == self.epoch and len(held[1]) <= len(allocs):
            kept, placement = held[1], held[2]
            if (allocs if len(kept) == len(allocs) else allocs[:len(kept)]) == kept:  # maybe more after them
                if len(kept) < len(allocs):
                    _add(placement, allocs[len(kept):], view, machines)
                    placement.stamp = next(_STAMPS)
                    self._held[job_id] = (self.epoch, allocs, placement)
                return placement.share()
        placement = count(allocs, view, machines)
        placement.stamp = next(_STAMPS)
        if len(self._held) >= self.limit:
            self._held.clear()
        self._held[job_id] = (self.epoch, allocs, placement)
        return placement.share()

    def _follow(self, view: CellView) -> bool:
        """Bring ``epoch`` up to ``view``; False when the view cannot report its changes."""
        if view is not self._view:
            self._view = view
            self._changes = MachineChanges(view) if tracks_changes(view) else None
            self._held.clear()
            if self._changes is not None:
                self._relist(view)
        if self._changes is None:
            return False
        where, machine_of = self._where, view.machine
        for machine_id in self._changes.take():
            entry = machine_of(machine_id)
            now = (entry.machine.zone, entry.machine.rack) if entry is not None else None
            if where.get(machine_id) != now:
                if now is None:
                    del where[machine_id]
                else:
                    where[machine_id] = now
                self.epoch += 1
        if len(where) != view.machine_count():  # the view lost track (e.g. a relist dropped machines)
            self._relist(view)
        return True

    def _relist(self, view: CellView) -> None:
        self._where = {entry.id: (entry.machine.zone, entry.machine.rack) for entry in view.machines()}
        self.epoch += 1


def _add(placement: JobPlacement, allocs: list[Alloc], view: CellView,
         machines: Mapping[str, Machine] | None) -> None:
    """Count ``allocs`` into ``placement`` as ``JobPlacement.add`` per allocation (a machine
    unknown to ``machines``, or else to ``view``, counts in zone "" and no rack)."""
    for alloc in allocs:
        machine_id = alloc.machine_id
        if machines is not None:
            machine = machines.get(machine_id)
        else:
            entry = view.machine(machine_id)
            machine = entry.machine if entry is not None else None
        if machine is None:
            placement.add(machine_id, "")
        else:
            placement.add(machine_id, machine.zone, 1, machine.rack)


class HostMemo:
    """Per job, a lookup derived from its placement's tasks per machine (e.g. the rows of its
    hosts in an index), kept across decisions: a failing big job is decided again and again on
    the same placement. Reused while the tasks per machine are equal (the lookup's order may
    differ from the placement's: callers' results must not depend on it) and ``basis`` (what
    else the lookup read, e.g. the index's row layout) compares equal. A placement's ``stamp``
    (``JobPlacement``), when given and the same as the kept one's, tells equal tasks per
    machine without comparing them."""

    def __init__(self, limit: int = 1024, smallest: int = 32) -> None:
        """``limit``: jobs kept (all are forgotten past it); ``smallest``: placements on fewer
        machines are looked up anew, not kept."""
        self.limit = limit
        self.smallest = smallest
        self._held: dict[str, tuple[dict[str, int], Any, Any, int | None]] = {}

    def get(self, job_id: str, placed: dict[str, int], basis: Any,
            look_up: Callable[[dict[str, int]], Any], join: Callable[[Any, Any], Any] | None = None,
            stamp: int | None = None) -> Any:
        """``look_up(placed)``, or the value kept for the job when still exact. With ``join``
        (the lookup of two disjoint placements from each's), a placement that only gained
        machines since (appended: placements add new machines last) has only those looked up.
        ``stamp``: the placement's, if it has one."""
        if len(placed) < self.smallest:
            return look_up(placed)
        held = self._held.get(job_id)
        value = None
        if held is not None and held[1] == basis:
            kept = held[0]
            if (stamp is not None and held[3] == stamp) or kept == placed:
                return held[2]
            if join is not None and len(kept) < len(placed) and kept.items() <= placed.items():
                more = dict(islice(placed.items(), len(kept), None))
                if more.keys().isdisjoint(kept):
                    value = join(held[2], look_up(more))
        if value is None:
            value = look_up(placed)
        if len(self._held) >= self.limit:
            self._held.clear()
        self._held[job_id] = (dict(placed), basis, value, stamp)
        return value
