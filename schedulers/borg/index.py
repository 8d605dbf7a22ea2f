"""The load index behind the Borg scheduler's packing-aware walk (``walk_start = "packed"``).

Relaxed randomization stops after ``k`` feasible machines and takes the best of them; from a
random start those ``k`` are a random sample of the cell, so tasks spread over it (new jobs
open empty machines). The packed walk examines first the machines where the task would fit
best, so the ``k`` scored are the ones a full scan would most likely pick; with ``bounds``
the walk also keeps an upper bound of the score on the machines it has not yet yielded, so
the scheduler can go on until its best is proved (``borg_bound``).

Machines are kept in buckets keyed by ``(capacity cpu, capacity memory, level cpu, level
memory)``; a resource's level is its free fraction in ``steps`` steps (``free * steps //
capacity``), the lowest step subdivided by powers of two of the free amount (so machines
with nothing or almost nothing free do not share a bucket with those that fit small tasks,
and full machines are never walked). For a request, each bucket gets an estimated score:
``borg_hybrid``'s (best fit without stranding, with the chain's args when it has that
scorer) of the request on a machine of the bucket's capacity and middle free fractions.
A walk visits the buckets best estimate first and skips those whose machines certainly have
too little free cpu or memory (``skipped`` lists them, for an exact "fits nowhere"); inside
a bucket machines come in the order they entered it (the scheduler's seeded shuffle at the
start, then the order of changes, re-keyed in id order): seeded, randomized within a
bucket, deterministic. The order of the buckets per request (computed for all buckets at
once: ``borg_order``) is kept until a new bucket appears.

Keys come from the view's ledgers, not from a decision's reservations, which only lower
free resources: a skipped bucket holds no feasible machine (as long as its machines are at
the revision they were filed at: the scheduler checks that before relying on it); the same
holds for the bounds, which the scheduler completes with the machines its decision touched.
The index learns of changes
through ``update``: the scheduler re-keys the machines its decisions touched, the machines
a walk saw at a new revision, and a rotating ``sweep`` slice of the cell per decision, so a
machine changed by someone else is re-keyed within ``n / sweep`` decisions at the latest.
"""

from __future__ import annotations

import bisect

from cellstate.model import Machine
from cellstate.resources import Resources
from cellstate.plan import MachineEntry
from omega.protocols import CellView
from schedulers.borg.order import SUBSTEPS, KeyTable
from schedulers.plugins.borg_hybrid import BorgHybridArgs

Key = tuple[int, int, int, int]
RESERVED = -1  # the revision of a machine filed by a decision's reservation (file_reserved)
_ORDERS_KEPT = 4096  # per-request bucket orders kept (cleared past this)


