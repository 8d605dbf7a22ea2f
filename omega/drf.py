"""Dominant Resource Fairness (Ghodsi et al., NSDI'11) as a queue order.

An owner's *dominant share* is the largest, over the cell's resources, of what the owner's
tasks hold divided by the total capacity of the usable (up) machines, divided by the owner's
weight (default 1). ``DrfOrder`` serves pending jobs lowest dominant share first, by
*progressive filling*: each job it hands out adds that job's pending demand (request ×
pending tasks) to its owner's share before the next pick, so one ordering reproduces DRF's
step-by-step allocation without waiting for the commits.

Priority still comes first: jobs are ordered by priority band (high first) and by DRF within
a band (shares carry over from band to band), as Borg's and Mesos' operators expect a
production job to go before any batch job whatever its owner's share. Ties (equal shares)
go to the owner that sorts first, then within an owner to the oldest job, then the job id.

Current usage comes from the view (allocs → job → owner). ``CellUsage`` keeps it
incrementally: a machine's allocations only change together with its ledger (one txn puts
both), so a machine whose mod_revision is unchanged since the last round keeps its cached
per-owner sums; a round costs one revision compare per machine plus a rescan of the
machines that changed (docs/OMEGA_CORE.md has the measured cost).
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping

from cellstate.model import MachineState
from cellstate.resources import Resources
from cellstate.plan import JobEntry, MachineEntry
from omega.protocols import CellView

Vector = dict[str, int]


def parse_weights(weights: Mapping[str, float] | None) -> dict[str, float]:
    """Owner → weight, validated: owners non-empty strings, weights finite numbers > 0."""
    if weights is None:
        return {}
    if not isinstance(weights, Mapping):
        raise ValueError(f"DRF weights must map owner names to numbers, got {weights!r}")
    out: dict[str, float] = {}
    for owner, weight in weights.items():
        if not isinstance(owner, str) or not owner:
            raise ValueError(f"DRF weight owner must be a non-empty string, got {owner!r}")
        if isinstance(weight, bool) or not isinstance(weight, (int, float)):
            raise ValueError(f"DRF weight of owner {owner!r} must be a number, got {weight!r}")
        if not (math.isfinite(weight) and weight > 0):
            raise ValueError(f"DRF weight of owner {owner!r} must be a finite number > 0, got {weight!r}")
        out[owner] = float(weight)
    return out


def parse_weight_flags(flags: Iterable[str]) -> dict[str, float]:
    """``["alice=2", "bob=0.5"]`` → weights; ValueError naming the bad flag (also for an owner
    given twice)."""
    out: dict[str, float] = {}
    for flag in flags:
        owner, sep, text = flag.partition("=")
        owner = owner.strip()
        if not sep or not owner:
            raise ValueError(f"DRF weight {flag!r}: expected OWNER=WEIGHT")
        if owner in out:
            raise ValueError(f"DRF weight {flag!r}: owner {owner!r} given twice")
        try:
            weight = float(text)
        except ValueError:
            raise ValueError(f"DRF weight {flag!r}: {text.strip()!r} is not a number") from None
        out[owner] = weight
    return parse_weights(out)


def vector(resources: Resources, times: int = 1) -> Vector:
    """The non-zero quantities of ``resources`` × ``times`` by resource name."""
    out = {name: amount * times for name, amount in
           (("cpu", resources.cpu), ("memory", resources.memory), ("disk", resources.disk)) if amount}
    for name, amount in resources.extra:
        if amount:
            out[name] = amount * times
    return out


def _add(into: Vector, other: Vector, sign: int = 1) -> None:
    """``into`` += sign × ``other``; quantities that reach 0 are dropped."""
    for name, amount in other.items():
        total = into.get(name, 0) + sign * amount
        if total:
            into[name] = total
        else:
            into.pop(name, None)


@dataclass(slots=True)
class _MachineShare:
    """What one machine adds to the cell's totals, as of ``revision`` (-1: rescan next round)."""

    revision: int
    capacity: Vector
    by_owner: dict[str, Vector]


class CellUsage:
    """Per-owner allocated resources and the capacity of the up machines of a view, kept
    incrementally by machine mod_revision (see the module docstring)."""

    def __init__(self) -> None:
        self._machines: dict[str, _MachineShare] = {}
        self.capacity: Vector = {}
        self.used: dict[str, Vector] = {}
        self.rescanned = 0  # machines rescanned by the last refresh (for tests and benches)

    def refresh(self, view: CellView) -> None:
        """Bring the totals up to ``view``: rescan machines whose revision moved, drop gone ones."""
        cache = self._machines
        visited = rescanned = 0
        for entry in view.machines():
            visited += 1
            held = cache.get(entry.machine.id)
            if held is not None and held.revision == entry.mod_revision:
                continue
            if held is not None:
                self._charge(held, -1)
            cache[entry.machine.id] = held = _scan(entry, view)
            self._charge(held, 1)
            rescanned += 1
        if len(cache) > visited:
            live = {entry.machine.id for entry in view.machines()}
            for machine_id in [m for m in cache if m not in live]:
                self._charge(cache.pop(machine_id), -1)
        self.rescanned = rescanned

    def _charge(self, share: _MachineShare, sign: int) -> None:
        _add(self.capacity, share.capacity, sign)
        for owner, used in share.by_owner.items():
            total = self.used.get(owner)
            if total is None:
                self.used[owner] = total = {}
            _add(total, used, sign)
            if not total:
                del self.used[owner]


