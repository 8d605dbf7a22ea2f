"""A plan of claims and what committing it did: the records the optimistic core hands to a
committer and gets back, and the ledger entries (a record at its ``mod_revision``) both read.
Plain data over the model; the protocols that use them are in ``omega.protocols``."""

from __future__ import annotations

from dataclasses import dataclass, field

from cellstate.model import Alloc, JobRecord, Machine
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
