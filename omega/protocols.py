"""The protocols the optimistic core is written against.

``omega`` never talks to etcd itself: it reads a ``CellView`` (a replica at some
revision), proposes a ``Plan`` of claims and hands it to a ``Committer``, which
turns it into one store transaction. Concrete views and committers live in
``cellstate``; the CLI wires them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Protocol

from cellstate.model import Alloc, JobKind, JobRecord, Machine
from cellstate.resources import Resources


@dataclass(frozen=True, slots=True)
class MachineEntry:
    """A machine ledger as seen at ``mod_revision`` (its sequence number)."""

    machine: Machine
    mod_revision: int

    @property
    def id(self) -> str:
        return self.machine.id


@dataclass(frozen=True, slots=True)
class AllocEntry:
    """An allocation as seen at ``mod_revision``."""

    alloc: Alloc
    mod_revision: int


@dataclass(frozen=True, slots=True)
class JobEntry:
    """A job record as seen at ``mod_revision``."""

    record: JobRecord
    mod_revision: int

    @property
    def id(self) -> str:
        return self.record.job.id


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


@dataclass(frozen=True, slots=True)
class Claim:
    """Task ``task_index`` of the plan's job on ``machine_id``, holding ``request``.
    ``evicts`` lists allocations (job_id, task_index) removed in the same commit (preemption)."""

    task_index: int
    machine_id: str
    request: Resources
    evicts: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class Plan:
    """Claims for one job, decided on a view; ``machines`` are the ledgers the claims were
    decided against (their mod_revisions are the compares), ``job`` likewise."""

    job: JobEntry
    claims: tuple[Claim, ...]
    machines: dict[str, MachineEntry]
    scheduler: str
    unplaced: dict[int, str] = field(default_factory=dict)
    now: float = 0.0
    victims: dict[str, JobEntry] = field(default_factory=dict)
    """Job records of every job a claim evicts from (their revisions are compared too)."""
    victim_allocs: dict[tuple[str, int], AllocEntry] = field(default_factory=dict)
    """The evicted allocations as seen (their revisions are compared: an eviction releases
    what the allocation really holds on the machine it is really on)."""


@dataclass(frozen=True, slots=True)
class CommitOutcome:
    """What one transaction did. On failure ``fresh_machines``/``fresh_job`` hold the compared
    keys as the store has them now (None: deleted), read in the same round trip."""

    committed: bool
    revision: int
    fresh_machines: dict[str, MachineEntry | None] = field(default_factory=dict)
    fresh_job: JobEntry | None = None
    job_deleted: bool = False
    fresh_victims: dict[str, JobEntry | None] = field(default_factory=dict)
    fresh_victim_allocs: dict[tuple[str, int], AllocEntry | None] = field(default_factory=dict)
    written: dict[str, bytes] = field(default_factory=dict)
    """On success: every key the txn put, with its value (so the caller can apply its own commit)."""
    deleted: tuple[str, ...] = ()
    """On success: every key the txn deleted."""
    applied_machines: tuple[MachineEntry, ...] = ()
    """On success, when the committer provides them: the ledgers it put, decoded, at ``revision``."""
    applied_jobs: tuple[JobEntry, ...] = ()
    """Likewise the job records it put (the plan's job, victims' jobs)."""
    applied_allocs: dict[str, Alloc] = field(default_factory=dict)
    """Likewise the allocations it put, by key. A view holding these need not decode
    ``written``: together with ``deleted`` they are the whole txn (``applied`` says so)."""
    applied: bool = False
    """True when ``applied_*`` and ``deleted`` describe every change of the txn."""
    quarantined: dict[str, tuple[int, str]] = field(default_factory=dict)
    """On failure: compared keys whose read-back value does not decode or names another id
    (key -> (mod_revision, why)); their ``fresh_*`` entry is None (unusable, not deleted)."""
    fresh_allocs: dict[tuple[str, int], AllocEntry] = field(default_factory=dict)
    """On failure: allocations of the plan's claimed tasks that another writer made meanwhile
    ((job, task) -> entry); ``fresh_job`` has those tasks placed already."""


class PlanRejected(ValueError):
    """A committer refused a plan that breaks an invariant (e.g. it would overcommit a
    machine): a scheduler bug caught before anything was written."""


class PlanTooLarge(Exception):
    """A plan cannot be committed in one transaction and may not be split (gang)."""


class Committer(Protocol):
    """Turns a plan into ONE store transaction guarded by the machines' revisions and, per
    claimed task, by the task being unplaced (or by the job's revision: a store-specific choice)."""

    max_claims_per_txn: int

    def commit(self, plan: Plan) -> CommitOutcome: ...


@dataclass(slots=True)
class GangHold:
    """A gang reservation in progress: the job's gang key, created at ``create_revision`` on
    ``lease`` by ``scheduler`` (``GangCommitter.begin``); ``reserved`` allocations so far."""

    job_id: str
    scheduler: str
    lease: int
    create_revision: int
    started_at: float
    reserved: int = 0
    ttl: int = 0
    """The lease's seconds (0: unknown)."""


class GangCommitter(Protocol):
    """Commits an all-or-nothing job larger than one transaction: reservations in chunks under a
    leased gang key, made final by one last txn (``cellstate.gang_commit``). A committer offers
    it as its ``gangs`` attribute; without one, such a gang is refused (``PlanTooLarge``)."""

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
