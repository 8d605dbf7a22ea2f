"""Fragmentation of a node for a target workload (FGD, Weng et al. ATC '23, §4).

For one pod shape ``m`` of the target workload, the part of a node's idle GPU milli that ``m``
cannot use is: all of it when ``m`` cannot run there at all (not enough CPU, a GPU model it does
not allow, fewer than ``m.count`` devices with ``m.milli`` free) or asks for no GPU; otherwise
the free milli of the devices too small for ``m`` (free < ``m.milli``). The node's fragmentation
is the expectation over the workload: ``F(node) = Σ_m p_m · frag_m(node)``. A node's idle GPU
equals ``Σ_m p_m · idle``, so ``F / idle`` is the fragmented fraction of its idle GPU.
"""

from __future__ import annotations

import numpy as np

from schedulers.gpu.workload import TargetWorkload


class FragMeasure:
    """``F`` for arrays of node states against one target workload and one fleet's model codes."""

    def __init__(self, workload: TargetWorkload, models: list[str]) -> None:
        self.workload = workload
        shapes = workload.shapes
        self.weight = np.array(workload.weights, dtype=np.float64)
        self.cpu = np.array([s.cpu for s in shapes], dtype=np.int64)
        self.milli = np.array([s.milli for s in shapes], dtype=np.int64)
        self.count = np.array([s.count for s in shapes], dtype=np.int64)
        # access[k, code]: may shape k use model code; an extra last column for nodes without a model
        access = np.ones((len(shapes), len(models) + 1), dtype=bool)
        for k, s in enumerate(shapes):
            if s.models:
                access[k, :len(models)] = [m in s.models for m in models]
            access[k, -1] = s.count == 0
        self.access = access
        self.gpu_shape = self.count > 0

    def amount(self, cpu_left: np.ndarray, left: np.ndarray, model: np.ndarray) -> np.ndarray:
        """``F`` of each state: ``cpu_left`` (S,), ``left`` (S, D) device free milli, ``model``
        (S,) codes (-1: none)."""
        idle = left.sum(axis=1).astype(np.float64)                       # (S,)
        fits = left[:, None, :] >= self.milli[None, :, None]             # (S, K, D)
        hostable = fits.sum(axis=2) >= self.count[None, :]               # (S, K)
        usable = (hostable & (cpu_left[:, None] >= self.cpu[None, :])
                  & self.access[:, model].T & self.gpu_shape[None, :])   # (S, K)
        small = np.where(fits, 0, left[:, None, :]).sum(axis=2)          # (S, K)
        per_shape = np.where(usable, small, idle[:, None])               # (S, K)
        return per_shape @ self.weight


def node_frag(cpu_left: int, frees: list[int], model: str, workload: TargetWorkload) -> float:
    """``F`` of one node (the same measure as ``FragMeasure.amount``, in plain Python for one
    machine at a time): ``cpu_left`` millicores, ``frees`` the free milli of each device,
    ``model`` its GPU model."""
    idle = sum(frees)
    if not idle:
        return 0.0
    total = 0.0
    for shape, weight in zip(workload.shapes, workload.weights):
        if not shape.count or cpu_left < shape.cpu or (shape.models and model not in shape.models):
            total += weight * idle
            continue
        fit = [f for f in frees if f >= shape.milli]
        total += weight * (idle if len(fit) < shape.count else idle - sum(fit))
    return total
