"""Replay metrics, as in the Omega paper and Diego's simulation.

- busyness: virtual seconds a scheduler spent deciding (and backing off) ÷ simulated time
  (a decision still running when the replay stops counts up to the stop only: at most 1);
- conflict fraction: conflict transactions (failed their compares and were not resource-fit
  stale retries: ``omega.attempts.Attempt.conflict_transactions``) ÷ successful transactions,
  Omega's definition (as ``omega.stats.SchedulerStats.conflict_fraction``);
- job wait time from submission to the first attempt and to fully placed (mean, p90, p99;
  nearest-rank percentiles);
- unscheduled jobs at the end (a pending task left, not killed);
- utilization (allocated ÷ capacity of up machines, cpu and memory) sampled over time, and
  the load distribution across machines: std ÷ mean of per-machine cpu utilization.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from itertools import repeat
from operator import sub

from omega.stats import percentile
from tools.fauxmaster.cell import UsageLedger


@dataclass(frozen=True, slots=True)
class WaitStats:
    """Wait times (seconds) of ``jobs`` jobs."""

    jobs: int
    mean: float
    p90: float
    p99: float

    @staticmethod
    def of(waits: list[float]) -> WaitStats:
        if not waits:
            return WaitStats(0, 0.0, 0.0, 0.0)
        ordered = sorted(waits)
        return WaitStats(len(ordered), sum(ordered) / len(ordered), percentile(ordered, 90), percentile(ordered, 99))


@dataclass(slots=True)
class JobJournal:
    """When each job was submitted, first taken by a scheduler, and first fully placed."""

    submitted: dict[str, float] = field(default_factory=dict)
    first_taken: dict[str, float] = field(default_factory=dict)
    fully_placed: dict[str, float] = field(default_factory=dict)

    def taken(self, job_id: str, t: float) -> None:
        self.first_taken.setdefault(job_id, t)

    def placed(self, job_id: str, t: float) -> None:
        self.fully_placed.setdefault(job_id, t)

    def waits_to_first_attempt(self) -> list[float]:
        return [t - self.submitted[j] for j, t in self.first_taken.items() if j in self.submitted]

    def waits_to_placed(self) -> list[float]:
        return [t - self.submitted[j] for j, t in self.fully_placed.items() if j in self.submitted]


@dataclass(frozen=True, slots=True)
class UtilizationSample:
    """Cell utilization at virtual time ``t``; ``load_cv`` = std/mean of machines' cpu utilization."""

    t: float
    cpu: float
    memory: float
    load_cv: float
    machines: int


def sample_utilization(t: float, usage: UsageLedger) -> UtilizationSample:
    """Utilization of the up machines of ``usage`` now (from the ledger's totals and shares)."""
    cap_cpu, cap_mem, used_cpu, used_mem = usage.totals
    shares = list(usage.shares.values())
    return UtilizationSample(t, used_cpu / cap_cpu if cap_cpu else 0.0, used_mem / cap_mem if cap_mem else 0.0,
                             load_cv(shares), len(shares))


def load_cv(shares: list[float]) -> float:
    """Coefficient of variation (population std ÷ mean) of ``shares``; 0 when the mean is 0."""
    if not shares:
        return 0.0
    mean = sum(shares) / len(shares)
    if mean == 0:
        return 0.0
    variance = sum(map(math.pow, map(sub, shares, repeat(mean)), repeat(2.0))) / len(shares)  # (s - mean) ** 2, in C
    return math.sqrt(variance) / mean


@dataclass(frozen=True, slots=True)
class SchedulerMetrics:
    """Per-scheduler figures of a replay."""

    name: str
    kind: str
    conflict_mode: str
    commit_mode: str
    busy_s: float
    busyness: float
    attempts: int
    transactions: int
    failed_transactions: int
    conflict_transactions: int
    conflict_fraction: float
    jobs_taken: int
    tasks_placed: int
    gave_up: int
    decide_wall_s: float


def conflict_fraction(transactions: int, failed: int, conflicts: int) -> float:
    """Conflict transactions ÷ successful ones (``transactions - failed``; 0 when none
    succeeded). ``conflicts`` <= ``failed``: stale retries failed without being conflicts."""
    if not 0 <= conflicts <= failed <= transactions:
        raise ValueError(f"need 0 <= conflicts <= failed <= transactions, got {conflicts}, {failed}, {transactions}")
    successful = transactions - failed
    return conflicts / successful if successful > 0 else 0.0


def busyness(busy_s: float, sim_time_s: float) -> float:
    """Busy ÷ simulated time, in [0, 1] (``busy_s`` must be clipped to the simulated time;
    the min only absorbs float rounding)."""
    return min(1.0, busy_s / sim_time_s) if sim_time_s > 0 else 0.0


def as_plain(value):
    """Dataclasses (nested) to dicts for JSON."""
    return asdict(value) if hasattr(value, "__dataclass_fields__") else value
