"""``StatsRecorder``: accumulates a scheduler's placement attempts into the ``SchedulerStats`` it
publishes (``cellstate.scheduler_stats``). Pure arithmetic over sliding windows."""

from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any, Callable

from cellstate.scheduler_stats import HOT_MACHINES_MAX, RECENT_CONFLICTS_MAX, ConflictNote, HotMachine, SchedulerStats

WINDOW_S = 10.0
DECISION_SAMPLES = 1_000


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile ``p`` (0 < p <= 100) of ascending ``sorted_values``; 0 when empty."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(p / 100.0 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


@dataclass(frozen=True, slots=True)
class _Attempt:
    """What the sliding windows keep of one attempt (``at`` = when it ended)."""

    at: float
    busy_s: float
    job_placed: bool
    tasks_placed: int


_COUNT_ARGS = ("txns", "commits", "conflicts", "retries", "tasks_placed", "tasks_unplaced", "stale_retries",
               "job_conflicts")


def _check_attempt(decision_s: float, busy_s: float, counts: dict[str, int], now: float) -> None:
    for name, value in (("decision_s", decision_s), ("busy_s", busy_s), ("now", now)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
            raise ValueError(f"record_attempt: {name} must be a non-negative finite number, got {value!r}")
    for name, value in counts.items():
        if type(value) is not int or value < 0:
            raise ValueError(f"record_attempt: {name} must be a non-negative int, got {value!r}")


class StatsRecorder:
    """Accumulates placement attempts of one scheduler and snapshots them as SchedulerStats.

    Counters are totals since start. ``jobs_per_s``, ``placements_per_s`` and ``busyness``
    cover the last ``window_s`` seconds (or the time since ``started_at``, if shorter); an
    attempt's busy time is taken to end at its ``now`` and is clipped to the window.
    Percentiles are nearest-rank over the last ``samples`` decision times. Hot machines are
    the ``HOT_MACHINES_MAX`` with most conflicts since start (ties by machine id); recent
    conflicts are the last ``RECENT_CONFLICTS_MAX``, oldest first. Not thread-safe.
    """

    def __init__(self, name: str, kind: str, *, pid: int = 0, host: str = "", started_at: float = 0.0,
                 conflict_mode: str = "", commit_mode: str = "", window_s: float = WINDOW_S,
                 samples: int = DECISION_SAMPLES):
        if not name or "/" in name:
            raise ValueError(f'scheduler name must be non-empty without "/", got {name!r}')
        if not isinstance(kind, str) or not kind or "/" in kind:
            raise ValueError(f'scheduler kind must be a non-empty name without "/", got {kind!r}')
        if not window_s > 0 or samples < 1:
            raise ValueError(f"window_s must be > 0 and samples >= 1, got {window_s!r}, {samples!r}")
        self._identity: dict[str, Any] = dict(name=name, kind=kind, pid=pid, host=host, started_at=float(started_at),
                              conflict_mode=conflict_mode, commit_mode=commit_mode)
        self._started_at = float(started_at)
        self.window_s = float(window_s)
        self._totals: Counter[str] = Counter()
        self._window: deque[_Attempt] = deque()
        self._decisions: deque[float] = deque(maxlen=samples)
        self._machine_conflicts: Counter[str] = Counter()
        self._machine_winners: dict[str, Counter[str]] = {}
        self._recent: deque[ConflictNote] = deque(maxlen=RECENT_CONFLICTS_MAX)
        self.quarantine_probe: Callable[[], int] | None = None  # keys quarantined now (a view's count)

    def record_attempt(self, decision_s: float, busy_s: float, txns: int, commits: int, conflicts: int,
                       retries: int, tasks_placed: int, tasks_unplaced: int, job_placed: bool,
                       conflict_machines: dict[str, str], job_id: str, now: float,
                       stale_retries: int = 0, job_conflicts: int = 0) -> None:
        """Add one placement attempt (one decision and its transactions) that ended at ``now``.
        ``txns`` = ``commits`` + ``conflicts`` + ``stale_retries`` (failed txns that were
        not conflicts, see ``omega.modes``); ``job_conflicts`` of the ``conflicts`` were
        caused by the job record alone. ``conflict_machines`` maps each machine of a
        conflict to the winner (its ledger's writer). An attempt with ``conflicts`` > 0
        becomes a recent-conflict note."""
        counts = dict(zip(_COUNT_ARGS, (txns, commits, conflicts, retries, tasks_placed, tasks_unplaced,
                                        stale_retries, job_conflicts)))
        _check_attempt(decision_s, busy_s, counts, now)
        if job_placed is not True and job_placed is not False:
            raise ValueError(f"record_attempt: job_placed must be a bool, got {job_placed!r}")
        self._totals.update(counts)
        self._totals["attempts"] += 1
        self._totals["jobs_placed"] += job_placed
        self._window.append(_Attempt(float(now), float(busy_s), job_placed, tasks_placed))
        self._decisions.append(float(decision_s))
        machines = sorted(conflict_machines)
        for machine in machines:
            self._machine_conflicts[machine] += 1
            self._machine_winners.setdefault(machine, Counter())[conflict_machines[machine]] += 1
        if conflicts or machines:
            self._recent.append(ConflictNote(float(now), job_id, tuple(machines),
                                             tuple(conflict_machines[m] for m in machines)))
        self._forget_before(now - self.window_s)

    def _forget_before(self, horizon: float) -> None:
        """Drop attempts whose busy interval ended before ``horizon``."""
        while self._window and self._window[0].at < horizon:
            self._window.popleft()

    def snapshot(self, now: float) -> SchedulerStats:
        """The stats as of ``now``."""
        self._forget_before(now - self.window_s)
        start = now - self._span(now)
        jobs = placements = 0
        busy = 0.0
        for a in self._window:
            if a.at > start and a.at <= now:
                jobs += a.job_placed
                placements += a.tasks_placed
            busy += max(0.0, min(a.at, now) - max(a.at - a.busy_s, start))
        span = now - start
        decisions = sorted(self._decisions)
        counts: dict[str, Any] = {name: self._totals[name] for name in ("attempts", "jobs_placed") + _COUNT_ARGS}
        return SchedulerStats(
            **self._identity, updated_at=float(now),
            **counts,
            jobs_per_s=jobs / span if span else 0.0,
            placements_per_s=placements / span if span else 0.0,
            busyness=min(1.0, busy / span) if span else 0.0,
            decision_ms_p50=1000.0 * percentile(decisions, 50),
            decision_ms_p90=1000.0 * percentile(decisions, 90),
            decision_ms_p99=1000.0 * percentile(decisions, 99),
            hot_machines=self._hot_machines(),
            recent_conflicts=tuple(self._recent),
            quarantined=self.quarantine_probe() if self.quarantine_probe is not None else 0,
        )

    def _span(self, now: float) -> float:
        """Length of the rate window at ``now``: the window, or the time since start if shorter."""
        return max(0.0, min(self.window_s, now - self._started_at))

    def _hot_machines(self) -> tuple[HotMachine, ...]:
        top = sorted(self._machine_conflicts.items(), key=lambda kv: (-kv[1], kv[0]))[:HOT_MACHINES_MAX]
        return tuple(HotMachine(machine, count, _ranked(self._machine_winners[machine])) for machine, count in top)


def _ranked(counts: Counter[str]) -> tuple[tuple[str, int], ...]:
    """(name, count) pairs, most frequent first, ties by name."""
    return tuple(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
