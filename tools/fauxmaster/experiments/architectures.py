"""The Omega paper's three scheduler architectures on the fauxmaster (§2, §4).

- shared-state (Omega): every scheduler decides on the whole cell and commits optimistically
  — what ``replay`` does unchanged.
- monolithic, multi-path (``MultiPath``): ONE scheduler process serves every job kind, with
  a code path per kind (its own scheduler chain and modelled decision time). Jobs are taken
  one at a time in the fair order (high-priority services first), so a slow service decision
  delays every batch job queued behind it: head-of-line blocking.
- two-level, Mesos-style (``OfferBroker``): a central allocator offers machines; while a
  scheduler decides it holds an offer, and the offered machines are locked to it — other
  schedulers neither see nor claim them. An offer is a slice of the free machines not held
  by anyone (``share`` of the cell; 1.0 = all of them, as the Mesos allocator in the paper
  offers all available resources), taken when the decision starts, held for the decision
  time, returned when the decision's commit is done; the others are then woken to take
  their turn. Schedulers hold no offer while idle (a simplification: Mesos also parks
  offers at idle frameworks until they decline).

Both work through the ``setup`` hook of ``replay``: they replace a ``SimScheduler``'s
``_decide`` (what its placer calls) and keep its accounting: the decision time is held as
"decide" busy time and the scheduler's wall time is tallied.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass
from typing import Iterable

from cellstate.model import JobKind, MachineState
from cellstate.plan import JobEntry, MachineEntry
from omega.protocols import CellView, Decision
from schedulers.chains import make_scheduler

ARCHITECTURES = ("monolithic", "two-level", "shared-state")


@dataclass(frozen=True, slots=True)
class CodePath:
    """A monolithic scheduler's code path for one job kind: chain kind and decision time."""

    kind: str
    t_job: float
    t_task: float


class MultiPath:
    """Monolithic multi-path scheduling: one process, a scheduler chain and a decision time per
    job kind (``paths`` maps ``JobKind`` to ``CodePath``)."""

    def __init__(self, paths: dict[JobKind, CodePath], seed: int = 0):
        if not paths:
            raise ValueError("a monolithic scheduler needs at least one path")
        self.paths = dict(paths)
        self.seed = seed

    def with_kind(self, old: str, new: str) -> "MultiPath":
        """The same paths with every ``old`` chain kind replaced by ``new``."""
        paths = {job_kind: CodePath(new, p.t_job, p.t_task) if p.kind == old else p
                 for job_kind, p in self.paths.items()}
        return MultiPath(paths, self.seed)

    def install(self, sim) -> None:
        """Make ``sim`` (a SimScheduler serving every kind) decide by job kind."""
        chains = {kind: make_scheduler(path.kind, sim.name, self.seed) for kind, path in self.paths.items()}
        sim._decide = functools.partial(self._decide, sim, chains)

    def _decide(self, sim, chains, entry: JobEntry, tasks: list[int], view: CellView) -> Decision:
        kind = entry.record.job.kind
        path = self.paths.get(kind)
        if path is None:
            raise ValueError(f"monolithic scheduler {sim.name!r} has no path for {kind} job {entry.id!r}")
        sim.catch_up()
        started = time.perf_counter()
        answer = chains[kind].decide(entry, tasks, view)
        sim.tally.decide_wall_s += time.perf_counter() - started
        sim.process.hold(path.t_job + path.t_task * len(tasks), "decide")
        return Decision(list(answer.claims), dict(answer.unplaced))


class OfferedView:
    """A ``CellView`` showing only the machines of one offer (everything else passes through)."""

    def __init__(self, view: CellView, offered: frozenset[str]):
        self._view = view
        self._offered = offered

    def __getattr__(self, name):
        return getattr(self._view, name)

    @property
    def revision(self) -> int:
        return self._view.revision

    def machines(self) -> Iterable[MachineEntry]:
        return (e for e in self._view.machines() if e.id in self._offered)

    def machine(self, machine_id: str) -> MachineEntry | None:
        return self._view.machine(machine_id) if machine_id in self._offered else None

    def machine_count(self) -> int:
        return len(self._offered)


@dataclass(slots=True)
class OfferStats:
    """What the allocator did: offers made, how many were empty, machines offered in all."""

    offers: int = 0
    empty: int = 0
    machines: int = 0

    @property
    def mean_size(self) -> float:
        return self.machines / self.offers if self.offers else 0.0


class OfferBroker:
    """Two-level scheduling's allocator (see the module docstring)."""

    def __init__(self, share: float = 1.0):
        if not 0 < share <= 1:
            raise ValueError(f"offer share must be in (0, 1], got {share!r}")
        self.share = share
        self.held: dict[str, str] = {}  # machine id -> scheduler holding it
        self.stats = OfferStats()
        self._sims: list = []
        self._cursor = 0

    def install(self, sims) -> None:
        """Make every SimScheduler of ``sims`` decide on offers only."""
        self._sims = list(sims)
        for sim in self._sims:
            sim._decide = functools.partial(self._decide, sim, sim._decide)

    def _decide(self, sim, inner, entry: JobEntry, tasks: list[int], view: CellView) -> Decision:
        sim.catch_up()
        offer = self.offer(sim.name, view)
        try:
            return inner(entry, tasks, OfferedView(view, offer))  # holds the decision time
        finally:
            self.release(sim.name)  # the placer commits right after, before anyone else runs

    def offer(self, holder: str, view: CellView) -> frozenset[str]:
        """Lock a slice of the up machines with free room that nobody holds to ``holder``."""
        free = sorted(e.id for e in view.machines() if e.id not in self.held and _has_room(e))
        limit = max(1, math.ceil(self.share * view.machine_count()))
        if len(free) > limit:  # rotate the slice so every machine gets offered in turn
            start = self._cursor % len(free)
            free = (free[start:] + free[:start])[:limit]
            self._cursor += limit
        for machine_id in free:
            self.held[machine_id] = holder
        self.stats.offers += 1
        self.stats.machines += len(free)
        self.stats.empty += not free
        return frozenset(free)

    def release(self, holder: str) -> None:
        """Return ``holder``'s offer and let the other schedulers try again at once."""
        self.held = {m: h for m, h in self.held.items() if h != holder}
        for sim in self._sims:
            if sim.name != holder:
                sim.queue.reset()
                sim.process.wake()


def _has_room(entry: MachineEntry) -> bool:
    m = entry.machine
    free = m.free
    return m.state == MachineState.UP and free.cpu > 0 and free.memory > 0
