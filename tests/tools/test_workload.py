"""The seeded workload generator: reproducible, ordered, within the mix's bounds."""

from __future__ import annotations

import statistics

import pytest

from cellstate.codec.records import validate_job
from cellstate.model import JobKind
from tools.workload import WorkloadMix, generate


def test_same_seed_same_workload():
    assert list(generate(5, 300)) == list(generate(5, 300))
    assert list(generate(5, 300)) != list(generate(6, 300))


def test_arrivals_ordered_within_duration_and_valid():
    arrivals = list(generate(1, 600))
    times = [t for t, _ in arrivals]
    assert times == sorted(times) and 0 <= times[0] and times[-1] < 600
    for _, job in arrivals:
        validate_job(job)
    assert len({job.id for _, job in arrivals}) == len(arrivals)


@pytest.mark.parametrize("kind, rate, high, has_duration", [
    (JobKind.BATCH, 2.0, 1000, True), (JobKind.SERVICE, 1.0, 50, False),
], ids=["batch", "service"])
def test_kind_rates_and_bounds(kind, rate, high, has_duration):
    mix = WorkloadMix(batch_rate=2.0, service_rate=1.0)
    jobs = [job for _, job in generate(2, 2000, mix) if job.kind is kind]
    assert abs(len(jobs) / 2000 - rate) < 0.15 * rate
    assert all(1 <= j.tasks <= high for j in jobs)
    assert all((j.duration_s is not None) == has_duration for j in jobs)


def test_batch_duration_median_is_minutes():
    mix = WorkloadMix(batch_rate=5.0, service_rate=0.0, batch_duration_median_s=240.0)
    durations = [job.duration_s for _, job in generate(3, 1000, mix)]
    assert 200 < statistics.median(durations) < 280


def test_one_rate_does_not_change_the_other_stream():
    slow = [j for _, j in generate(4, 500, WorkloadMix(batch_rate=0.5)) if j.kind is JobKind.SERVICE]
    fast = [j for _, j in generate(4, 500, WorkloadMix(batch_rate=3.0)) if j.kind is JobKind.SERVICE]
    assert slow == fast and slow


@pytest.mark.parametrize("kwargs", [{"batch_rate": -1.0}, {"service_shapes": ()}], ids=["negative-rate", "no-shapes"])
def test_bad_mix(kwargs):
    with pytest.raises(ValueError):
        WorkloadMix(**kwargs)
