"""``FreeIndex``: the free resources of every machine of a view as numpy arrays, in the batch
scheduler's shuffled machine order, kept current from the view's changed-machine ids
(``MachineChanges`` over ``ReplicaView.take_changed_machines``). It lets the batch scheduler's full scan examine only
the machines whose free resources hold the request (``candidates``), and count why the others
were excluded (``first_short``) without running the filters on each of them.

Exact for chains whose filters before the first resource fit pass any up machine without the
job's tasks (``passes_unplaced``; those reading the state accepting only ``up``), with the
resource fit comparing cpu, memory and disk, and requests without extra resources
(``applies``): a machine outside the candidates then fails the resource fit on its first short
resource (cpu, memory, disk, in that order), unless it holds a task of the job or is not up —
those few are checked by the real filters. The filters' declared traits say so
(``schedulers.plugin.FilterTraits``), not their names.
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import repeat
from typing import Iterator

import numpy as np

from cellstate.model import MachineState
from cellstate.resources import Resources
from schedulers.machine_changes import MachineChanges
from schedulers.plugin import filter_traits
from schedulers.row_slots import sorted_distinct

_UP_ONLY = frozenset({MachineState.UP})
_UNKNOWN = -1  # free amount of a machine that is gone: never a candidate
_GONE = (_UNKNOWN, _UNKNOWN, _UNKNOWN, False)  # a gone machine's row
_FOUND_KEPT = 64  # requests whose candidates are kept (and brought up to date by the moved rows)
_PATCHED_MOST = 64  # moved rows a kept request's candidates are brought up to date by, at most
_MOVED_KEPT = 4096  # moved rows logged before the kept candidates are forgotten


def applies(filters, request: Resources) -> bool:
    """True when the index gives the full scan's exact result for ``filters`` (see module)."""
    return not request.extra and chain_applies(filters)


def chain_applies(filters) -> bool:
    """``applies`` for requests without extra resources (the filters' declared traits only)."""
    for f in filters:
        traits = filter_traits(f)
        if traits.resource_fit:
            return not traits.ignores  # compares cpu, memory and disk (and every extra)
        if not traits.passes_unplaced:
            return False
        if traits.accepts_states is not None and traits.accepts_states != _UP_ONLY:
            return False
    return False


def first_fit(filters):
    """(the filters before the first resource fit, that resource fit); ((), None) without one."""
    for i, f in enumerate(filters):
        if filter_traits(f).resource_fit:
            return tuple(filters[:i]), f
    return (), None


def _row_of(entry) -> tuple[int, int, int, bool]:
    """A machine entry's free cpu, memory, disk and up-ness (``_GONE`` for None)."""
    if entry is None:
        return _GONE
    machine = entry.machine
    capacity, allocated = machine.capacity, machine.allocated  # Machine.free's core amounts
    return (capacity.cpu - allocated.cpu, capacity.memory - allocated.memory, capacity.disk - allocated.disk,
            machine.state is MachineState.UP)