class LoadIndex:
    """Machines bucketed by capacity and free fractions for the packed walk (module doc)."""

    def __init__(self, ids: list[str], view: CellView, *, steps: int = 16, sweep: int = 32,
                 hybrid: BorgHybridArgs | None = None, checked=("cpu", "memory"), bounds: bool = False) -> None:
        """``checked``: the resources the chain's filters certainly require free (the walk
        skips buckets short of them only); ``hybrid``: the estimate's args; ``bounds``: walks
        keep an upper bound of borg_hybrid's score on the machines not yet walked (``walk``)."""
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
            raise ValueError(f"load index: steps must be an int >= 1, got {steps!r}")
        if not isinstance(sweep, int) or isinstance(sweep, bool) or sweep < 0:
            raise ValueError(f"load index: sweep must be an int >= 0, got {sweep!r}")
        self.steps, self.sweep, self.hybrid = steps, sweep, hybrid or BorgHybridArgs()
        self.bounds = bounds
        self._checked = ("cpu" in checked, "memory" in checked)
        self._ids = ids
        self._buckets: dict[Key, dict[str, None]] = {}
        self._table = KeyTable(steps, self.hybrid, self._checked, bounds)  # every bucket ever filled
        self._orders: dict[tuple[int, int], tuple] = {}  # request -> _order
        self._at: dict[str, tuple[Key, int]] = {}  # machine id -> (its bucket key, revision keyed at)
        self._swept = 0
        for machine_id in ids:
            self.update(machine_id, view.machine(machine_id))

    def __len__(self) -> int:
        return len(self._at)

    def key_of(self, machine: Machine, free: Resources | None = None) -> Key:
        """The bucket of ``machine`` at its ledger (or with ``free`` left)."""
        cap, steps = machine.capacity, self.steps
        if free is None:
            used = machine.allocated
            return (cap.cpu, cap.memory, _level(cap.cpu - used.cpu, cap.cpu, steps),
                    _level(cap.memory - used.memory, cap.memory, steps))
        return cap.cpu, cap.memory, _level(free.cpu, cap.cpu, steps), _level(free.memory, cap.memory, steps)

    def file_reserved(self, machine: Machine, free: Resources) -> None:
        """File ``machine`` by ``free`` (what a decision left of it after reserving), at no
        revision: the next ``refresh`` that is told of it re-keys it at its ledger. Only
        between walks."""
        self._file(machine.id, self.key_of(machine, free), RESERVED)

    @property
    def keyed(self) -> dict[str, tuple[Key, int]]:
        """Machine id -> (its bucket key, the revision it was keyed at); read only."""
        return self._at

    def revision_of(self, machine_id: str) -> int | None:
        """The revision the machine was keyed at (None: not indexed)."""
        at = self._at.get(machine_id)
        return at[1] if at is not None else None

    def update(self, machine_id: str, entry: MachineEntry | None) -> None:
        """Re-key one machine at ``entry`` (None: the machine is gone, drop it)."""
        at = self._at.get(machine_id)
        if entry is None:
            if at is not None:
                del self._buckets[at[0]][machine_id]
                del self._at[machine_id]
            return
        if at is not None and at[1] == entry.mod_revision:
            return
        self._file(machine_id, self.key_of(entry.machine), entry.mod_revision)

    def _file(self, machine_id: str, key: Key, revision: int) -> None:
        at = self._at.get(machine_id)
        if at is not None and at[0] == key:
            self._at[machine_id] = (key, revision)
            return
        if at is not None:
            del self._buckets[at[0]][machine_id]
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = {}
            self._table.insert(bisect.bisect(self._table.keys, key), key)
            self._orders.clear()  # a new bucket: every request's order is re-estimated
        bucket[machine_id] = None
        self._at[machine_id] = (key, revision)

    def refresh(self, view: CellView, changed) -> None:
        """Re-key the machines in ``changed`` (in id order: buckets keep arrival order, so the
        walk stays seeded whatever the set's order) and the next ``sweep`` machines."""
        for machine_id in sorted(changed):
            self.update(machine_id, view.machine(machine_id))
        ids, n = self._ids, len(self._ids)
        for _ in range(min(self.sweep, n)):
            self._swept = self._swept + 1 if self._swept + 1 < n else 0
            machine_id = ids[self._swept]
            self.update(machine_id, view.machine(machine_id))

    def walk(self, request: Resources, bound: list[float] | None = None):
        """Machine ids, buckets by estimated score for ``request`` (best first), skipping
        buckets that cannot fit it. The index must not change while a walk is under way.
        With ``bounds`` on, ``bound[0]`` is kept at an upper bound of borg_hybrid's score of
        ``request`` on every machine not yet yielded (filed at its keyed revision, free as
        its ledger: ``borg_bound``); -inf once the walk is over."""
        buckets = self._buckets
        order, _, _, suffix = self._plan(request)
        if bound is None or suffix is None:
            for key in order:
                yield from buckets[key]
            return
        for key, upper in zip(order, suffix):
            bound[0] = upper
            yield from buckets[key]
        bound[0] = float("-inf")

    def skipped(self, request: Resources):
        """(bucket key, short, the bucket's machine ids) of the buckets ``walk(request)``
        skips; ``short``: "cpu" or "memory" when all the bucket's machines lack that resource
        first (resources_fit checks cpu, then memory), else None."""
        _, skipped, short, _ = self._plan(request)
        buckets = self._buckets
        for key in skipped:
            yield key, short.get(key), buckets[key]

    def _plan(self, request: Resources) -> tuple[list[Key], list[Key], dict[Key, str], list[float] | None]:
        asked = (max(request.cpu, 0), max(request.memory, 0))
        plan = self._orders.get(asked)
        if plan is None:
            if len(self._orders) >= _ORDERS_KEPT:
                self._orders.clear()
            plan = self._orders[asked] = self._order(*asked)
        return plan

    def _order(self, cpu: int, memory: int) -> tuple[list[Key], list[Key], dict[Key, str], list[float] | None]:
        """The keys whose machines may fit (cpu, memory), best estimated score first; the
        other keys; those of them whose machines all lack cpu, or all lack memory with
        enough cpu -> that resource; with ``bounds``, per walked key the highest score
        bound of it and the keys after it (else None): ``borg_order``."""
        return self._table.plan(cpu, memory)


def _level(free: int, capacity: int, steps: int) -> int:
    """``free`` in ``steps`` steps of ``capacity``; the lowest step split by bit length."""
    free = max(free, 0)
    q = free * steps // capacity if capacity > 0 else 0
    return q * SUBSTEPS if q > 0 else free.bit_length()
