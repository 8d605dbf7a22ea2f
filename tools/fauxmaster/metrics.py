"""Replay metrics, as in the Omega paper and Diego's simulation.

- busyness: virtual seconds a scheduler spent deciding (and backing off) ÷ simulated time
  (a decision still running when the replay stops counts up to the stop only: at most 1);
- conflict fraction: conflict transactions (failed their compares and were not resource-fit
  stale retries: ``omega.attempts.Attempt.conflict_transactions``) ÷ successful transactions,
  Omega's definition (as ``omega.stats.SchedulerStats.conflict_fraction``);
- job wait time from submission to the first attempt and to fully placed (mean, p90, p99;
  nearest-rank percentiles);
- unscheduled jobs at the end (a pending task left, not killed);
- the wait CDFs over every job a scheduler had to place (``wait_cdf``): a curve ends at the
  fraction that got there, and the rest is counted ("never"), not dropped;
- the conflict fraction over time per scheduler (``conflicts_over_time``): the schedulers'
  cumulative transaction counts, sampled with utilization, and the fraction in each window;
- bounded slowdown (``slowdown``): per job with a run time that was fully placed,
  max(1, (wait + run) / max(run, 10 s)) (Feitelson's BSLD, the standard 10 s threshold), mean,
  median and p90; and the makespan: first submission to the last job end by the stop;
- utilization (allocated ÷ capacity of up machines, cpu and memory) sampled over time, and
  the load distribution across machines: std ÷ mean of per-machine cpu utilization.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from itertools import repeat
from operator import sub

from omega.stats import percentile
from tools.fauxmaster.usage_ledger import UsageLedger


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
    taken_by: dict[str, str] | None = None
    """When kept (``ReplayConfig.job_records``): job → the scheduler that first took it."""
    runs: dict[str, float] = field(default_factory=dict)
    """Run time of each job that ends by itself (a batch job's ``duration_s``), by job id."""

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
    """Cell utilization at virtual time ``t``; ``load_cv`` = std/mean of machines' cpu utilization;
    ``extra``: (name, allocated ÷ capacity) of each extra resource (gpu, …) the up machines have."""

    t: float
    cpu: float
    memory: float
    load_cv: float
    machines: int
    extra: tuple[tuple[str, float], ...] = ()

    def to_dict(self) -> dict:
        """Plain data; ``extra`` as {name: fraction}, left out when the cell has no extra resource."""
        d = {"t": self.t, "cpu": self.cpu, "memory": self.memory, "load_cv": self.load_cv, "machines": self.machines}
        if self.extra:
            d["extra"] = dict(self.extra)
        return d


def sample_utilization(t: float, usage: UsageLedger) -> UtilizationSample:
    """Utilization of the up machines of ``usage`` now (from the ledger's totals and shares)."""
    cap_cpu, cap_mem, used_cpu, used_mem = usage.totals
    shares = list(usage.shares.values())
    extra = tuple((name, used / cap if cap else 0.0)
                  for name, (cap, used) in sorted(usage.extra.items())) if usage.extra else ()
    return UtilizationSample(t, used_cpu / cap_cpu if cap_cpu else 0.0, used_mem / cap_mem if cap_mem else 0.0,
                             load_cv(shares), len(shares), extra)


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


CDF_MAX_POINTS = 500
"""A wait CDF in the JSON keeps at most this many (wait, fraction) steps (``cdf_steps``)."""


def cdf_steps(waits: list[float], population: int, max_points: int = CDF_MAX_POINTS) -> dict[str, list[float]]:
    """The empirical CDF of ``waits`` as a fraction of ``population`` (>= len(waits): the others never got
    there, so the curve ends at len(waits) / population): ``{"waits_s": [...], "fractions": [...]}``,
    every step when at most ``max_points``, else the step at each rank ceil(k n / max_points), k = 1..max_points
    (the largest wait always included)."""
    ordered = sorted(waits)
    n = len(ordered)
    if population < n:
        raise ValueError(f"population {population} < {n} waits")
    ranks = range(1, n + 1) if n <= max_points else [-(-k * n // max_points) for k in range(1, max_points + 1)]
    return {"waits_s": [ordered[r - 1] for r in ranks], "fractions": [r / population for r in ranks]}


def wait_cdf(journal: JobJournal, pending_at_end: set[str], recorded: set[str]) -> dict:
    """The wait CDFs' population and steps: every submitted job but those the recorded t = 0 state placed
    whole and no scheduler touched (``recorded``: they never waited). Each curve ends below 1 by its
    "never" count; for "to_placed" that splits into jobs still pending at the end and jobs that ended or
    were killed before being fully placed."""
    submitted, taken, placed = journal.submitted, journal.first_taken, journal.fully_placed
    untouched = {j for j in recorded if j in submitted and j not in taken and j not in placed}
    population = len(submitted) - len(untouched)
    first, full = journal.waits_to_first_attempt(), journal.waits_to_placed()
    pending = sum(1 for j in pending_at_end if j in submitted and j not in placed and j not in untouched)
    never_placed = population - len(full)
    return {"jobs": population, "recorded_at_t0": len(untouched),
            "to_first_attempt": {**cdf_steps(first, population), "never": population - len(first)},
            "to_placed": {**cdf_steps(full, population), "never": never_placed, "pending_at_end": pending,
                          "ended_unplaced": never_placed - pending}}


BSLD_THRESHOLD_S = 10.0
"""Bounded slowdown's run-time floor (Feitelson et al., "Theory and practice in parallel job
scheduling", 1997: 10 s, so that very short jobs do not dominate the mean)."""


def bounded_slowdown(wait: float, run: float, threshold: float = BSLD_THRESHOLD_S) -> float:
    """max(1, (wait + run) / max(run, threshold))."""
    return max(1.0, (wait + run) / max(run, threshold))


def slowdown(journal: JobJournal, sim_time: float, recorded: set[str] = frozenset()) -> dict:
    """Bounded slowdown and makespan of the jobs with a run time (``journal.runs``):
    ``{"jobs": fully placed ones, "never": never fully placed, "recorded_at_t0": left out, placed whole
    by the recorded t = 0 state (``recorded``) and untouched by the schedulers (they never waited, as in
    ``wait_cdf``), "threshold_s", "mean", "median", "p90" (None when no job), "makespan_s": first
    submission to the last end by ``sim_time`` (None when none ended), "jobs_ended", "jobs_not_ended":
    submitted jobs without an end by the stop (never placed, no run time, or running on)}``. The wait is
    submission to fully placed (a gang: its one commit)."""
    submitted, placed, runs = journal.submitted, journal.fully_placed, journal.runs
    values, ends = [], []
    for job_id, run in runs.items():
        at = placed.get(job_id)
        if at is None or job_id not in submitted:
            continue
        values.append(bounded_slowdown(at - submitted[job_id], run))
        if at + run <= sim_time:
            ends.append(at + run)
    values.sort()
    with_run = [j for j in runs if j in submitted]
    untouched = sum(1 for j in with_run if j in recorded and j not in journal.first_taken and j not in placed)
    first = min(submitted.values()) if submitted else None
    return {"jobs": len(values), "never": len(with_run) - untouched - len(values), "recorded_at_t0": untouched,
            "threshold_s": BSLD_THRESHOLD_S,
            "mean": sum(values) / len(values) if values else None,
            "median": percentile(values, 50) if values else None,
            "p90": percentile(values, 90) if values else None,
            "makespan_s": max(ends) - first if ends and first is not None else None,
            "jobs_ended": len(ends), "jobs_not_ended": len(submitted) - len(ends)}


def windowed_fractions(transactions: list[int], failed: list[int], conflicts: list[int],
                       step: int = 1) -> tuple[list[int], list[float | None]]:
    """The conflict fraction in each window between cumulative counts about ``step`` samples apart: the
    windows end at samples step, 2 step, ... and the last; the first opens at sample 0. Returns the
    windows' end indices and, for each, conflicts ÷ successful transactions in it (None when none
    succeeded in it)."""
    n = len(transactions)
    ends = list(range(step, n, step))
    if n > 1 and (not ends or ends[-1] != n - 1):
        ends.append(n - 1)
    fractions: list[float | None] = []
    start = 0
    for end in ends:
        ok = (transactions[end] - failed[end]) - (transactions[start] - failed[start])
        fractions.append((conflicts[end] - conflicts[start]) / ok if ok > 0 else None)
        start = end
    return ends, fractions


def conflicts_over_time(names: list[str], samples: list[tuple[float, tuple]]) -> dict:
    """``{"t": [...], "schedulers": {name: {"transactions", "failed", "conflicts": cumulative counts at
    each t, "fraction": [None, then the window (t[i-1], t[i]]'s conflict fraction or None]}}}`` from
    ``samples`` of ``(t, ((transactions, failed, conflicts) per scheduler in ``names`` order))``."""
    out = {"t": [t for t, _ in samples], "schedulers": {}}
    for i, name in enumerate(names):
        tx, failed, conflicts = ([counts[i][k] for _, counts in samples] for k in range(3))
        out["schedulers"][name] = {"transactions": tx, "failed": failed, "conflicts": conflicts,
                                   "fraction": ([None] + windowed_fractions(tx, failed, conflicts)[1]) if tx else []}
    return out


def as_plain(value):
    """Dataclasses (nested) to dicts for JSON."""
    return asdict(value) if hasattr(value, "__dataclass_fields__") else value
