"""Prometheus metrics of one scheduler process (own registry, so several can live in one process)."""

from __future__ import annotations

from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from omega.attempts import Attempt
from tools.metrics_endpoint import MetricsEndpoint

DECISION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class SchedulerMetrics(MetricsEndpoint):
    """Counters of attempts, txns, commits, conflicts, stale retries and tasks placed, and a histogram of
    decision seconds, labelled by scheduler; ``observe`` is an ``on_attempt`` observer. The gauge of
    quarantined keys reads the view when scraped (``count_quarantine``)."""

    def __init__(self, scheduler: str, registry: CollectorRegistry | None = None):
        super().__init__(registry)
        r, labels = self.registry, ("scheduler",)
        self.attempts = Counter("omega_scheduler_attempts", "Placement attempts (decisions).", labels, registry=r)
        self.txns = Counter("omega_scheduler_txns", "Transactions sent.", labels, registry=r)
        self.commits = Counter("omega_scheduler_commits", "Transactions that committed.", labels, registry=r)
        self.conflicts = Counter("omega_scheduler_conflicts", "Transactions that failed on a conflict, by "
                                 "cause: machine (a claim's machine had changed) or job (only the job record had).",
                                 labels + ("cause",), registry=r)
        self.stale_retries = Counter("omega_scheduler_stale_retries", "Transactions that failed their compares "
                                     "although every claim still fitted (resource-fit; resubmitted).",
                                     labels, registry=r)
        self.tasks_placed = Counter("omega_scheduler_tasks_placed", "Tasks placed (committed claims).",
                                    labels, registry=r)
        self.decision_seconds = Histogram("omega_scheduler_decision_seconds", "Time spent deciding one attempt.",
                                          labels, buckets=DECISION_BUCKETS, registry=r)
        self.quarantined = Gauge("omega_scheduler_quarantined_keys", "Cell keys whose value the scheduler's view "
                                 "quarantined (does not decode or names another id; left out of decisions).",
                                 labels, registry=r)
        self.scheduler = scheduler

    def count_quarantine(self, probe: Callable[[], int]) -> None:
        """Report ``probe()`` (the view's quarantined keys) as ``omega_scheduler_quarantined_keys``."""
        self.quarantined.labels(self.scheduler).set_function(probe)

    def observe(self, attempt: Attempt) -> None:
        s = self.scheduler
        self.attempts.labels(s).inc()
        self.txns.labels(s).inc(attempt.transactions)
        self.commits.labels(s).inc(attempt.transactions - attempt.failed_transactions)
        self.conflicts.labels(s, "machine").inc(attempt.conflict_transactions - attempt.job_conflicts)
        self.conflicts.labels(s, "job").inc(attempt.job_conflicts)
        self.stale_retries.labels(s).inc(attempt.stale_retries)
        self.tasks_placed.labels(s).inc(len(attempt.committed))
        self.decision_seconds.labels(s).observe(attempt.decision_time_s)

    def value(self, name: str) -> float:
        """Current value of a sample (``omega_scheduler_commits_total``…), for tests and logs."""
        found = self.registry.get_sample_value(name, {"scheduler": self.scheduler})
        return 0.0 if found is None else found


def count_quarantine(process, view, metrics: SchedulerMetrics | None = None) -> Callable[[], int]:
    """Count the keys ``view`` (a ``ReplicaView``) holds quarantined in ``process``'s published
    stats (``SchedulerStats.quarantined``) and, when given, in ``metrics``; returns the probe.
    (``len`` of the replica's dict: safe to call from the stats thread.)"""
    quarantine = view.replica.quarantine

    def probe() -> int:
        return len(quarantine)

    process.recorder.quarantine_probe = probe
    if metrics is not None:
        metrics.count_quarantine(probe)
    return probe
