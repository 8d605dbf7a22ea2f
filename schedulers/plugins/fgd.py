"""Scorer: fragmentation gradient descent (FGD, Weng et al. ATC '23) for GPU machines — prefer
the machine whose GPU fragmentation, for a target workload, grows least when it takes the task.

Fragmentation ``F`` of a machine: the idle GPU milli the target workload's typical tasks could
not use there, weighted by their frequency (``schedulers.gpu.frag``). The task is charged as the
plan will bind it (``cellstate.devices.first_fit``: a share on the fullest device it fits, whole
GPUs on the lowest free ones); score = sigmoid((F before - F after) / 1000) in (0, 1): 0.5 when
nothing changes (a machine without GPUs), above for placements that fill holes. CPU-only tasks
are scored too: taking CPU from a GPU machine can strand its GPUs.

``workload`` (required): the target workload, a list of ``{cpu, gpu, models, weight}`` (cpu in
millicores; gpu in milli: below 1000 a share of one GPU, else whole GPUs; models: allowed GPU
models, empty for any; weight > 0), e.g. the popular shapes of an openb pod list
(``tools.gpufrag.experiment.workload_args``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cellstate.devices import MILLI, MODEL_LABEL, bind_in, device_count, devices_in
from cellstate.model import Job, Machine
from cellstate.resources import Resources
from schedulers.gpu.frag import node_frag
from schedulers.gpu.workload import PodShape, TargetWorkload
from schedulers.plugin import PluginConfigError, ScoreContext, build_args

NAME = "fgd"


@dataclass(frozen=True, slots=True)
class FgdArgs:
    workload: tuple = ()

    def __post_init__(self) -> None:
        if isinstance(self.workload, (str, dict)) or not self.workload:
            raise PluginConfigError(f"{NAME}: workload must be a non-empty list of {{cpu, gpu, models, weight}}")
        object.__setattr__(self, "workload", tuple(self.workload))


def _shape(i: int, d) -> tuple[PodShape, float]:
    if not isinstance(d, dict) or set(d) - {"cpu", "gpu", "models", "weight"}:
        raise PluginConfigError(f"{NAME}: workload[{i}] must be a table of cpu, gpu, models, weight; got {d!r}")
    cpu, gpu, weight = d.get("cpu", 0), d.get("gpu", 0), d.get("weight", 1.0)
    models = d.get("models", [])
    if type(cpu) is not int or cpu < 0 or type(gpu) is not int or gpu < 0 or (gpu > MILLI and gpu % MILLI):
        raise PluginConfigError(f"{NAME}: workload[{i}]: cpu (millicores) and gpu (milli: a share < 1000 or "
                                f"whole GPUs) must be integers >= 0, got {d!r}")
    if not isinstance(weight, (int, float)) or weight <= 0 or not isinstance(models, list):
        raise PluginConfigError(f"{NAME}: workload[{i}]: weight must be > 0 and models a list, got {d!r}")
    count, milli = (0, 0) if not gpu else (1, gpu) if gpu < MILLI else (gpu // MILLI, MILLI)
    return PodShape(cpu, 0, count, milli, tuple(sorted(map(str, models)))), float(weight)


def load_workload(args: FgdArgs) -> TargetWorkload:
    """The target workload of ``args`` (frequencies renormalised to sum to 1)."""
    pairs = [_shape(i, d) for i, d in enumerate(args.workload)]
    total = sum(w for _, w in pairs)
    return TargetWorkload(tuple(s for s, _ in pairs), tuple(w / total for _, w in pairs), 1.0, len(pairs))


class Fgd:
    """See the module docstring."""

    name = NAME
    reads = frozenset({"request"})

    def __init__(self, args: FgdArgs, workload: TargetWorkload) -> None:
        self.args, self.workload = args, workload

    def score(self, job: Job, machine: Machine, free: Resources, ctx: ScoreContext) -> float:
        n = device_count(machine.capacity)
        if not n:
            return 0.5
        model = dict(machine.labels).get(MODEL_LABEL, "")
        frees = (devices_in(free) + [0] * n)[:n]
        before = node_frag(free.cpu, frees, model, self.workload)
        request = job.request
        bound = bind_in(request, free) if request.extra else request
        if bound is None:
            return 0.0
        after_free = free - bound
        after = node_frag(after_free.cpu, (devices_in(after_free) + [0] * n)[:n], model, self.workload)
        return 1.0 / (1.0 + math.exp(-(before - after) / 1000.0))


def factory(args: FgdArgs | dict | None = None) -> Fgd:
    built = build_args(FgdArgs, args, NAME)
    return Fgd(built, load_workload(built))
