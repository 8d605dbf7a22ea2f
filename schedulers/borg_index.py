"""The load index behind the Borg scheduler's packing-aware walk (``walk_start = "packed"``).

Relaxed randomization stops after ``k`` feasible machines and takes the best of them; from a
random start those ``k`` are a random sample of the cell, so tasks spread over it (new jobs
open empty machines). The packed walk examines first the machines where the task would fit
best, so the ``k`` scored are the ones a full scan would most likely pick, and the best of
them packs about as well.

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
start, then the order of changes): seeded, randomized within a bucket, deterministic. The
order of the buckets per request is kept until a new bucket appears.

Keys come from the view's ledgers, not from a decision's reservations, which only lower
free resources: a skipped bucket holds no feasible machine (as long as its machines are at
the revision they were filed at: the scheduler checks that before relying on it). The index learns of changes
through ``update``: the scheduler re-keys the machines its decisions touched, the machines
a walk saw at a new revision, and a rotating ``sweep`` slice of the cell per decision, so a
machine changed by someone else is re-keyed within ``n / sweep`` decisions at the latest.
"""

from __future__ import annotations

import bisect

from cellstate.model import Machine
from cellstate.resources import Resources
from omega.protocols import CellView, MachineEntry
from schedulers.plugins.borg_hybrid import BorgHybridArgs, stranded_fraction

Key = tuple[int, int, int, int]
_ORDERS_KEPT = 4096  # per-request bucket orders kept (cleared past this)


class LoadIndex:
    """Machines bucketed by capacity and free fractions for the packed walk (module doc)."""

    def __init__(self, ids: list[str], view: CellView, *, steps: int = 16, sweep: int = 32,
                 hybrid: BorgHybridArgs | None = None, checked=("cpu", "memory")) -> None:
        """``checked``: the resources the chain's filters certainly require free (the walk
        skips buckets short of them only); ``hybrid``: the estimate's args."""
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
            raise ValueError(f"load index: steps must be an int >= 1, got {steps!r}")
        if not isinstance(sweep, int) or isinstance(sweep, bool) or sweep < 0:
            raise ValueError(f"load index: sweep must be an int >= 0, got {sweep!r}")
        self.steps, self.sweep, self.hybrid = steps, sweep, hybrid or BorgHybridArgs()
        self._checked = ("cpu" in checked, "memory" in checked)
        self._ids = ids
        self._buckets: dict[Key, dict[str, None]] = {}
        self._keys: list[Key] = []  # every bucket ever filled (empty ones cost one skip)
        self._orders: dict[tuple[int, int], tuple[list[Key], list[Key], dict[Key, str]]] = {}  # _order
        self._at: dict[str, tuple[Key, int]] = {}  # machine id -> (its bucket key, revision keyed at)
        self._swept = 0
        for machine_id in ids:
            self.update(machine_id, view.machine(machine_id))

    def __len__(self) -> int:
        return len(self._at)

    def key_of(self, machine: Machine) -> Key:
        """The bucket of ``machine`` at its ledger."""
        cap, used, steps = machine.capacity, machine.allocated, self.steps
        return (cap.cpu, cap.memory, _level(cap.cpu - used.cpu, cap.cpu, steps),
                _level(cap.memory - used.memory, cap.memory, steps))

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
        key = self.key_of(entry.machine)
        if at is not None and at[0] == key:
            self._at[machine_id] = (key, entry.mod_revision)
            return
        if at is not None:
            del self._buckets[at[0]][machine_id]
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = {}
            bisect.insort(self._keys, key)
            self._orders.clear()  # a new bucket: every request's order is re-estimated
        bucket[machine_id] = None
        self._at[machine_id] = (key, entry.mod_revision)

    def refresh(self, view: CellView, changed) -> None:
        """Re-key the machines in ``changed`` and the next ``sweep`` machines of the cell."""
        for machine_id in changed:
            self.update(machine_id, view.machine(machine_id))
        ids, n = self._ids, len(self._ids)
        for _ in range(min(self.sweep, n)):
            self._swept = self._swept + 1 if self._swept + 1 < n else 0
            machine_id = ids[self._swept]
            self.update(machine_id, view.machine(machine_id))

    def walk(self, request: Resources):
        """Machine ids, buckets by estimated score for ``request`` (best first), skipping
        buckets that cannot fit it. The index must not change while a walk is under way."""
        buckets = self._buckets
        for key in self._plan(request)[0]:
            yield from buckets[key]

    def skipped(self, request: Resources):
        """(machine id, bucket key, short) of the buckets ``walk(request)`` skips; ``short``:
        "cpu" or "memory" when all the bucket's machines lack that resource first
        (resources_fit checks cpu, then memory), else None."""
        _, skipped, short = self._plan(request)
        buckets = self._buckets
        for key in skipped:
            lacks = short.get(key)
            for machine_id in buckets[key]:
                yield machine_id, key, lacks

    def _plan(self, request: Resources) -> tuple[list[Key], list[Key], dict[Key, str]]:
        asked = (max(request.cpu, 0), max(request.memory, 0))
        plan = self._orders.get(asked)
        if plan is None:
            if len(self._orders) >= _ORDERS_KEPT:
                self._orders.clear()
            plan = self._orders[asked] = self._order(*asked)
        return plan

    def _order(self, cpu: int, memory: int) -> tuple[list[Key], list[Key], dict[Key, str]]:
        """The keys whose machines may fit (cpu, memory), best estimated score first; the
        other keys; those of them whose machines all lack cpu, or all lack memory with
        enough cpu -> that resource."""
        steps, (check_cpu, check_memory) = self.steps, self._checked
        scored, skipped, short = [], [], {}
        for key in self._keys:
            cap_cpu, cap_memory, level_cpu, level_memory = key
            if check_cpu and _fits_none(level_cpu, cap_cpu, steps, cpu):
                short[key] = "cpu"
                skipped.append(key)
                continue
            if check_memory and _fits_none(level_memory, cap_memory, steps, memory):
                if not check_cpu or _fits_all(level_cpu, cap_cpu, steps, cpu):
                    short[key] = "memory"
                skipped.append(key)
                continue
            left = []
            for level, cap, asked in ((level_cpu, cap_cpu, cpu), (level_memory, cap_memory, memory)):
                if cap > 0:
                    low, high = _span(level, cap, steps)
                    left.append(max((max(low, asked) + high) / 2 - asked, 0.0) / cap)
            scored.append((-self._estimate(left), key))
        scored.sort()
        return [key for _, key in scored], skipped, short

    def _estimate(self, left: list[float]) -> float:
        """borg_hybrid's score for these fractions left after placing."""
        if not left:
            return 0.0
        args = self.hybrid
        stranded = stranded_fraction(left, args.exhausted, args.imbalance)
        return 1.0 - (args.stranding * stranded + (1.0 - args.stranding) * sum(left) / len(left))


