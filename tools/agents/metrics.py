"""Prometheus metrics of one agents process (own registry, so several can live in one process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from tools.metrics_endpoint import MetricsEndpoint


class AgentMetrics(MetricsEndpoint):
    """Counters and gauges of the machine agents; ``serve(port)`` exposes them over HTTP."""

    def __init__(self, registry: CollectorRegistry | None = None):
        super().__init__(registry)
        r = self.registry
        self.tasks_started = Counter("omega_agent_tasks_started", "Tasks marked running.", registry=r)
        self.tasks_finished = Counter("omega_agent_tasks_finished", "Batch tasks ended.", registry=r)
        self.machine_failures = Counter("omega_agent_machine_failures", "Machines failed.", registry=r)
        self.txn_conflicts = Counter("omega_agent_txn_conflicts", "Agent transactions that lost a race.",
                                     registry=r)
        self.running_tasks = Gauge("omega_agent_running_tasks", "Tasks running on the agents' machines.",
                                   registry=r)
        self.machines = Gauge("omega_agent_machines", "Machines simulated by this process.", registry=r)
        self.quarantined = Gauge("omega_agent_quarantined_keys", "Cell keys whose value the agents' replica "
                                 "quarantined (does not decode or names another id; left alone).", registry=r)

    def value(self, name: str) -> float:
        """Current value of a sample (``omega_agent_tasks_finished_total``…), for tests and logs."""
        found = self.registry.get_sample_value(name)
        return 0.0 if found is None else found
