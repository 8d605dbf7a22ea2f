"""Scorer: fragmentation gradient descent (FGD, Weng et al. ATC '23) for GPU machines — prefer
the machine whose GPU fragmentation, for a target workload, grows least when it takes the task.

Fragmentation ``F`` of a machine: the idle GPU milli the target workload's typical tasks could
not use there, weighted by their frequency (``schedulers.gpu.frag``). The task is charged on
the devices FGD chooses (``choose``): a share tries each device it fits (one per distinct free
amount) and takes the one whose ``F`` after is lowest, best fit among equals; whole GPUs take the
lowest-indexed free devices (all free devices are alike). Score = sigmoid((F before - F after) /
1000) in (0, 1): 0.5 when nothing changes (a machine without GPUs), above for placements that
fill holes. CPU-only tasks are scored too: taking CPU from a GPU machine can strand its GPUs.

The device choice reaches the placement through the chain's binding hook (``bind``, consulted
by ``Pipeline.bind`` when the scheduler claims the machine): the claim names the devices FGD
chose, and the plan keeps them while they have room (``cellstate.devices.bind_in``).
``devices = "best_fit"``: the scorer charges the task by best fit and leaves the binding to the
plan (the behaviour before the device choice, kept for comparison).

``workload``: the target workload, a list of ``{cpu, gpu, models, weight}`` (cpu in millicores;
gpu in milli: below 1000 a share of one GPU, else whole GPUs; models: allowed GPU models, empty
for any; weight > 0), e.g. the popular shapes of an openb pod list
(``tools.gpufrag.experiment.workload_args``). Empty (the default): learned from the jobs the
scorer sees, each job's shape counted once per task, the most frequent covering 95 % of the
tasks (then the scorer cannot sign: its scores depend on the jobs seen before, so score caches
and equivalence classes are off with it).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from cellstate.devices import MILLI, MODEL_LABEL, GpuAsk, ask_of, bind_in, device_count, devices_in, best_fit
from cellstate.model import ConstraintOp, Job, Machine
from cellstate.resources import Resources
from schedulers.gpu.frag import node_frag
from schedulers.gpu.workload import PodShape, TargetWorkload, target_of_counts
from schedulers.plugin import PluginConfigError, ScoreContext, build_args

NAME = "fgd"


DEVICE_CHOICES = ("fgd", "best_fit")


@dataclass(frozen=True, slots=True)
class FgdArgs:
    workload: tuple = ()
    devices: str = "fgd"
    """The device a share takes inside the machine: ``fgd`` (the scorer's choice, bound in the
    claim) or ``best_fit`` (the plan's default binding, charged so by the score)."""

    def __post_init__(self) -> None:
        if isinstance(self.workload, (str, dict)) or not isinstance(self.workload, (list, tuple)):
            raise PluginConfigError(f"{NAME}: workload must be a list of {{cpu, gpu, models, weight}}")
        if self.devices not in DEVICE_CHOICES:
            raise PluginConfigError(f"{NAME}: devices must be one of {', '.join(DEVICE_CHOICES)}, got {self.devices!r}")
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
    ask = ask_of(gpu)
    return PodShape(cpu, 0, ask.count if ask else 0, ask.milli if ask else 0, tuple(sorted(map(str, models)))), float(weight)


def load_workload(args: FgdArgs) -> TargetWorkload | None:
    """The target workload of ``args`` (frequencies renormalised to sum to 1); None: learned."""
    if not args.workload:
        return None
    pairs = [_shape(i, d) for i, d in enumerate(args.workload)]
    total = sum(w for _, w in pairs)
    return TargetWorkload(tuple(s for s, _ in pairs), tuple(w / total for _, w in pairs), 1.0, len(pairs))


TIE_WEIGHT = 1e-3  # the share of the score that breaks ties towards packed machines
MAX_LEARNED_JOBS = 100_000  # a learned workload stops counting new jobs after this many


class Fgd:
    """See the module docstring."""

    name = NAME

    def __init__(self, args: FgdArgs, workload: TargetWorkload | None) -> None:
        self.args, self._given = args, workload
        self.reads = frozenset({"request"}) if workload is not None else None
        self._counted: set[str] = set()
        self._counts: Counter = Counter()
        self._learned: TargetWorkload | None = None

    def workload_for(self, job: Job) -> TargetWorkload | None:
        """The target workload: the given one, or the one learned so far (``job`` counted)."""
        if self._given is not None:
            return self._given
        if job.id not in self._counted and len(self._counted) < MAX_LEARNED_JOBS:
            self._counted.add(job.id)
            self._counts[shape_of(job)] += job.tasks
            self._learned = None
        if self._learned is None and self._counts:
            self._learned = target_of_counts(self._counts)
        return self._learned

    def score(self, job: Job, machine: Machine, free: Resources, ctx: ScoreContext) -> float:
        workload = self.workload_for(job)
        n = device_count(machine.capacity)
        if not n or workload is None:
            return 0.5
        model = dict(machine.labels).get(MODEL_LABEL, "")
        before = node_frag(free.cpu, devices_in(free, n), model, workload)
        choice = self._choice(job, model, free, n, workload)
        if choice is None:
            return 0.0
        after = choice[1]
        # ties (equal growth, e.g. identical idle machines) go to the machine whose GPUs are the
        # most allocated: the packing the artifact's fixed tie-break order (one node order per run)
        # gives it
        packed = 1.0 - free.get("gpu") / machine.capacity.get("gpu") if machine.capacity.get("gpu") > 0 else 0.0
        return (1.0 - TIE_WEIGHT) / (1.0 + math.exp(-(before - after) / 1000.0)) + TIE_WEIGHT * packed

    def bind(self, job: Job, machine: Machine, free: Resources) -> Resources | None:
        """``job``'s request bound to the devices FGD chooses on ``machine`` with ``free`` (the
        request itself when it asks for no GPU or the machine has no devices; None when no
        devices can hold it): the chain's device choice (``Pipeline.bind``)."""
        n = device_count(machine.capacity)
        workload = self.workload_for(job)
        if self.args.devices == "best_fit" or not job.request.extra:
            return job.request  # the plan binds it (best fit)
        if not n or workload is None:
            return bind_in(job.request, free)
        model = dict(machine.labels).get(MODEL_LABEL, "")
        choice = self._choice(job, model, free, n, workload)
        if choice is None:
            return None
        return bind_in(job.request, free, lambda frees, ask: choice[0])

    def _choice(self, job: Job, model: str, free: Resources, n: int,
                workload: TargetWorkload) -> tuple[tuple[int, ...] | None, float] | None:
        """(devices, F after) of FGD's placement of one task of ``job`` on a machine with
        ``free`` (devices None: the task asks for no GPU); None when it does not fit."""
        frees = devices_in(free, n)
        cpu_left = free.cpu - job.request.cpu
        ask = ask_of(job.request.get("gpu"))
        if ask is None:
            return None, node_frag(cpu_left, frees, model, workload)
        devices = (choose(frees, ask, cpu_left, model, workload) if self.args.devices == "fgd"
                   else best_fit(frees, ask))
        if devices is None:
            return None
        after = list(frees)
        for i in devices:
            after[i] -= ask.milli
        return devices, node_frag(cpu_left, after, model, workload)


def choose(frees: list[int], ask: GpuAsk, cpu_left: int, model: str,
           workload: TargetWorkload) -> tuple[int, ...] | None:
    """FGD's devices for ``ask`` on a machine whose devices have ``frees`` free and which keeps
    ``cpu_left`` millicores after the task: a share on the device whose ``F`` after is lowest
    (best fit, then lowest index, among equals; each distinct free amount tried once); whole
    GPUs as ``best_fit``. None when the devices cannot hold it."""
    if not ask.shared:
        return best_fit(frees, ask)
    best, best_key = None, None
    tried: set[int] = set()
    for i, f in enumerate(frees):
        if f < ask.milli or f in tried:
            continue
        tried.add(f)
        after = list(frees)
        after[i] -= ask.milli
        key = (node_frag(cpu_left, after, model, workload), f, i)
        if best_key is None or key < best_key:
            best, best_key = (i,), key
    return best


def shape_of(job: Job) -> PodShape:
    """A job's task as a (memory-free) shape of the fragmentation measure."""
    ask = ask_of(job.request.get("gpu"))
    models = next((tuple(sorted(c.values)) for c in job.constraints
                   if c.attribute == MODEL_LABEL and c.op is ConstraintOp.IN), ())
    return PodShape(job.request.cpu, 0, ask.count if ask else 0, ask.milli if ask else 0, models)


def factory(args: FgdArgs | dict | None = None) -> Fgd:
    built = build_args(FgdArgs, args, NAME)
    return Fgd(built, load_workload(built))
