"""Pod shapes and the target workload FGD measures fragmentation against.

A *shape* is what placement sees of a task: CPU (milli), memory (MiB), ``count`` GPUs of
``milli`` each (a share: count 1, milli < 1000; whole GPUs: milli 1000; none: count 0) and the
allowed GPU models (empty: any). The *target workload* is the popular shapes of a pod list with
their frequencies: shapes counted by (cpu, milli, count, models) — memory is not part of the
fragmentation measure — most frequent first (ties: the larger shape first), taken until they
cover ``coverage`` of the pods, frequencies renormalised to sum to 1.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable

from cellstate.devices import MILLI


@dataclass(frozen=True, slots=True, order=True)
class PodShape:
    cpu: int
    memory: int
    count: int
    milli: int
    models: tuple[str, ...] = ()

    @property
    def gpu(self) -> int:
        """Total GPU milli asked for."""
        return self.count * self.milli

    @property
    def shared(self) -> bool:
        return self.count == 1 and self.milli < MILLI

    @property
    def affinity(self) -> str:
        """GpuClustering's tag: ``share``, ``<n>-gpu`` or ``none``."""
        if self.count == 0:
            return "none"
        return "share" if self.shared else f"{self.count}-gpu"

    def frag_key(self) -> tuple:
        """What the fragmentation measure distinguishes (memory left out)."""
        return (self.cpu, self.milli, self.count, self.models)


@dataclass(frozen=True, slots=True)
class TargetWorkload:
    """Shapes and their frequencies (summing to 1); ``covered``: the fraction of the pod list
    they stand for; ``distinct``: how many distinct shapes the list had."""

    shapes: tuple[PodShape, ...]
    weights: tuple[float, ...]
    covered: float
    distinct: int


def target_workload(shapes: Iterable[PodShape], coverage: float = 0.95) -> TargetWorkload:
    """The popular shapes of a pod list (see the module docstring). ValueError for an empty list
    or a coverage outside (0, 1]."""
    if not 0 < coverage <= 1:
        raise ValueError(f"coverage must be in (0, 1], got {coverage}")
    return target_of_counts(Counter(PodShape(s.cpu, 0, s.count, s.milli, s.models) for s in shapes), coverage)


def target_of_counts(counts: Counter, coverage: float = 0.95) -> TargetWorkload:
    """``target_workload`` of shapes already counted (memory-free shapes -> how many)."""
    if not 0 < coverage <= 1:
        raise ValueError(f"coverage must be in (0, 1], got {coverage}")
    total = sum(counts.values())
    if not total:
        raise ValueError("the target workload needs at least one pod")
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], _larger_first(kv[0])))
    chosen, taken = [], 0
    for shape, n in ranked:
        chosen.append((shape, n))
        taken += n
        if taken >= coverage * total:
            break
    return TargetWorkload(tuple(s for s, _ in chosen), tuple(n / taken for _, n in chosen), taken / total,
                          len(counts))


def _larger_first(shape: PodShape) -> tuple:
    return (-shape.cpu, -shape.milli, -shape.count, tuple(chr(0x10FFFF - ord(c)) for c in "|".join(shape.models)))
