"""What each placement attempt did: the record the monitor, stats and benchmarks add up."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from cellstate.plan import Claim


class AttemptOutcome(StrEnum):
    COMMITTED = "committed"  # every claim of the decision committed
    PARTIAL = "partial"  # some claims committed, others conflicted
    CONFLICT = "conflict"  # claims were made, none committed
    NOTHING_FITS = "nothing-fits"  # the decision placed nothing (reason recorded in the job)
    TOO_LARGE = "too-large"  # a gang larger than one transaction (refused)


@dataclass(frozen=True, slots=True)
class Attempt:
    """One decision and the transactions it led to. ``retries`` counts the attempts before
    this one in the same placement. ``failed_transactions`` counts the txns whose compares
    failed; ``stale_retries`` those of them that were only stale (resource-fit: every claim
    still fit the fresh ledgers and the job was unchanged, so the claims were resubmitted;
    see ``omega.modes``); the rest are conflicts (``conflict_transactions``), which with the
    committed txns give Omega's conflict fraction. ``conflicting_machines`` are the
    machines of the claims rejected in conflicts, ``winners`` who last wrote them;
    ``job_conflicts`` the conflicts that rejected no claim (only the job record had
    changed: the cause was the job, not a machine)."""

    scheduler: str
    job_id: str
    decision_time_s: float
    claims: tuple[Claim, ...]
    committed: tuple[Claim, ...]
    conflicting_machines: tuple[str, ...]
    retries: int
    outcome: AttemptOutcome
    transactions: int = 0
    failed_transactions: int = 0
    started_at: float = 0.0
    winners: tuple[str, ...] = ()
    """Who last wrote the conflicting machines (their ledgers' ``writer``)."""
    stale_retries: int = 0
    job_conflicts: int = 0
    conflict_writers: tuple[str, ...] = ()
    """Per machine of ``conflicting_machines`` (same order), who had last written it when the
    txn failed ("" when unknown)."""

    @property
    def conflict_transactions(self) -> int:
        """Failed txns that were conflicts (not stale retries)."""
        return self.failed_transactions - self.stale_retries

    @property
    def conflicted(self) -> bool:
        """True when a txn of this attempt met a conflict (stale retries do not count)."""
        return self.conflict_transactions > 0


def classify(claims: tuple[Claim, ...], committed: tuple[Claim, ...]) -> AttemptOutcome:
    """The outcome of an attempt that made claims."""
    if not claims:
        return AttemptOutcome.NOTHING_FITS
    if len(committed) == len(claims):
        return AttemptOutcome.COMMITTED
    return AttemptOutcome.PARTIAL if committed else AttemptOutcome.CONFLICT


@dataclass(frozen=True, slots=True)
class PlacementResult:
    """The end of ``OptimisticPlacer.place``: tasks placed by this call, tasks still pending
    (per the view), the job's reason, every attempt, and whether retries ran out."""

    job_id: str
    placed: tuple[Claim, ...]
    pending: tuple[int, ...]
    reason: str
    attempts: tuple[Attempt, ...]
    gave_up: bool = False
    job_gone: bool = False
