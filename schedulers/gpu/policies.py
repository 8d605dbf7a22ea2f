"""The six GPU placement policies of the FGD paper, written from its definitions, each choosing a
node *and* the device(s) inside it.

Every policy scores the feasible nodes ``idx`` for one pod shape with integers in [0, 100]
(higher is better, as a Kubernetes score plugin) and names the device a share would take there
(-1: the default binding of ``GpuFleet.place``). A placement takes a node of the highest score;
ties are broken uniformly at random (what the Kubernetes framework does), by the caller's seeded
generator. Scores depend only on the node's state and the shape, so they can be cached per shape
until the node changes (``ShapeScoreCache``).

Normalisers: CPU by the largest node's CPU and GPU by the largest node's GPU milli (on openb,
128 cores and 8 GPUs: the artifact's constants).
"""

from __future__ import annotations

import numpy as np

from cellstate.devices import MILLI
from schedulers.gpu.fleet import TAGS, GpuFleet
from schedulers.gpu.frag import FragMeasure
from schedulers.gpu.workload import PodShape

NAMES = ("random", "dotprod", "gpuclustering", "gpupacking", "bestfit", "fgd")


def best_fit_device(left: np.ndarray, shape: PodShape) -> np.ndarray:
    """Per node row: the device a share takes by best fit (the fullest device it fits, lowest
    index on ties); -1 for whole GPUs, no GPU, or no device that fits."""
    if not shape.shared:
        return np.full(len(left), -1, dtype=np.int64)
    keyed = np.where(left >= shape.milli, left, np.iinfo(np.int64).max)
    dev = keyed.argmin(axis=1)
    return np.where(keyed.min(axis=1) == np.iinfo(np.int64).max, -1, dev)


# The per-node formulas, over rows of node state (``cpu_left`` (n,) millicores, ``left`` (n, D)
# free milli per device, absent devices 0): the experiment's policies call them on the fleet's
# rows, the live scorers (``schedulers.plugins.gpu_policies``) on one machine's row.

def dotprod_score(cpu_left: np.ndarray, left: np.ndarray, shape: PodShape, max_cpu: int, max_gpu: int) -> np.ndarray:
    """DotProd's 0-100 score of each row (see ``DotProdPolicy``); ``max_cpu`` millicores and
    ``max_gpu`` milli normalise."""
    cpu = cpu_left / max_cpu * (shape.cpu / max_cpu)
    gpu = left.sum(axis=1) / max_gpu * (shape.gpu / max_gpu)
    return np.floor(100 * (1 - (cpu + gpu) / 2)).astype(np.int64)


