"""The service scheduler's machine index: where the best-ranked machine for a task can be,
without scoring every feasible machine.

The service chain ranks lexicographically: fewer of the job's tasks in the zone, then on the
machine, then the least-loaded machine (the largest mean fraction of capacity left after the
task), ties to the smaller machine id. Within one *capacity class* (machines with the same
capacities of the least_loaded resources) that load score orders machines exactly as their
free resources do, whatever the request: score = Σ (free_r − request_r) / cap_r / n. So the
index keeps, per zone and capacity class, the machines sorted by an exact integer load key
(Σ free_r · P / cap_r, P = Π cap_r; most free first, then id). The best machine of a class for
a task is the first machine of that list that passes the filters and holds none of the job's
tasks; the best of a zone is the best of its classes' firsts (ranked by the chain itself).
Each list (``ClassList``) also holds its keys' free amounts as a numpy array in list order,
so the search finds the machines of a list with room for a request in one vector compare.

The index follows the view across decisions: ``sync`` takes in only the entries that changed,
as the view reports them (``MachineChanges``) or else found by identity in one pass. Their
free columns (``FreeColumns``) change at once; their lists' moves are staged until the list
is read (``lists_of``), so a decision that finds no room at all moves none, and a list read
after many changes is rebuilt in one sort. Machines in a state the chain never accepts are
not listed.
"""

from __future__ import annotations

from itertools import compress
from math import prod
from operator import attrgetter, is_not, mul, sub
from typing import Iterable, NamedTuple

import numpy as np

from cellstate.model import Machine, MachineState
from cellstate.resources import Resources
from cellstate.plan import MachineEntry
from omega.protocols import CellView
from schedulers.class_list import ClassList, SortKey
from schedulers.machine_changes import MachineChanges, tracks_changes
from schedulers.row_slots import RowSlots, with_row

_CORE = ("cpu", "memory", "disk")
_ABSENT = np.iinfo(np.int64).min  # the free amounts of a row not listed: short of any request but absurd ones


