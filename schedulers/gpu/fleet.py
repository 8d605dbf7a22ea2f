"""The GPU machines of a cell as numpy arrays, for policies that score every node at once.

Per node: CPU and memory left, the free milli of each device (a row of ``D`` columns, ``D`` the
most devices any node has; a node's absent devices hold 0 and so never fit), the GPU model (as a
code into ``models``), the GpuClustering tags of the GPU pods it holds, and a ``version`` that
grows at every change (what score caches compare). Built from plain node tuples or from cell
``Machine``s (``from_machines``: ledgers with ``gpu.<i>`` device resources, model label
``gpu_model``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from cellstate.devices import MILLI, MODEL_LABEL, device_count, device_free
from schedulers.gpu.workload import PodShape

TAGS = ("share", "1-gpu", "2-gpu", "3-gpu", "4-gpu", "5-gpu", "6-gpu", "7-gpu", "8-gpu")


@dataclass(frozen=True, slots=True)
class NodeSpec:
    name: str
    cpu: int
    memory: int
    gpus: int
    model: str


class GpuFleet:
    """Mutable node arrays (see the module docstring)."""

    def __init__(self, nodes: Sequence[NodeSpec], devices: int | None = None) -> None:
        if not nodes:
            raise ValueError("a fleet needs at least one node")
        self.names = [n.name for n in nodes]
        self.size = len(nodes)
        self.devices = max(1, max(n.gpus for n in nodes) if devices is None else devices)
        self.models = sorted({n.model for n in nodes if n.model})
        code = {m: i for i, m in enumerate(self.models)}
        self.cpu_cap = np.array([n.cpu for n in nodes], dtype=np.int64)
        self.mem_cap = np.array([n.memory for n in nodes], dtype=np.int64)
        self.gpu_count = np.array([n.gpus for n in nodes], dtype=np.int64)
        self.model = np.array([code.get(n.model, -1) for n in nodes], dtype=np.int64)
        self.cpu_left = self.cpu_cap.copy()
        self.mem_left = self.mem_cap.copy()
        self.left = np.zeros((self.size, self.devices), dtype=np.int64)
        for i, n in enumerate(nodes):
            self.left[i, :n.gpus] = MILLI
        self.tags = np.zeros((self.size, len(TAGS)), dtype=np.int64)
        self.version = np.zeros(self.size, dtype=np.int64)
        self.max_cpu = int(self.cpu_cap.max())
        self.max_gpu = int(self.gpu_count.max()) * MILLI or MILLI

    @property
    def gpu_capacity(self) -> int:
        return int(self.gpu_count.sum()) * MILLI

    @property
    def gpu_allocated(self) -> int:
        return self.gpu_capacity - int(self.left.sum())

    def allowed(self, models: tuple[str, ...]) -> np.ndarray:
        """Per model code: may a pod allowing ``models`` (empty: any) use it."""
        if not models:
            return np.ones(max(1, len(self.models)), dtype=bool)
        return np.array([m in models for m in self.models] or [False], dtype=bool)

    def feasible(self, idx: np.ndarray, shape: PodShape) -> np.ndarray:
        """Which nodes ``idx`` can take one pod of ``shape`` (CPU, memory, model, devices)."""
        ok = (self.cpu_left[idx] >= shape.cpu) & (self.mem_left[idx] >= shape.memory)
        if shape.count:
            codes = self.model[idx]
            ok &= (codes >= 0) & self.allowed(shape.models)[np.maximum(codes, 0)]
            ok &= (self.left[idx] >= shape.milli).sum(axis=1) >= shape.count
        return ok

    def place(self, node: int, shape: PodShape, device: int = -1) -> tuple[int, ...]:
        """Charge one pod of ``shape`` to ``node``: a share on ``device`` (-1: the default binding,
        the fullest device it fits), whole GPUs on the lowest-indexed free devices. Returns the
        devices used. ValueError when the node cannot hold it."""
        if self.cpu_left[node] < shape.cpu or self.mem_left[node] < shape.memory:
            raise ValueError(f"node {self.names[node]} lacks CPU or memory for {shape}")
        row = self.left[node]
        if shape.count == 0:
            used: tuple[int, ...] = ()
        elif shape.shared:
            if device < 0:
                fit = [i for i in range(self.devices) if row[i] >= shape.milli]
                device = min(fit, key=lambda i: (row[i], i)) if fit else -1
            if device < 0 or row[device] < shape.milli:
                raise ValueError(f"node {self.names[node]}: no device with {shape.milli} milli free")
            used = (device,)
        else:
            free = [i for i in range(self.devices) if row[i] >= MILLI]
            if len(free) < shape.count:
                raise ValueError(f"node {self.names[node]}: {len(free)} free device(s), {shape.count} asked")
            used = tuple(free[:shape.count])
        self.cpu_left[node] -= shape.cpu
        self.mem_left[node] -= shape.memory
        for i in used:
            row[i] -= shape.milli
        if shape.count:
            self.tags[node, TAGS.index(shape.affinity)] += 1
        self.version[node] += 1
        return used

    def release(self, node: int, shape: PodShape, used: Iterable[int]) -> None:
        """Undo ``place``."""
        self.cpu_left[node] += shape.cpu
        self.mem_left[node] += shape.memory
        for i in used:
            self.left[node, i] += shape.milli
        if shape.count:
            self.tags[node, TAGS.index(shape.affinity)] -= 1
        self.version[node] += 1


def from_machines(machines: Sequence) -> GpuFleet:
    """A fleet of cell machines (their current ledgers): devices from ``gpu.<i>`` resources,
    the model from the ``gpu_model`` label."""
    specs = []
    for m in machines:
        model = dict(m.labels).get(MODEL_LABEL, "")
        specs.append(NodeSpec(m.id, m.capacity.cpu, m.capacity.memory, device_count(m.capacity), model))
    fleet = GpuFleet(specs)
    for i, m in enumerate(machines):
        free = m.free
        fleet.cpu_left[i], fleet.mem_left[i] = free.cpu, free.memory
        row = device_free(m.capacity, m.allocated)
        fleet.left[i, :len(row)] = row
    return fleet