_SUBSTEPS = 64  # levels 0..63: the lowest step by bit length of free; q >= 1: q * 64


def _level(free: int, capacity: int, steps: int) -> int:
    """``free`` in ``steps`` steps of ``capacity``; the lowest step split by bit length."""
    free = max(free, 0)
    q = free * steps // capacity if capacity > 0 else 0
    return q * _SUBSTEPS if q > 0 else free.bit_length()


def _fits_none(level: int, capacity: int, steps: int, asked: int) -> bool:
    """Every free amount of the level is below ``asked``."""
    q, bits = divmod(level, _SUBSTEPS)
    if q > 0:
        return (q + 1) * capacity <= asked * steps  # free * steps < (q + 1) * capacity
    return (1 << bits) <= asked or capacity <= asked * steps  # free < 2 ** bits, < capacity / steps


def _fits_all(level: int, capacity: int, steps: int, asked: int) -> bool:
    """Every free amount of the level is at least ``asked``."""
    q, bits = divmod(level, _SUBSTEPS)
    if q > 0:
        return q * capacity >= asked * steps  # free * steps >= q * capacity
    return (1 << bits) >> 1 >= asked  # free >= 2 ** (bits - 1) (free 0 at bits 0)


def _span(level: int, capacity: int, steps: int) -> tuple[float, float]:
    """[low, high): the free amounts of a level (high exclusive; low a lower bound)."""
    q, bits = divmod(level, _SUBSTEPS)
    if q > 0:
        return q * capacity / steps, min((q + 1) * capacity / steps, capacity + 1)
    return (1 << bits) / 2 if bits else 0.0, min(1 << bits, capacity / steps) if bits else 1.0