class MachineIndex:
    """Per zone, per capacity class: machines sorted by free resources (see module docstring)."""

    def __init__(self, resources: tuple[str, ...], accept: frozenset[MachineState] | None) -> None:
        self.resources = resources
        self.accept = accept
        self._frees = attrgetter(*resources) if set(resources) <= set(_CORE) else None
        self._class: dict[str, tuple] = {}  # id -> (capacity, zone, its list, load weights)
        self.machines: dict[str, Machine] = {}
        self.zones: dict[str, dict[tuple[int, ...], ClassList]] = {}
        self._slots: dict[str, tuple[ClassList, SortKey]] = {}  # id -> (its list, its key)
        self._snapshot: list[MachineEntry] = []
        self._view: CellView | None = None  # the view last synced to
        self._changes: MachineChanges | None = None  # its changed machines, when it reports them
        self._known: dict[str, MachineEntry] = {}
        self.columns = FreeColumns(len(resources))  # the keys' free amounts, for vectorized tallies
        self._stale: set[str] = set()  # listed by a decision's reservations, not by their ledger

    # -- following the view -----------------------------------------------------------------

    def sync(self, view: CellView) -> int:
        """Bring the index to ``view``; returns how many machines were (re)indexed."""
        if self._stale and (view is not self._view or self._changes is None):
            self._restore()
        if view is not self._view:  # a new view: compare every machine by id, then follow it
            self._view = view
            self._changes = MachineChanges(view) if tracks_changes(view) else None
            self._snapshot = entries = list(view.machines())
            return self._resync(entries)
        if self._changes is not None:
            return self._sync_changed(view)
        entries = list(view.machines())
        old = self._snapshot
        self._snapshot = entries
        if len(entries) == len(old):
            changed = list(compress(entries, map(is_not, entries, old)))  # in C: this runs per decision
            known = self._known
            if all(e.machine.id in known for e in changed):
                for entry in changed:
                    self._update(entry)
                return len(changed)
        return self._resync(entries)

    def _sync_changed(self, view: CellView) -> int:
        """Take in the machines the view reports as changed; compare all of them by id when
        the counts then disagree (the view lost track, e.g. a relist dropped machines)."""
        known, machine_of = self._known, view.machine
        relisted: set[str] = set()
        for machine_id in sorted(self._changes.take()):
            entry = machine_of(machine_id)
            if entry is None:
                if machine_id in known:
                    self._drop(machine_id)
            elif known.get(machine_id) is not entry:
                self._update(entry)
                relisted.add(machine_id)
        changed = len(relisted)
        if self._stale:
            self._restore(relisted)
        if len(known) != view.machine_count():
            return changed + self._resync(list(view.machines()))
        return changed

    def _resync(self, entries: list[MachineEntry]) -> int:
        """Machines came or went: compare by id."""
        current = {e.machine.id: e for e in entries}
        for machine_id in [m for m in self._known if m not in current]:
            self._drop(machine_id)
        changed = [e for mid, e in current.items() if self._known.get(mid) is not e]
        for entry in changed:
            self._update(entry)
        return len(changed)

    def _drop(self, machine_id: str) -> None:
        self._unlist(machine_id)
        del self._known[machine_id]
        del self.machines[machine_id]
        self.columns.drop(machine_id)
        self._class.pop(machine_id, None)

    def _update(self, entry: MachineEntry) -> None:
        machine = entry.machine
        machine_id = machine.id
        self._known[machine_id] = entry
        if machine_id not in self.machines:
            self.columns.add(machine_id)
        self.machines[machine_id] = machine
        self.place(machine)

    def restore_later(self, machine_ids: Iterable[str]) -> None:
        """Machines a decision listed by its reservations: they go back to their ledger's place
        at the next ``sync`` (those the view then reports as changed are re-listed by it anyway;
        a list's order depends only on its keys, not on the order machines were placed in)."""
        self._stale.update(machine_ids)

    def _restore(self, skip: set[str] = frozenset()) -> None:
        """List the stale machines (but ``skip``: already re-listed) by their ledger."""
        machines = self.machines
        for machine_id in self._stale:
            machine = machines.get(machine_id) if machine_id not in skip else None
            if machine is not None:
                self.place(machine)
        self._stale.clear()

    # -- positions --------------------------------------------------------------------------

    def place(self, machine: Machine, free: Resources | None = None) -> int:
        """(Re)list ``machine`` by ``free`` (by default its ledger's; unlisted when its state is
        never accepted); returns ``id()`` of its list (0: unlisted)."""
        machine_id = machine.id
        if self.accept is not None and machine.state not in self.accept:
            self._unlist(machine_id)
            return 0
        known = self._class.get(machine_id)
        if known is None or (known[0] is not machine.capacity and known[0] != machine.capacity) \
                or known[1] != machine.zone:
            known = self._class[machine_id] = self._class_of(machine)
        listed = known[2]
        frees = self.frees_of(free) if free is not None else self._ledger_frees(machine)
        key = (-sum(map(mul, frees, known[3])), machine_id, *frees)
        slots = self._slots
        slot = slots.get(machine_id)
        if slot is None:
            listed.staged.setdefault(machine_id, None)
        elif slot[0] is listed:
            if slot[1] == key:  # e.g. a reserved machine whose claim the view now holds
                return id(listed)
            listed.staged.setdefault(machine_id, slot[1])
        else:
            slot[0].staged.setdefault(machine_id, slot[1])
            listed.staged.setdefault(machine_id, None)
        slots[machine_id] = (listed, key)
        self.columns.list(machine_id, frees)
        return id(listed)

    def frees_of(self, amounts: Resources) -> tuple[int, ...]:
        """The amounts of the least_loaded resources, in order."""
        if self._frees is None:
            return tuple(amounts.get(r) for r in self.resources)
        got = self._frees(amounts)
        return got if type(got) is tuple else (got,)

    def _ledger_frees(self, machine: Machine) -> tuple[int, ...]:
        """``frees_of(machine.free)``, without building that free."""
        amounts = self._frees
        if amounts is None:
            return self.frees_of(machine.free)
        capacity, allocated = amounts(machine.capacity), amounts(machine.allocated)
        if type(capacity) is tuple:
            return tuple(map(sub, capacity, allocated))
        return (capacity - allocated,)

    def _class_of(self, machine: Machine) -> tuple:
        """(capacity, zone, the list of its zone and capacity class, load weights P / cap_r):
        Σ free_r · P / cap_r orders a class exactly as the least_loaded score does."""
        caps = tuple(machine.capacity.get(r) for r in self.resources)
        total = prod(c for c in caps if c > 0)
        weights = tuple(total // c if c > 0 else 0 for c in caps)
        classes = self.zones.get(machine.zone)
        if classes is None:
            classes = self.zones[machine.zone] = {}
        listed = classes.get(caps)
        if listed is None:
            listed = classes[caps] = ClassList(len(self.resources), weights, by_load=True)
        return machine.capacity, machine.zone, listed, listed.weights

    def _unlist(self, machine_id: str) -> None:
        slot = self._slots.pop(machine_id, None)
        if slot is not None:
            listed, key = slot
            listed.staged.setdefault(machine_id, key)
            self.columns.unlist(machine_id)

    def lists_of(self, zone: str) -> Iterable[ClassList]:
        """The zone's lists, each with its staged changes applied."""
        classes = self.zones.get(zone)
        if not classes:
            return ()
        for listed in classes.values():
            if listed.staged:
                self._settle(listed)
        return classes.values()

    def _settle(self, listed: ClassList) -> None:
        """Apply the changes staged in ``listed``: its machines' keys become their slots' keys."""
        slots, changes = self._slots, []
        for machine_id, old in listed.staged.items():
            slot = slots.get(machine_id)
            key = slot[1] if slot is not None and slot[0] is listed else None
            if key != old:
                changes.append((old, key))
        listed.staged = {}
        listed.apply(changes)


class Shortage(NamedTuple):
    """``FreeColumns.short`` of a request: ``totals[r]``, how many rows' keys are short of
    least_loaded resource r or of one before it (every row not listed is); ``lacking``, which
    rows are short of some resource."""

    totals: list[int]
    lacking: np.ndarray


class FreeColumns:
    """Every known machine's row: listed or not and, when listed, the free amounts of its key
    (``free[r, row]``: of least_loaded resource r; a row not listed holds ``_ABSENT``), so a
    tally over all machines is a few vector compares."""

    def __init__(self, width: int) -> None:
        self._slots: RowSlots[str] = RowSlots()
        self._row = self.row_of = self._slots.row  # machine id -> its row
        self.ids = self._slots.keys  # machine id of each row (None: spare)
        self.free = np.full((width, 64), _ABSENT, dtype=np.int64)
        self._free_rows = tuple(self.free)
        self.listed = np.zeros(64, dtype=bool)
        self.listed_count = 0
        self.known = np.zeros(64, dtype=bool)
        self.layout = 0  # changes whenever a machine takes or gives up its row
        self._unlisted: list[str] | None = None  # ``unlisted`` (None: not known yet)

    def add(self, machine_id: str) -> None:
        if machine_id in self._slots:
            return
        row = self._slots.take(machine_id)
        if row >= self.free.shape[1]:
            self.free = np.concatenate((self.free, np.full_like(self.free, _ABSENT)), axis=1)
            self._free_rows = tuple(self.free)
        self.listed = with_row(self.listed, row, False)
        self.known = with_row(self.known, row, False)
        self.known[row] = True
        self.layout += 1
        self._unlisted = None

    def drop(self, machine_id: str) -> None:
        self.unlist(machine_id)
        row = self._slots.release(machine_id)
        self.known[row] = False
        self.layout += 1
        self._unlisted = None

    def list(self, machine_id: str, frees: tuple[int, ...]) -> None:
        row = self._row[machine_id]
        for column, amount in zip(self._free_rows, frees):  # scalar writes: cheaper than a column's
            column[row] = amount
        if not self.listed[row]:
            self.listed[row] = True
            self.listed_count += 1
            self._unlisted = None

    def unlist(self, machine_id: str) -> None:
        row = self._row.get(machine_id)
        if row is not None and self.listed[row]:
            self.listed[row] = False
            self.listed_count -= 1
            self.free[:, row] = _ABSENT
            self._unlisted = None

    def unlisted(self) -> list[str]:
        """The ids of the known machines that are not listed, in row order (kept until a
        machine is listed, unlisted, added or dropped)."""
        if self._unlisted is None:
            n = len(self.ids)
            rows = np.flatnonzero(self.known[:n] & ~self.listed[:n]).tolist()
            self._unlisted = [self.ids[row] for row in rows]
        return self._unlisted

    def short(self, need: tuple[int, ...], rows: np.ndarray | None = None) -> Shortage:
        """Which rows' keys (of ``rows`` only, if given) hold less of some least_loaded resource
        r than ``need[r]``, and how many for each prefix of the resources (one compare per resource)."""
        at = slice(0, len(self.ids)) if rows is None else rows
        free = self.free
        lacking = free[0, at] < need[0]
        if min(need) <= _ABSENT:  # no real request: rows not listed are made short of it
            lacking |= ~self.listed[at]
        totals = [int(np.count_nonzero(lacking))]
        for column in range(1, len(need)):
            lacking |= free[column, at] < need[column]
            totals.append(int(np.count_nonzero(lacking)))
        return Shortage(totals, lacking)

    def any_room(self, short: Shortage) -> bool:
        """True when some listed machine's key is short of no resource (``short``: ``short``)."""
        return short.totals[-1] < len(short.lacking)

    def some_listed(self) -> str | None:
        """The id of some listed machine (None: none is)."""
        row = int(self.listed.argmax())
        return self.ids[row] if self.listed[row] else None