def _scan(entry: MachineEntry, view: CellView) -> _MachineShare:
    """One machine's capacity (if up) and its allocations summed by owner; a machine holding
    an allocation of a job the view does not know (yet) is rescanned next round."""
    machine = entry.machine
    capacity = vector(machine.capacity) if machine.state is MachineState.UP else {}
    core: dict[str, list[int]] = {}  # owner -> [cpu, memory, disk]
    extra: dict[str, Vector] = {}
    revision = entry.mod_revision
    job_of = view.job
    for alloc in view.allocs_on(machine.id):
        job = job_of(alloc.job_id)
        if job is None:
            revision = -1
            continue
        owner = job.record.job.owner
        held, sums = alloc.resources, core.get(owner)
        if sums is None:
            core[owner] = sums = [0, 0, 0]
        sums[0] += held.cpu
        sums[1] += held.memory
        sums[2] += held.disk
        if held.extra:
            _add(extra.setdefault(owner, {}), dict(held.extra))
    by_owner: dict[str, Vector] = {}
    for owner, (cpu, memory, disk) in core.items():
        used = {name: amount for name, amount in (("cpu", cpu), ("memory", memory), ("disk", disk)) if amount}
        used.update(extra.get(owner, ()))
        if used:
            by_owner[owner] = used
    return _MachineShare(revision, capacity, by_owner)


class DrfOrder:
    """Queue order by weighted dominant share with progressive filling (module docstring).
    ``view`` is read when ``arrange`` starts; ``weights`` maps owner → weight (default 1)."""

    name = "drf"

    def __init__(self, view: CellView, weights: Mapping[str, float] | None = None):
        self.view = view
        self.weights = parse_weights(weights)
        self.usage = CellUsage()

    def index(self) -> None:
        """No incremental holder: shares move with every commit, the jobs are arranged per round."""
        return None

    def shares(self) -> dict[str, float]:
        """Every owner's current dominant share (weighted), from the view."""
        self.usage.refresh(self.view)
        return {owner: self._share(owner, used) for owner, used in self.usage.used.items()}

    def _share(self, owner: str, used: Vector) -> float:
        """max over resources of used ÷ (total × weight): one division per resource, so equal
        ratios give equal floats (exact ties)."""
        weight = self.weights.get(owner, 1.0)
        capacity = self.usage.capacity
        return max((amount / (capacity[name] * weight) for name, amount in used.items()
                    if capacity.get(name, 0) > 0), default=0.0)

    def arrange(self, jobs: list[JobEntry]) -> Iterator[JobEntry]:
        """``jobs`` by priority (high first), then lowest dominant share first, each job's
        pending demand charged to its owner as it is handed out (lazily: a caller that stops
        early pays only for the jobs it took)."""
        if not jobs:
            return
        self.usage.refresh(self.view)
        used = {owner: dict(held) for owner, held in self.usage.used.items()}
        by_priority: dict[int, list[JobEntry]] = defaultdict(list)
        for entry in jobs:
            by_priority[entry.record.job.priority].append(entry)
        for priority in sorted(by_priority, reverse=True):
            yield from self._fill(by_priority[priority], used)

    def _fill(self, jobs: list[JobEntry], used: dict[str, Vector]) -> Iterator[JobEntry]:
        """Progressive filling over one priority band; ``used`` grows as jobs are handed out."""
        queues: dict[str, list[JobEntry]] = defaultdict(list)
        for entry in sorted(jobs, key=lambda e: (e.record.submitted_at, e.id), reverse=True):
            queues[entry.record.job.owner].append(entry)  # oldest last: pop() takes it
        heap = [(self._share(owner, used.get(owner, {})), owner) for owner in queues]
        heapq.heapify(heap)
        while heap:
            _, owner = heapq.heappop(heap)
            queue = queues[owner]
            entry = queue.pop()
            yield entry
            record = entry.record
            total = used.get(owner)
            if total is None:
                used[owner] = total = {}
            _add(total, vector(record.job.request, record.tasks.count("p")))
            if queue:
                heapq.heappush(heap, (self._share(owner, total), owner))