class FreeIndex:
    """Free cpu, memory, disk and up-ness per position of ``ids`` (the scheduler's order)."""

    def __init__(self, view, ids: list[str]):
        self.view = view
        self._changes = MachineChanges(view)
        self.ids = ids
        self.position = {machine_id: i for i, machine_id in enumerate(ids)}
        self.rows = [_row_of(view.machine(machine_id)) for machine_id in ids]  # (cpu, memory, disk, up) per position
        self._stale: set[int] = set()  # positions whose row the numpy columns do not hold yet
        values = np.array(self.rows, dtype=np.int64).reshape(-1, 4)
        self.cpu, self.memory, self.disk = values[:, 0].copy(), values[:, 1].copy(), values[:, 2].copy()
        self.up = values[:, 3] != 0
        self._moved: list[int] = []  # positions whose row changed, in order (a log since ``_found`` was emptied)
        self._found: dict[tuple, tuple[list[int], int]] = {}  # ``_with_room`` by request, len(_moved) then
        self._not_up: list[int] | None = None  # ``not_up`` on the current columns

    def refresh(self) -> None:
        """Take in the machines that changed since the last refresh."""
        view, position, rows, stale, moved = self.view, self.position, self.rows, self._stale, self._moved
        for machine_id in self._changes.take():
            i = position.get(machine_id)
            if i is not None:
                row = _row_of(view.machine(machine_id))
                if row != rows[i]:
                    rows[i] = row
                    stale.add(i)
                    moved.append(i)
        if len(moved) > _MOVED_KEPT:
            moved.clear()
            self._found.clear()

    def _columns(self) -> None:
        """Bring the numpy columns to the rows (a refresh sets rows only)."""
        if not self._stale:
            return
        self._not_up = None
        rows, cpu, memory, disk, up = self.rows, self.cpu, self.memory, self.disk, self.up
        for i in self._stale:  # scalar writes: cheaper than building arrays for a refresh's few rows
            cpu[i], memory[i], disk[i], up[i] = rows[i]
        self._stale.clear()

    def _with_room(self, request: Resources) -> list[int]:
        """Positions of up machines whose free resources hold ``request``, ascending. Kept per
        request (a decision's tasks share theirs, and requests recur): a kept list is brought
        up to date by the rows moved since, if few, else found again on the columns."""
        moved, key = self._moved, (request.cpu, request.memory, request.disk)  # hashed in C
        kept = self._found.get(key)
        if kept is not None and len(moved) - kept[1] <= _PATCHED_MOST:
            found, seen = kept
            if seen < len(moved):
                self._patch(found, moved[seen:], request)
        else:
            self._columns()
            room = self.cpu >= request.cpu
            room &= self.memory >= request.memory
            room &= self.disk >= request.disk
            room &= self.up
            found = np.flatnonzero(room).tolist()
            if kept is None and len(self._found) >= _FOUND_KEPT:
                self._found.clear()
        self._found[key] = (found, len(moved))
        return found

    def _patch(self, found: list[int], positions: list[int], request: Resources) -> None:
        """Bring ``found`` (``_with_room`` of ``request``) up to date at ``positions``, in place."""
        rows, cpu, memory, disk = self.rows, request.cpu, request.memory, request.disk
        for i in set(positions):
            c, m, d, up = rows[i]
            at = bisect_left(found, i)
            held = at < len(found) and found[at] == i
            if up and c >= cpu and m >= memory and d >= disk:
                if not held:
                    found.insert(at, i)
            elif held:
                del found[at]

    def candidates(self, request: Resources, cursor: int) -> Iterator[int]:
        """Positions of up machines whose free resources hold ``request``, in walk order from
        ``cursor`` (wrapping around)."""
        found = self._with_room(request)
        split = bisect_left(found, cursor) if cursor else 0
        later, earlier = found[split:], found[:split]
        yield from later
        yield from earlier

    def worth_examining(self, request: Resources, start: int, count: int) -> Iterator[int]:
        """Offsets (0 … ``count`` - 1) from position ``start`` (wrapping around) of the machines
        that are not up (or gone) or whose free resources hold ``request``: every other one is
        short of a core resource. (A few machines: a pass over ``rows``, not numpy; lazily, as
        the caller usually stops at the first few.)"""
        rows, n = self.rows, len(self.ids)
        window = rows[start:start + count]
        if start + count > n:
            window += rows[:start + count - n]
        cpu, memory, disk = request.cpu, request.memory, request.disk
        for offset, (c, m, d, up) in enumerate(window):
            if not up or (c >= cpu and m >= memory and d >= disk):
                yield offset

    def not_up(self) -> list[int]:
        """Positions of machines that are not up (or gone)."""
        self._columns()
        if self._not_up is None:
            self._not_up = np.flatnonzero(~self.up).tolist()
        return self._not_up

    def some_up(self) -> int | None:
        """The position of some up machine (None: none is)."""
        self._columns()
        i = int(self.up.argmax())
        return i if self.up[i] else None

    def hosts(self, placed: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
        """The positions of the machines holding some of the job's tasks (``placed``: tasks
        per machine id) and the count on each (looked up in C: a big job has thousands)."""
        at = np.array(list(map(self.position.get, placed, repeat(-1))), dtype=np.int64)
        tasks = np.fromiter(placed.values(), dtype=np.int64, count=len(placed))
        held = (at >= 0) & (tasks > 0)
        return at[held], tasks[held]

    @staticmethod
    def join_hosts(first: tuple[np.ndarray, np.ndarray], second: tuple[np.ndarray, np.ndarray]):
        """The ``hosts`` of two disjoint placements, from each's."""
        return np.concatenate((first[0], second[0])), np.concatenate((first[1], second[1]))

    def hosts_without_room(self, request: Resources, placed: dict[str, int],
                           hosts: tuple[np.ndarray, np.ndarray] | None = None) -> list[tuple[int, list[int]]]:
        """The up machines without room for ``request`` that hold some of the job's tasks
        (``placed``: tasks per machine id, or ``hosts``: their ``hosts``), grouped by that
        count: [(tasks, positions)]."""
        at, tasks = self.hosts(placed) if hosts is None else hosts
        self._columns()
        room = (self.cpu[at] >= request.cpu) & (self.memory[at] >= request.memory) & (self.disk[at] >= request.disk)
        without = self.up[at] & ~room
        at, tasks = at[without], tasks[without]
        return [(here, at[tasks == here].tolist()) for here in sorted_distinct(tasks)]

    def first_short(self, request: Resources, skip: list[int]) -> dict[str, int]:
        """How many up machines, outside the candidates and the ``skip`` positions, lack each
        resource first (cpu, then memory, then disk: resources_fit's order)."""
        self._columns()
        up = self.up.copy()
        if skip:
            up[skip] = False
        counts = {}
        for name, column, amount in (("cpu", self.cpu, request.cpu), ("memory", self.memory, request.memory),
                                     ("disk", self.disk, request.disk)):
            short = column < amount
            short &= up
            count = int(np.count_nonzero(short))
            if count:
                counts[name] = count
                up ^= short  # short ⊆ up: they are counted once
        return counts
