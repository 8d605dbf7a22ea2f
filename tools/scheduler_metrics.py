"""Prometheus metrics of one scheduler process (own registry, so several can live in one process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from omega.attempts import Attempt
from tools.metrics_endpoint import MetricsEndpoint

DECISION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class SchedulerMetrics(MetricsEndpoint):
    """Counters of attempts, txns, commits, conflicts, stale retries and tasks placed, and a histogram of
    decision seconds, labelled by scheduler; ``observe`` is an ``on_attempt`` observer."""

    def __init__(self, scheduler: str, registry: CollectorRegistry | None = None):
        super().__init__(registry)
        r, labels = self.registry, ("scheduler",)
        self.attempts = Counter("omega_scheduler_attempts", "Placement attempts (decisions).", labels, registry=r)
        self.txns = Counter("omega_scheduler_txns", "Transactions sent.", labels, registry=r)
        self.commits = Counter("omega_scheduler_commits", "Transactions that committed.", labels, registry=r)
        self.conflicts = Counter("omega_scheduler_conflicts", "Transactions that failed on a conflict.",
                                 labels, registry=r)
        self.stale_retries = Counter("omega_scheduler_stale_retries", "Transactions that failed their compares "
                                     "although every claim still fitted (resource-fit; resubmitted).",
                                     labels, registry=r)
        self.tasks_placed = Counter("omega_scheduler_tasks_placed", "Tasks placed (committed claims).",
                                    labels, registry=r)
        self.decision_seconds = Histogram("omega_scheduler_decision_seconds", "Time spent deciding one attempt.",
                                          labels, buckets=DECISION_BUCKETS, registry=r)
        self.scheduler = scheduler

    def observe(self, attempt: Attempt) -> None:
        s = self.scheduler
        self.attempts.labels(s).inc()
        self.txns.labels(s).inc(attempt.transactions)
        self.commits.labels(s).inc(attempt.transactions - attempt.failed_transactions)
        self.conflicts.labels(s).inc(attempt.conflict_transactions)
        self.stale_retries.labels(s).inc(attempt.stale_retries)
        self.tasks_placed.labels(s).inc(len(attempt.committed))
        self.decision_seconds.labels(s).observe(attempt.decision_time_s)

    def value(self, name: str) -> float:
        """Current value of a sample (``omega_scheduler_commits_total``…), for tests and logs."""
        found = self.registry.get_sample_value(name, {"scheduler": self.scheduler})
        return 0.0 if found is None else found
