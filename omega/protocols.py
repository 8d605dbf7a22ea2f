"""The protocols the optimistic core is written against.

``omega`` never talks to etcd itself: it reads a ``CellView`` (a replica at some
revision), proposes a ``Plan`` of claims and hands it to a ``Committer``, which
turns it into one store transaction. Concrete views and committers live in
``cellstate``; the CLI wires them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Protocol

from cellstate.model import Alloc, JobKind
from cellstate.plan import AllocEntry, Claim, CommitOutcome, GangHold, JobEntry, MachineEntry, Plan



class CellView(Protocol):
    """Read-only view of a cell at ``revision``. Implementations must not copy the
    world per call: ``machines()`` iterates live entries."""

    @property
    def revision(self) -> int: ...

    def machines(self) -> Iterable[MachineEntry]: ...

    def machine(self, machine_id: str) -> MachineEntry | None: ...

    def machine_count(self) -> int: ...

    def job(self, job_id: str) -> JobEntry | None: ...

    def pending_jobs(self, kind: JobKind | None = None) -> list[JobEntry]:
        """Jobs with at least one pending task (and not killed), any order."""
        ...

    def allocs_on(self, machine_id: str) -> Iterable[Alloc]: ...

    def allocs_of(self, job_id: str) -> Iterable[Alloc]: ...

    def alloc_entry(self, job_id: str, task_index: int) -> AllocEntry | None:
        """The allocation of one task with its revision (needed to guard an eviction)."""
        ...



class Committer(Protocol):
    """Turns a plan into ONE store transaction guarded by the machines' revisions and, per
    claimed task, by the task being unplaced (or by the job's revision: a store-specific choice).
    ``max_txn_ops``: the store's limit of operations per transaction (0: unknown);
    ``gangs``: its ``GangCommitter`` for gangs larger than one transaction (None: such a gang
    is refused, ``PlanTooLarge``)."""

    max_claims_per_txn: int
    max_txn_ops: int
    gangs: GangCommitter | None

    def commit(self, plan: Plan) -> CommitOutcome: ...



class GangCommitter(Protocol):
    """Commits an all-or-nothing job larger than one transaction: reservations in chunks under a
    leased gang key, made final by one last txn (``cellstate.gang_commit``). A committer offers
    it as its ``gangs`` attribute (``Committer.gangs``)."""

    max_claims_per_txn: int

    def begin(self, job: JobEntry, scheduler: str, now: float, ttl: int | None = None) -> GangHold | None:
        """Hold the job on a lease of at least ``ttl`` s (None: the committer's own minimum);
        None when another holds it."""
        ...

    def keep_alive(self, hold: GangHold) -> bool: ...

    def reserve(self, hold: GangHold, plan: Plan) -> tuple[CommitOutcome, bool]:
        """One chunk of reservations; the outcome and whether the hold is lost."""
        ...

    def finish(self, hold: GangHold, plan: Plan) -> CommitOutcome: ...

    def evict(self, job_id: str, reason: str, writer: str) -> list[CommitOutcome]:
        """Evict the placed and running tasks of a gang some of whose tasks are pending (back to
        pending with ``reason``): a gang runs whole or not at all."""
        ...

    def release(self, hold: GangHold) -> list[CommitOutcome]:
        """Release every reservation of the job (not placed or running tasks' allocs)."""
        ...

    def end(self, hold: GangHold) -> None: ...


class Refreshable(Protocol):
    """A view that can take in what a commit did (written keys on success, the fresh
    compared entries on failure) without waiting for its watch."""

    def apply_outcome(self, outcome: CommitOutcome) -> None: ...


class PlacementView(CellView, Refreshable, Protocol):
    """What the optimistic loop reads and refreshes."""


class ChangeFeed(Protocol):
    """What changed in a view since the last look, each change handed out once. A feed of ids
    is off until its ``track_…`` is called (then ``take_…`` without it is a RuntimeError);
    ``take_freed`` is always on. ``cellstate.replica.view.ReplicaView`` implements it (over
    etcd live, over the memory store in the fauxmaster); the scheduling cycle, the nothing-fits
    memo and EASY's holds read it (docs/HOST.md)."""

    def take_freed(self) -> bool:
        """True (once) if machines freed resources since the last call."""
        ...

    def track_freed_machines(self) -> None: ...

    def take_freed_machines(self) -> set[str]:
        """Ids of the machines that freed room (a ledger shrank, came up, was added)."""
        ...

    def track_changed_machines(self) -> None: ...

    def take_changed_machines(self) -> set[str]:
        """Ids of the machines whose entry changed or went away."""
        ...

    def track_changed_jobs(self) -> None: ...

    def take_changed_jobs(self) -> set[str]:
        """Ids of the jobs whose record changed, appeared or went away."""
        ...


class FeedView(CellView, ChangeFeed, Protocol):
    """A cell view with its change feed: what a host's scheduling cycle works on."""


@dataclass(slots=True)
class Decision:
    """A scheduler's answer for some tasks of one job: claims, and why the others stay pending
    (task index -> reason). Schedulers build it as they go; the loop only reads it."""

    claims: list[Claim] = field(default_factory=list)
    unplaced: dict[int, str] = field(default_factory=dict)


Decide = Callable[[JobEntry, list[int], CellView], Decision]
"""``decide(job_entry, task_indices, view)``: the scheduler's placement function."""


class Clock(Protocol):
    """Time source; the fauxmaster injects a virtual one."""

    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...
