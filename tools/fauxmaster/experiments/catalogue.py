"""The experiments by name, the two sizes they run at (``DEFAULT``, ``QUICK``: ``--quick``) and
``run_experiment``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from tools.fauxmaster.experiments.decision_time import architectures, tjob_sweep
from tools.fauxmaster.experiments.modes import commit_modes, conflict_modes
from tools.fauxmaster.experiments.runs import Bench, Overrides, Sizing
from tools.fauxmaster.experiments.scaling import batch_scaling
from tools.fauxmaster.experiments.synthetic import SyntheticSpec
from tools.fauxmaster.experiments.verdicts import ExperimentReport
from tools.workload import WorkloadMix

DEFAULT = Sizing(
    spec=SyntheticSpec(machines=200, duration_s=300.0, mix=WorkloadMix(
        batch_rate=1.0, service_rate=0.1, batch_duration_median_s=30.0, batch_tasks_max=200)),
    service_t_job=5.0, tjob_sweep=(0.01, 0.1, 1.0, 10.0), load_factors=(1, 2, 4, 8),
    scaling_batch_t_job=0.5, scaling_duration_s=150.0, scaling_task_median_s=5.0, modes_batch_factor=2.0)
QUICK = Sizing(
    spec=SyntheticSpec(machines=60, duration_s=60.0, service_lifetime_s=60.0, mix=WorkloadMix(
        batch_rate=0.5, service_rate=0.1, batch_tasks_median=8.0, batch_duration_median_s=15.0,
        batch_tasks_max=60)),
    service_t_job=4.0, tjob_sweep=(0.1, 10.0), load_factors=(1, 4),
    scaling_batch_t_job=0.5, scaling_duration_s=40.0, scaling_task_median_s=5.0, modes_batch_factor=2.0)


EXPERIMENTS: dict[str, Callable[[Bench], ExperimentReport]] = {
    "architectures": architectures,
    "tjob-sweep": tjob_sweep,
    "conflict-modes": conflict_modes,
    "commit-modes": commit_modes,
    "batch-scaling": batch_scaling,
}


def run_experiment(name: str, trace: str | None = None, quick: bool = False,
                   workdir: str | None = None, overrides: Overrides = Overrides()) -> ExperimentReport:  # noqa: B008 (frozen)
    """Run experiment ``name`` (ValueError naming the known ones if unknown) with ``overrides``
    applied to its schedulers (batch scheduler kind, queue order)."""
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; choose one of {', '.join(names())}")
    if trace is not None and not Path(trace).is_file():
        raise ValueError(f"trace file {trace!r} does not exist")
    started = time.perf_counter()
    report = EXPERIMENTS[name](Bench(QUICK if quick else DEFAULT, trace, workdir, overrides, _progress_for(name)))
    report.wall_s = time.perf_counter() - started
    return report


def _progress_for(name: str):
    """Per run, ``TextProgress`` lines (its virtual time, with percent and ETA when its end is known,
    every 10 s) on stderr when stdout is not a terminal (a long experiment in a batch job); else None."""
    import sys

    if sys.stdout.isatty():
        return None
    from tools.trace.progress import TextProgress

    return lambda label: TextProgress(f"experiment {name} {label}", "virtual s")


def names() -> list[str]:
    return list(EXPERIMENTS)
