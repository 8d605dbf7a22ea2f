"""One run of the gpu-frag experiment: one policy, one seed.

The arrival sequence (the artifact's method, Weng et al. ATC '23 §6.1): the pod list in a seeded
random order, then pods drawn from the list with replacement and appended while the total GPU
demand stays within ``tune`` × the cell's GPU capacity (a list already above it loses random
pods instead). No pod departs. Each pod is placed by the policy or fails (it is not retried).
After each pod the run records, at every whole percent of capacity the arrived GPU demand
reaches, the allocated GPU (% of capacity) and the fragmentation of the idle GPU (% of idle GPU
milli, for the target workload of the pod list).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from schedulers.gpu.fleet import GpuFleet, NodeSpec
from schedulers.gpu.frag import FragMeasure
from schedulers.gpu.policies import ShapeScoreCache, make_policy
from schedulers.gpu.workload import PodShape, TargetWorkload


@dataclass
class RunResult:
    policy: str
    seed: int
    pods: int
    placed: int
    failed: int
    failed_gpu_milli: int
    arrived_pct: list[int] = field(default_factory=list)
    allocated_pct: list[float] = field(default_factory=list)
    frag_pct: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    scored_nodes: int = 0

    def at(self, series: list[float], arrived: int) -> float | None:
        try:
            return series[self.arrived_pct.index(arrived)]
        except ValueError:
            return None


def arrival_sequence(shapes: list[PodShape], capacity_milli: int, tune: float, seed: int) -> list[int]:
    """Indices into ``shapes``: the arrival order of one run (see the module docstring)."""
    rng = np.random.default_rng(seed)
    order = list(rng.permutation(len(shapes)))
    target = tune * capacity_milli
    demand = sum(shapes[i].gpu for i in order)
    while demand > target and order:
        demand -= shapes[order.pop(int(rng.integers(len(order))))].gpu
    while True:
        pick = int(rng.integers(len(shapes)))
        if demand + shapes[pick].gpu > target:
            break
        order.append(pick)
        demand += shapes[pick].gpu
    return order


TIE_BREAKS = ("shuffled", "name", "random")


def tie_rank(names: list[str], seed: int, tie_break: str) -> np.ndarray:
    """Per node, its place in the order that breaks ties (lowest first): for ``shuffled`` a
    permutation drawn from ``seed`` over the nodes sorted by name, for ``name`` (and ``random``,
    which does not use it) the name order."""
    by_name = np.argsort(np.array(names), kind="stable")
    rank = np.empty(len(names), dtype=np.int64)
    if tie_break == "shuffled":
        rank[by_name] = np.random.default_rng([seed, 2]).permutation(len(names))
    else:
        rank[by_name] = np.arange(len(names))
    return rank


def run_one(nodes: list[NodeSpec], shapes: list[PodShape], workload: TargetWorkload, policy_name: str,
            seed: int, tune: float, max_pct: int | None = None, tie_break: str = "shuffled") -> RunResult:
    """Place the arrival sequence of ``seed`` with one policy; see the module docstring.

    ``tie_break`` chooses among the nodes of the highest score: ``shuffled``, the node first in
    a random order of all nodes drawn once per run from ``seed`` (the artifact's simulator: it
    renames every node with a prefix from a seeded random permutation, then takes the tied node
    whose name sorts first); ``name``, the node whose given name sorts first; or ``random``,
    uniformly at each placement (the upstream Kubernetes scheduler). The Random policy always
    picks uniformly among all feasible nodes."""
    if tie_break not in TIE_BREAKS:
        raise ValueError(f"tie_break must be one of {', '.join(TIE_BREAKS)}, got {tie_break!r}")
    started = time.perf_counter()
    fleet = GpuFleet(nodes)
    measure = FragMeasure(workload, fleet.models)
    policy = make_policy(policy_name, measure)
    cache = ShapeScoreCache(fleet, policy)
    capacity = fleet.gpu_capacity
    sequence = arrival_sequence(shapes, capacity, tune, seed)
    rng = np.random.default_rng([seed, 1])  # tie-breaks and random devices
    uniform = tie_break == "random" or policy.random_device
    rank = tie_rank(fleet.names, seed, tie_break)
    frag = measure.amount(fleet.cpu_left, fleet.left, fleet.model)
    result = RunResult(policy_name, seed, len(sequence), 0, 0, 0)
    top = int(tune * 100) if max_pct is None else max_pct
    arrived = allocated = 0
    next_pct = 0
    for index in sequence:
        shape = shapes[index]
        arrived += shape.gpu
        score, dev = cache.lookup(shape)
        best = score.max()
        if best < 0:
            result.failed += 1
            result.failed_gpu_milli += shape.gpu
        else:
            ties = np.flatnonzero(score == best)
            if len(ties) == 1:
                node = int(ties[0])
            elif uniform:
                node = int(ties[rng.integers(len(ties))])
            else:
                node = int(ties[rank[ties].argmin()])
            device = int(dev[node])
            if policy.random_device and shape.shared:
                fit = np.flatnonzero(fleet.left[node] >= shape.milli)
                device = int(fit[rng.integers(len(fit))])
            fleet.place(node, shape, device)
            allocated += shape.gpu
            result.placed += 1
            one = np.array([node])
            frag[node] = measure.amount(fleet.cpu_left[one], fleet.left[one], fleet.model[one])[0]
        while next_pct <= top and arrived * 100 >= next_pct * capacity:
            idle = capacity - allocated
            result.arrived_pct.append(next_pct)
            result.allocated_pct.append(100.0 * allocated / capacity)
            result.frag_pct.append(100.0 * float(frag.sum()) / idle if idle else 0.0)
            next_pct += 1
    result.scored_nodes = cache.recomputed
    result.wall_s = time.perf_counter() - started
    return result
