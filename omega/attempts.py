"""What each placement attempt did: the record the monitor, stats and benchmarks add up."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from omega.protocols import Claim


class AttemptOutcome(StrEnum):
    COMMITTED = "committed"  # every claim of the decision committed
    PARTIAL = "partial"  # some claims committed, others conflicted
    CONFLICT = "conflict"  # claims were made, none committed
    NOTHING_FITS = "nothing-fits"  # the decision placed nothing (reason recorded in the job)
    TOO_LARGE = "too-large"  # a gang larger than one transaction (refused)


@dataclass(frozen=True, slots=True)
class Attempt:
    """One decision and the transactions it led to. ``retries`` counts the attempts before
    this one in the same placement; ``conflicting_machines`` are the machines whose revision
    had changed in a failed transaction, ``winners`` who changed them; ``transactions``/``failed_transactions`` feed the
    conflict fraction (failed ÷ successful)."""

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

    @property
    def conflicted(self) -> bool:
        return self.failed_transactions > 0


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
