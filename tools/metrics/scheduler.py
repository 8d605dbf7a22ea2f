"""Prometheus metrics of one scheduler process (own registry, so several can live in one process).

Every series carries the labels ``cell``, ``kind`` and ``scheduler``; the registry also holds
the process and Python collectors (``tools.metrics.endpoint``).
"""

from __future__ import annotations

import time
from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from cellstate.model import JobKind
from omega.attempts import Attempt
from tools.metrics.endpoint import MetricsEndpoint, replica_gauges

DECISION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
COMMIT_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
LABELS = ("cell", "kind", "scheduler")


class SchedulerEndpoint(MetricsEndpoint):
    """Counters of attempts, txns, commits, conflicts, stale retries and tasks placed, histograms of
    decision and commit seconds; ``observe`` is an ``on_attempt`` observer, ``timed`` wraps the
    committer. Gauges read the process when scraped: quarantined keys (``count_quarantine``),
    the queue of pending jobs and tasks of the scheduler's class and the replica's lag
    (``watch_view``)."""

    def __init__(self, scheduler: str, registry: CollectorRegistry | None = None, *, cell: str = "",
                 kind: str = ""):
        super().__init__(registry)
        r = self.registry
        self.labels = {"cell": cell, "kind": kind, "scheduler": scheduler}

        def counter(name, doc, extra=()):
            return Counter(name, doc, LABELS + extra, registry=r)

        self.attempts = counter("omega_scheduler_attempts", "Placement attempts (decisions).")
        self.txns = counter("omega_scheduler_txns", "Transactions sent.")
        self.commits = counter("omega_scheduler_commits", "Transactions that committed.")
        self.conflicts = counter("omega_scheduler_conflicts", "Transactions that failed on a conflict, by cause: "
                                 "machine (a claim's machine had changed) or job (only the job record had).",
                                 ("cause",))
        self.stale_retries = counter("omega_scheduler_stale_retries", "Transactions that failed their compares "
                                     "although every claim still fitted (resource-fit; resubmitted).")
        self.tasks_placed = counter("omega_scheduler_tasks_placed", "Tasks placed (committed claims).")
        self.decision_seconds = Histogram("omega_scheduler_decision_seconds", "Time spent deciding one attempt.",
                                          LABELS, buckets=DECISION_BUCKETS, registry=r)
        self.commit_seconds = Histogram("omega_scheduler_commit_seconds", "Time of one commit call (the store "
                                        "transaction and its reply), by outcome: committed or failed (compares "
                                        "failed, or the store erred).", LABELS + ("outcome",),
                                        buckets=COMMIT_BUCKETS, registry=r)
        self.quarantined = Gauge("omega_scheduler_quarantined_keys", "Cell keys whose value the scheduler's view "
                                 "quarantined (does not decode or names another id; left out of decisions).",
                                 LABELS, registry=r)
        self.queue_jobs = Gauge("omega_scheduler_queue_jobs", "Jobs of the scheduler's class with pending tasks, "
                                "in its view (every scheduler of the class sees the same queue).", LABELS, registry=r)
        self.queue_tasks = Gauge("omega_scheduler_queue_tasks", "Pending tasks of those jobs.", LABELS, registry=r)
        self.scheduler = scheduler

    def _l(self, metric, **extra):
        return metric.labels(**self.labels, **extra)

    def count_quarantine(self, probe: Callable[[], int]) -> None:
        """Report ``probe()`` (the view's quarantined keys) as ``omega_scheduler_quarantined_keys``."""
        self._l(self.quarantined).set_function(probe)

    def watch_view(self, view, scheduler_class: str, head: Callable[[], int]) -> None:
        """Queue gauges over ``view``'s pending jobs whose class is ``scheduler_class`` and the
        replica gauges (``head``: the store's current revision). Read when scraped: each
        ``pending_jobs(kind)`` is one list copy, safe beside the scheduling thread."""
        def pending() -> list:
            return [e for kind in JobKind for e in view.pending_jobs(kind)
                    if e.record.job.scheduler_class == scheduler_class]

        self._l(self.queue_jobs).set_function(lambda: len(pending()))
        self._l(self.queue_tasks).set_function(lambda: sum(e.record.tasks.count("p") for e in pending()))
        replica_gauges(self.registry, self.labels, view.replica, head)

    def timed(self, committer) -> TimedCommitter:
        """``committer`` with each ``commit`` timed into ``omega_scheduler_commit_seconds``."""
        return TimedCommitter(committer, self)

    def observe(self, attempt: Attempt) -> None:
        self._l(self.attempts).inc()
        self._l(self.txns).inc(attempt.transactions)
        self._l(self.commits).inc(attempt.transactions - attempt.failed_transactions)
        self._l(self.conflicts, cause="machine").inc(attempt.conflict_transactions - attempt.job_conflicts)
        self._l(self.conflicts, cause="job").inc(attempt.job_conflicts)
        self._l(self.stale_retries).inc(attempt.stale_retries)
        self._l(self.tasks_placed).inc(len(attempt.committed))
        self._l(self.decision_seconds).observe(attempt.decision_time_s)

    def value(self, name: str, **extra: str) -> float:
        """Current value of a sample (``omega_scheduler_commits_total``…), for tests and logs."""
        found = self.registry.get_sample_value(name, {**self.labels, **extra})
        return 0.0 if found is None else found


class TimedCommitter:
    """A committer whose ``commit`` calls are timed (committed / failed); every other attribute
    (``max_claims_per_txn``, ``gangs``…) is the wrapped committer's."""

    def __init__(self, committer, metrics: SchedulerEndpoint):
        self._committer = committer
        self._committed = metrics._l(metrics.commit_seconds, outcome="committed")
        self._failed = metrics._l(metrics.commit_seconds, outcome="failed")

    def commit(self, plan):
        start = time.perf_counter()
        try:
            outcome = self._committer.commit(plan)
        except BaseException:
            self._failed.observe(time.perf_counter() - start)
            raise
        (self._committed if outcome.committed else self._failed).observe(time.perf_counter() - start)
        return outcome

    def __getattr__(self, name):
        return getattr(self._committer, name)


def count_quarantine(process, view, metrics: SchedulerEndpoint | None = None) -> Callable[[], int]:
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
