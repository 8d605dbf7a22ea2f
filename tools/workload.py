"""A seeded workload generator in the spirit of the Omega paper's simulator.

Two independent streams, batch and service, each with exponential interarrival times at its
own rate. Batch jobs: many tasks (lognormal, clipped to 1..1000), exponential durations with a
median of minutes, small cpu/memory shapes. Service jobs: few tasks (1..50), no duration
(they run until killed), larger shapes, higher priority, often spread (different_machine).
Each stream has its own random generator derived from the seed, so changing one rate does
not change the other stream's jobs.
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass, replace
from typing import Iterator

from cellstate.model import Constraint, ConstraintOp, Job, JobKind
from cellstate.resources import Resources

GIB = 1024


@dataclass(frozen=True, slots=True)
class TaskShape:
    """A per-task request (cores, MiB, GPU milli: a share below 1000, else whole GPUs) and its
    weight among a kind's shapes."""

    cores: float
    memory: int
    weight: float = 1.0
    gpu: int = 0

    @property
    def request(self) -> Resources:
        return Resources.of(round(self.cores * 1000), self.memory, gpu=self.gpu)


GPU_BATCH_SHAPES = (
    TaskShape(4, 16 * GIB, 3, gpu=250), TaskShape(6, 24 * GIB, 3, gpu=500), TaskShape(8, 32 * GIB, 4, gpu=1000),
    TaskShape(16, 64 * GIB, 1, gpu=2000), TaskShape(64, 256 * GIB, 0.3, gpu=8000), TaskShape(2, 4 * GIB, 2))
"""Batch task shapes of ``generate --gpu`` (``omega demo --gpu``), shaped like Alibaba's openb
pods: shares of a quarter and a half GPU, whole 1-, 2- and 8-GPU tasks, some CPU-only ones."""


@dataclass(frozen=True, slots=True)
class WorkloadMix:
    """Distribution parameters; rates in jobs per second."""

    batch_rate: float = 1.0
    service_rate: float = 0.1
    batch_tasks_median: float = 12.0
    batch_tasks_sigma: float = 1.4
    batch_tasks_max: int = 1000
    service_tasks_median: float = 4.0
    service_tasks_sigma: float = 0.9
    service_tasks_max: int = 50
    batch_duration_median_s: float = 300.0
    batch_shapes: tuple[TaskShape, ...] = (
        TaskShape(0.25, 512, 2), TaskShape(0.5, 1 * GIB, 4), TaskShape(1, 2 * GIB, 3), TaskShape(2, 4 * GIB, 1))
    service_shapes: tuple[TaskShape, ...] = (
        TaskShape(1, 4 * GIB, 3), TaskShape(2, 8 * GIB, 2), TaskShape(4, 16 * GIB, 1))
    owners: int = 8
    packages: int = 20
    package_fraction: float = 0.5
    gang_fraction: float = 0.05
    spread_fraction: float = 0.6
    zones: tuple[str, ...] = ("zone-a", "zone-b", "zone-c")
    zone_constraint_fraction: float = 0.1
    routes: tuple[tuple[str, float], ...] = ()
    """(scheduler class, fraction): each job names that class with that probability (drawn
    from a stream of its own, so routes change no other field); the rest name none and go
    to their kind's class."""

    def __post_init__(self):
        if self.batch_rate < 0 or self.service_rate < 0 or not math.isfinite(self.batch_rate + self.service_rate):
            raise ValueError(f"rates must be finite and >= 0, got batch {self.batch_rate}, "
                             f"service {self.service_rate}")
        if not self.batch_shapes or not self.service_shapes:
            raise ValueError("each kind needs at least one task shape")
        if self.routes:
            check_routes(self.routes)


def generate(seed: int, duration_s: float, mix: WorkloadMix = WorkloadMix(),
             id_prefix: str | None = None) -> Iterator[tuple[float, Job]]:
    """Jobs arriving in ``[0, duration_s)``, in arrival order, as (time offset, Job).

    Ids are ``{id_prefix}b000000``… and ``{id_prefix}s000000``… (default prefix ``w{seed}-``).
    """
    if duration_s < 0:
        raise ValueError(f"duration_s must be >= 0, got {duration_s}")
    prefix = f"w{seed}-" if id_prefix is None else id_prefix
    batch = _stream(random.Random(f"{seed}/batch"), mix.batch_rate, duration_s,
                    lambda rng, n: _batch_job(rng, mix, f"{prefix}b{n:06d}"))
    service = _stream(random.Random(f"{seed}/service"), mix.service_rate, duration_s,
                      lambda rng, n: _service_job(rng, mix, f"{prefix}s{n:06d}"))
    arrivals = heapq.merge(batch, service, key=lambda item: item[0])
    return _routed(random.Random(f"{seed}/route"), mix.routes, arrivals) if mix.routes else arrivals


