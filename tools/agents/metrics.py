"""Prometheus metrics of one agents process (own registry, so several can live in one process).

Every series carries the labels ``cell`` and ``agent`` (the agents' name); the registry also
holds the process and Python collectors (``tools.metrics.endpoint``).
"""

from __future__ import annotations

from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge

from tools.metrics.endpoint import MetricsEndpoint, replica_gauges


class AgentMetrics(MetricsEndpoint):
    """Counters and gauges of the machine agents (each a labelled child: ``inc``/``set`` as
    usual); ``serve(port)`` exposes them over HTTP, ``watch_replica`` adds the replica gauges."""

    def __init__(self, registry: CollectorRegistry | None = None, *, cell: str = "", agent: str = ""):
        super().__init__(registry)
        r = self.registry
        self.labels = {"cell": cell, "agent": agent}
        names = tuple(self.labels)

        def counter(name, doc):
            return Counter(name, doc, names, registry=r).labels(**self.labels)

        def gauge(name, doc):
            return Gauge(name, doc, names, registry=r).labels(**self.labels)

        self.tasks_started = counter("omega_agent_tasks_started", "Tasks marked running.")
        self.tasks_finished = counter("omega_agent_tasks_finished", "Batch tasks ended.")
        self.machine_failures = counter("omega_agent_machine_failures", "Machines failed.")
        self.txn_conflicts = counter("omega_agent_txn_conflicts", "Agent transactions that lost a race.")
        self.running_tasks = gauge("omega_agent_running_tasks", "Tasks running on the agents' machines.")
        self.machines = gauge("omega_agent_machines", "Machines simulated by this process.")
        self.quarantined = gauge("omega_agent_quarantined_keys", "Cell keys whose value the agents' replica "
                                 "quarantined (does not decode or names another id; left alone).")

    def watch_replica(self, replica, head: Callable[[], int]) -> None:
        """``omega_replica_revision`` and ``omega_replica_lag_revisions`` of the agents' replica."""
        replica_gauges(self.registry, self.labels, replica, head)

    def value(self, name: str) -> float:
        """Current value of a sample (``omega_agent_tasks_finished_total``…), for tests and logs."""
        found = self.registry.get_sample_value(name, self.labels)
        return 0.0 if found is None else found
