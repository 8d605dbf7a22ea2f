"""Seeded synthetic traces for the fauxmaster experiments: a cell of identical machines
(zones round-robin) plus a ``tools.workload`` job stream, written with the real ``TraceWriter``.

Service jobs run until killed; here each one is killed after an exponential lifetime (mean
``service_lifetime_s``, drawn from its own seeded generator) if that falls inside the trace,
so the cell reaches a steady state instead of filling up with services.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from pathlib import Path

from cellstate.model import JobKind, Machine
from cellstate.resources import Resources
from tools.trace.events import JobKill, JobSubmit, MachineAdd
from tools.trace.format import TraceHeader, TraceWriter
from tools.workload import GIB, WorkloadMix, generate


@dataclass(frozen=True)
class SyntheticSpec:
    """A cell (``machines`` × ``cores`` × ``memory_gib``) and ``duration_s`` of workload ``mix``."""

    machines: int = 200
    cores: float = 8.0
    memory_gib: int = 32
    duration_s: float = 300.0
    seed: int = 1
    service_lifetime_s: float = 200.0
    mix: WorkloadMix = field(default_factory=WorkloadMix)

    def __post_init__(self):
        if self.machines < 1 or self.cores <= 0 or self.memory_gib <= 0:
            raise ValueError(f"a synthetic cell needs machines >= 1 and positive cores and memory, got "
                             f"{self.machines} × {self.cores} cores × {self.memory_gib} GiB")
        if self.duration_s <= 0 or self.service_lifetime_s <= 0:
            raise ValueError(f"duration_s and service_lifetime_s must be > 0, got {self.duration_s} and "
                             f"{self.service_lifetime_s}")

    def with_batch_rate(self, factor: float) -> SyntheticSpec:
        """This spec with the batch arrival rate multiplied by ``factor``."""
        return replace(self, mix=replace(self.mix, batch_rate=self.mix.batch_rate * factor))

    def describe(self) -> str:
        m = self.mix
        return (f"{self.machines} machines × {self.cores:g} cores × {self.memory_gib} GiB, {self.duration_s:g} s, "
                f"seed {self.seed}; batch {m.batch_rate:g} jobs/s (median {m.batch_tasks_median:g} tasks, "
                f"median {m.batch_duration_median_s:g} s), service {m.service_rate:g} jobs/s "
                f"(mean lifetime {self.service_lifetime_s:g} s)")


def cell_machines(spec: SyntheticSpec) -> list[Machine]:
    """The cell's machines: ids ``m0000``…, zones of the mix round-robin."""
    capacity = Resources.of(round(spec.cores * 1000), spec.memory_gib * GIB)
    zones = spec.mix.zones or ("",)
    return [Machine(f"m{i:04d}", capacity, zone=zones[i % len(zones)], rack=f"r{i // 20:03d}")
            for i in range(spec.machines)]


def synthetic_events(spec: SyntheticSpec) -> list:
    """Machine adds at t = 0, then job submissions and service kills in time order."""
    events: list = [MachineAdd(0.0, m) for m in cell_machines(spec)]
    lifetimes = random.Random(f"{spec.seed}/service-lifetime")
    timed: list = []
    for t, job in generate(spec.seed, spec.duration_s, spec.mix):
        timed.append(JobSubmit(t, job))
        if job.kind is JobKind.SERVICE:
            end = t + lifetimes.expovariate(1 / spec.service_lifetime_s)
            if end < spec.duration_s:
                timed.append(JobKill(end, job.id))
    timed.sort(key=lambda e: e.t)  # stable: a kill never precedes its own submission
    return events + timed


def write_synthetic_trace(path, spec: SyntheticSpec) -> Path:
    """Write the trace of ``spec`` at ``path`` (``.gz`` compresses); the path."""
    path = Path(path)
    header = TraceHeader(source=f"synthetic (tools.workload): {spec.describe()}", created_at="1970-01-01T00:00:00Z",
                         capacity_model=f"uniform: {spec.cores:g} cores, {spec.memory_gib} GiB per machine",
                         cell="synthetic")
    with TraceWriter(path, header) as writer:
        for event in synthetic_events(spec):
            writer.write(event)
    return path
