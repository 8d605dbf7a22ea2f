"""Scorers: the FGD paper's baseline GPU policies (Weng et al. ATC '23) as live chain plugins,
each choosing the device inside the machine as the paper's policy does.

The formulas are the experiment's (``schedulers.gpu.policies``: ``dotprod_score``,
``gpupacking_score``, ``bestfit_score``), called on the machine's one row of state (its free
CPU and the free milli of each ``gpu.<i>`` device); a scorer returns that 0-100 integer / 100.

- ``gpu_dotprod``: DotProd, the node whose free (CPU, GPU) is least aligned with the request.
- ``gpu_packing``: GpuPacking, partly used GPUs first, then partly used machines, then idle
  ones; a CPU-only task scores 0 everywhere (as in the experiment: any machine).
- ``gpu_best_fit``: the paper's BestFit, the machine left fullest in CPU and GPU (not the
  registry's ``best_fit``, which averages CPU and memory fractions of the machine's own size).
- ``gpu_random``: Random, every machine the same score (0.5): the scheduler's own randomization
  picks among the feasible machines it examined (see docs/GPU.md for how close that is to the
  paper's uniform pick); a share goes to a uniformly random device it fits.

Device choice (``bind``, consulted by ``Pipeline.bind``): DotProd, GpuPacking and BestFit bind
by best fit (``cellstate.devices.best_fit``: a share on the fullest device it fits, whole GPUs on
the lowest-indexed free devices); Random a share on a random fitting device, whole GPUs as best
fit. GpuClustering is not here: it needs the GPU tasks' kinds per machine, which a scorer cannot
read from (machine, free) (docs/GPU.md).

Normalisers (``max_cpu`` millicores, ``max_gpus`` devices; default 128 cores and 8 GPUs, the
artifact's constants and openb's largest node): the experiment uses its fleet's largest node; a
live scorer sees one machine, so the cell's largest is given. A machine larger than them could
fall outside [0, 100]; its score is clipped to [0, 1].
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

import numpy as np

from cellstate.devices import MILLI, GpuAsk, best_fit, bind_in, device_count, devices_in, fitting_devices
from cellstate.model import Job, Machine
from cellstate.resources import Resources
from schedulers.gpu.policies import bestfit_score, dotprod_score, gpupacking_score
from schedulers.plugin import ScoreContext, build_args
from schedulers.plugins.fgd import shape_of

DOTPROD, PACKING, BEST_FIT, RANDOM = "gpu_dotprod", "gpu_packing", "gpu_best_fit", "gpu_random"
MAX_CPU, MAX_GPUS = 128_000, 8


@dataclass(frozen=True, slots=True)
class GpuScaleArgs:
    """``max_cpu`` (millicores) and ``max_gpus`` (devices): the largest machine, the normalisers
    of DotProd and BestFit."""

    max_cpu: int = MAX_CPU
    max_gpus: int = MAX_GPUS

    def __post_init__(self) -> None:
        for field, value in (("max_cpu", self.max_cpu), ("max_gpus", self.max_gpus)):
            if type(value) is not int or value <= 0:
                raise ValueError(f"{field} must be an integer > 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class GpuPackingArgs:
    """GpuPacking takes no arguments."""


@dataclass(frozen=True, slots=True)
class GpuRandomArgs:
    """``seed``: of the random device choice (None: unseeded)."""

    seed: int | None = None

    def __post_init__(self) -> None:
        if self.seed is not None and type(self.seed) is not int:
            raise ValueError(f"seed must be an integer, got {self.seed!r}")


def machine_row(machine: Machine, free: Resources) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The machine's one row of the experiment's node state: (free CPU (1,), free milli of each
    device (1, n), device count (1,))."""
    n = device_count(machine.capacity)
    return (np.array([free.cpu], dtype=np.int64), np.array([devices_in(free, n)], dtype=np.int64).reshape(1, n),
            np.array([n], dtype=np.int64))


def _unit(score: np.ndarray) -> float:
    return min(max(int(score[0]), 0), 100) / 100


class _BestFitDevices:
    """Binds a task's GPUs by best fit (the paper's baselines' device choice)."""

    def bind(self, job: Job, machine: Machine, free: Resources) -> Resources | None:
        """``job``'s request bound by best fit on ``machine`` with ``free`` (None: no room)."""
        return bind_in(job.request, free)


class GpuScaled(_BestFitDevices):
    """DotProd or BestFit (``formula``: ``dotprod_score`` or ``bestfit_score``) under ``name``,
    normalised by the args' largest machine. See the module docstring."""

    reads = frozenset({"request"})

    def __init__(self, name: str, formula: Callable[..., np.ndarray], args: GpuScaleArgs) -> None:
        self.name, self.formula, self.args = name, formula, args

    def score(self, job: Job, machine: Machine, free: Resources, ctx: ScoreContext) -> float:
        cpu, left, _ = machine_row(machine, free)
        return _unit(self.formula(cpu, left, shape_of(job), self.args.max_cpu, self.args.max_gpus * MILLI))


class GpuPacking(_BestFitDevices):
    """See the module docstring."""

    name = PACKING
    reads = frozenset({"request"})

    def __init__(self, args: GpuPackingArgs) -> None:
        self.args = args

    def score(self, job: Job, machine: Machine, free: Resources, ctx: ScoreContext) -> float:
        shape = shape_of(job)
        if shape.count == 0:
            return 0.0
        _, left, count = machine_row(machine, free)
        return _unit(gpupacking_score(left, count, shape))


class GpuRandom:
    """See the module docstring."""

    name = RANDOM
    reads = frozenset()

    def __init__(self, args: GpuRandomArgs) -> None:
        self.args = args
        self._rng = random.Random(args.seed)

    def score(self, job: Job, machine: Machine, free: Resources, ctx: ScoreContext) -> float:
        return 0.5

    def bind(self, job: Job, machine: Machine, free: Resources) -> Resources | None:
        """``job``'s request with a share on a uniformly random device it fits, whole GPUs as best
        fit (None: no room)."""
        return bind_in(job.request, free, self.choose)

    def choose(self, frees: list[int], ask: GpuAsk) -> tuple[int, ...] | None:
        """Random's devices for ``ask`` on devices with ``frees`` free."""
        if not ask.shared:
            return best_fit(frees, ask)
        fit = fitting_devices(frees, ask)
        return (self._rng.choice(fit),) if fit else None


def dotprod_factory(args: GpuScaleArgs | dict | None = None) -> GpuScaled:
    return GpuScaled(DOTPROD, dotprod_score, build_args(GpuScaleArgs, args, DOTPROD))


def best_fit_factory(args: GpuScaleArgs | dict | None = None) -> GpuScaled:
    return GpuScaled(BEST_FIT, bestfit_score, build_args(GpuScaleArgs, args, BEST_FIT))


def packing_factory(args: GpuPackingArgs | dict | None = None) -> GpuPacking:
    return GpuPacking(build_args(GpuPackingArgs, args, PACKING))


def random_factory(args: GpuRandomArgs | dict | None = None) -> GpuRandom:
    return GpuRandom(build_args(GpuRandomArgs, args, RANDOM))


FACTORIES = {DOTPROD: dotprod_factory, PACKING: packing_factory, BEST_FIT: best_fit_factory, RANDOM: random_factory}