def gpupacking_score(left: np.ndarray, gpu_count: np.ndarray, shape: PodShape) -> np.ndarray:
    """GpuPacking's 0-100 score of each row for a pod asking GPUs (see ``GpuPackingPolicy``);
    ``gpu_count`` the rows' device counts."""
    full_free = (left == MILLI).sum(axis=1)
    idle = full_free == gpu_count
    # the devices taken by best fit: ascending free, lowest index first among equals
    order = np.argsort(np.where(left >= shape.milli, left, MILLI + 1), axis=1, kind="stable")
    taken = np.take_along_axis(left, order[:, :shape.count], axis=1)
    free_taken = (taken == MILLI).sum(axis=1)
    tenths = (taken * 100 // MILLI).sum(axis=1)
    partly = np.maximum(100 - tenths // 10, 50)
    some_free = np.maximum(50 - free_taken, 33)
    score = np.where(idle, np.maximum(33 - full_free, full_free), np.where(free_taken > 0, some_free, partly))
    return score.astype(np.int64)


def bestfit_score(cpu_left: np.ndarray, left: np.ndarray, shape: PodShape, max_cpu: int, max_gpu: int) -> np.ndarray:
    """BestFit's 0-100 score of each row (see ``BestFitPolicy``)."""
    cpu = (cpu_left - shape.cpu) / max_cpu
    gpu = (left.sum(axis=1) - shape.gpu) / max_gpu
    return np.floor(100 * (1 - (cpu + gpu) / 2)).astype(np.int64)


class Policy:
    name = ""
    random_device = False
    """A share goes to a device chosen uniformly among those it fits (Random), not by ``devices``."""

    def scores(self, fleet: GpuFleet, idx: np.ndarray, shape: PodShape) -> tuple[np.ndarray, np.ndarray]:
        """(scores, devices) for the feasible nodes ``idx``."""
        raise NotImplementedError


class RandomPolicy(Policy):
    """Random-fit: every feasible node scores the same (the tie-break picks one uniformly)."""

    name = "random"
    random_device = True

    def scores(self, fleet, idx, shape):
        return np.zeros(len(idx), dtype=np.int64), np.full(len(idx), -1, dtype=np.int64)


class DotProdPolicy(Policy):
    """Tetris's dot product, inverted as the artifact uses it: the node's free (CPU, GPU) and the
    pod's request, each normalised by the largest node, averaged over the two dimensions;
    score = 100 · (1 - dot/2): the node whose free vector is least aligned with the request
    (fullest along what the pod asks for). Device: best fit."""

    name = "dotprod"

    def scores(self, fleet, idx, shape):
        left = fleet.left[idx]
        return dotprod_score(fleet.cpu_left[idx], left, shape, fleet.max_cpu, fleet.max_gpu), best_fit_device(left, shape)


class GpuClusteringPolicy(Policy):
    """Pods with the same GPU request together: 25 · (GPU used fraction) plus 75 when the node
    holds only pods of the pod's tag (share, 1-gpu, 2-gpu, …), 50 when it holds that tag among
    others, 25 when it holds no GPU pod, 0 when only other tags. CPU-only pods score 0 (any node).
    Device: best fit."""

    name = "gpuclustering"

    def scores(self, fleet, idx, shape):
        if shape.count == 0:
            return np.zeros(len(idx), dtype=np.int64), np.full(len(idx), -1, dtype=np.int64)
        left = fleet.left[idx].sum(axis=1)
        base = (25 * (fleet.max_gpu - left)) // fleet.max_gpu
        tags = fleet.tags[idx] > 0
        mine = tags[:, TAGS.index(shape.affinity)]
        kinds = tags.sum(axis=1)
        bonus = np.where(kinds == 0, 25, np.where(mine & (kinds == 1), 75, np.where(mine, 50, 0)))
        return (base + bonus).astype(np.int64), best_fit_device(fleet.left[idx], shape)


class GpuPackingPolicy(Policy):
    """Fill partly used GPUs first, then partly used nodes, then idle nodes: a pod whose devices
    (taken by best fit) are all partly used scores 100 - (their free tenths summed)/10 (at least
    50); one that takes fully free devices on a node already in use scores 50 - that count (at
    least 33); on an idle node max(33 - F, F) with F its free devices. CPU-only pods score 0."""

    name = "gpupacking"

    def scores(self, fleet, idx, shape):
        n = len(idx)
        if shape.count == 0:
            return np.zeros(n, dtype=np.int64), np.full(n, -1, dtype=np.int64)
        left = fleet.left[idx]
        return gpupacking_score(left, fleet.gpu_count[idx], shape), best_fit_device(left, shape)


class BestFitPolicy(Policy):
    """The node left fullest: 100 · (1 - mean of the CPU and GPU fractions left after placing).
    Device: best fit."""

    name = "bestfit"

    def scores(self, fleet, idx, shape):
        left = fleet.left[idx]
        return bestfit_score(fleet.cpu_left[idx], left, shape, fleet.max_cpu, fleet.max_gpu), best_fit_device(left, shape)


class FgdPolicy(Policy):
    """Fragmentation gradient descent: the node (and, for a share, the device) where the node's
    fragmentation ``F`` for the target workload grows least: score = 100 · sigmoid(ΔF / 1000)
    with ΔF = F(before) - F(after) in milli; a share tries every device it fits and keeps the best
    (lowest index on ties); whole GPUs take the lowest-indexed free devices."""

    name = "fgd"

    def __init__(self, measure: FragMeasure) -> None:
        self.measure = measure

    def scores(self, fleet, idx, shape):
        m = self.measure
        left, cpu, model = fleet.left[idx], fleet.cpu_left[idx], fleet.model[idx]
        before = m.amount(cpu, left, model)
        n, d = left.shape
        if shape.shared:
            after_left = np.repeat(left[:, None, :], d, axis=1)                     # (n, d, d)
            after_left[:, np.arange(d), np.arange(d)] -= shape.milli
            after = m.amount(np.repeat(cpu - shape.cpu, d), after_left.reshape(n * d, d),
                             np.repeat(model, d)).reshape(n, d)
            score = _sigmoid_score(before[:, None] - after)
            score = np.where(left >= shape.milli, score, -1)
            dev = score.argmax(axis=1)
            return score.max(axis=1), dev
        after_left = left.copy()
        if shape.count:
            free = left >= MILLI
            rank = np.cumsum(free, axis=1)
            after_left[free & (rank <= shape.count)] -= MILLI
        after = m.amount(cpu - shape.cpu, after_left, model)
        return _sigmoid_score(before - after), np.full(n, -1, dtype=np.int64)


def _sigmoid_score(delta: np.ndarray) -> np.ndarray:
    return np.floor(100.0 / (1.0 + np.exp(-delta / 1000.0))).astype(np.int64)


def make_policy(name: str, measure: FragMeasure | None = None) -> Policy:
    """The policy called ``name`` (one of ``NAMES``); FGD needs the fragmentation measure."""
    if name == "fgd":
        if measure is None:
            raise ValueError("fgd needs a target workload")
        return FgdPolicy(measure)
    classes = {c.name: c for c in (RandomPolicy, DotProdPolicy, GpuClusteringPolicy, GpuPackingPolicy,
                                   BestFitPolicy)}
    if name not in classes:
        raise ValueError(f"unknown GPU policy {name!r}; known: {', '.join(NAMES)}")
    return classes[name]()


class ShapeScoreCache:
    """Scores and devices per shape and node, valid until the node's ``version`` changes (score
    caching for GPU tasks: a workload has few shapes)."""

    def __init__(self, fleet: GpuFleet, policy: Policy) -> None:
        self.fleet, self.policy = fleet, policy
        self._entries: dict[PodShape, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self.recomputed = 0

    def lookup(self, shape: PodShape) -> tuple[np.ndarray, np.ndarray]:
        """(scores, devices) over all nodes; infeasible nodes score -1."""
        fleet = self.fleet
        entry = self._entries.get(shape)
        if entry is None:
            entry = (np.full(fleet.size, -1, dtype=np.int64), np.full(fleet.size, -1, dtype=np.int64),
                     np.full(fleet.size, -1, dtype=np.int64))
            self._entries[shape] = entry
        score, dev, seen = entry
        stale = np.flatnonzero(seen != fleet.version)
        if len(stale):
            self.recomputed += len(stale)
            ok = fleet.feasible(stale, shape)
            score[stale] = -1
            dev[stale] = -1
            good = stale[ok]
            if len(good):
                s, d = self.policy.scores(fleet, good, shape)
                score[good] = s
                dev[good] = d
            seen[stale] = fleet.version[stale]
        return score, dev