def check_routes(routes) -> None:
    """ValueError unless ``routes`` are (class name, fraction in [0, 1]) with fractions summing to <= 1."""
    total = 0.0
    for name, fraction in routes:
        if not isinstance(name, str) or not name or "/" in name:
            raise ValueError(f"route: scheduler class must be a non-empty name without '/', got {name!r}")
        if not 0 <= fraction <= 1:
            raise ValueError(f"route {name}: fraction must be in [0, 1], got {fraction!r}")
        total += fraction
    if total > 1 + 1e-9:
        raise ValueError(f"route fractions sum to {total:g}, more than 1")


def parse_routes(text: str) -> tuple[tuple[str, float], ...]:
    """``"borg=0.25,solver=0.1"`` -> (("borg", 0.25), ("solver", 0.1)); ``"borg"`` alone is
    ``borg=1``. ValueError naming what is wrong."""
    routes = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, fraction = part.partition("=")
        try:
            value = float(fraction) if sep else 1.0
        except ValueError:
            raise ValueError(f"route {part!r}: fraction {fraction!r} is not a number") from None
        routes.append((name.strip(), value))
    if not routes:
        raise ValueError(f"route {text!r}: expected CLASS[=FRACTION][,CLASS=FRACTION...]")
    check_routes(routes)
    return tuple(routes)


def _routed(rng: random.Random, routes, arrivals) -> Iterator[tuple[float, Job]]:
    for t, job in arrivals:
        x, at = rng.random(), 0.0
        for name, fraction in routes:
            at += fraction
            if x < at:
                job = replace(job, scheduler=name)
                break
        yield t, job


def _stream(rng: random.Random, rate: float, duration_s: float, make) -> Iterator[tuple[float, Job]]:
    if rate <= 0:
        return
    t, n = rng.expovariate(rate), 0
    while t < duration_s:
        yield t, make(rng, n)
        n += 1
        t += rng.expovariate(rate)


def _lognormal_count(rng: random.Random, median: float, sigma: float, high: int) -> int:
    return max(1, min(high, round(rng.lognormvariate(math.log(median), sigma))))


def _shape(rng: random.Random, shapes: tuple[TaskShape, ...]) -> Resources:
    return rng.choices(shapes, [s.weight for s in shapes])[0].request


def _common(rng: random.Random, mix: WorkloadMix) -> dict:
    package = f"pkg-{rng.randrange(mix.packages):02d}" if mix.packages and rng.random() < mix.package_fraction else ""
    return {"owner": f"user-{rng.randrange(max(1, mix.owners)):02d}", "package": package}


def _batch_job(rng: random.Random, mix: WorkloadMix, job_id: str) -> Job:
    tasks = _lognormal_count(rng, mix.batch_tasks_median, mix.batch_tasks_sigma, mix.batch_tasks_max)
    mean = mix.batch_duration_median_s / math.log(2)
    duration = round(rng.expovariate(1 / mean), 3) if mean > 0 else 0.0
    return Job(id=job_id, kind=JobKind.BATCH, tasks=tasks, request=_shape(rng, mix.batch_shapes),
               priority=rng.randrange(3), duration_s=duration,
               gang=tasks <= 50 and rng.random() < mix.gang_fraction, **_common(rng, mix))


def _service_job(rng: random.Random, mix: WorkloadMix, job_id: str) -> Job:
    tasks = _lognormal_count(rng, mix.service_tasks_median, mix.service_tasks_sigma, mix.service_tasks_max)
    constraints = ()
    if mix.zones and rng.random() < mix.zone_constraint_fraction:
        constraints = (Constraint("zone", ConstraintOp.EQ, (rng.choice(mix.zones),)),)
    return Job(id=job_id, kind=JobKind.SERVICE, tasks=tasks, request=_shape(rng, mix.service_shapes),
               priority=100 + rng.randrange(3), constraints=constraints,
               different_machine=rng.random() < mix.spread_fraction, **_common(rng, mix))
