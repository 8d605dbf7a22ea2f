"""The load index's bucket order for a request, computed over all buckets at once (numpy).

Per bucket key ``(capacity cpu, capacity memory, level cpu, level memory)`` the table keeps
the free amounts its machines can have (``free_range``: integers, inclusive) and the span
the estimate uses (``span``). For a request, ``plan`` gives the buckets that may fit, best
estimated borg_hybrid score first (ties in key order) or, with bounds, highest upper bound
of the score first (then best estimate: the proof comes soonest), the buckets that cannot (every
machine there has less free cpu, or memory, than asked), which resource those lack first
(resources_fit checks cpu, then memory), and optionally, per walked bucket, the highest
upper bound of the score over it and the buckets after it (``borg_bound``).
"""

from __future__ import annotations

import numpy as np

from schedulers.borg.bound import hybrid_upper
from schedulers.plugins.borg_hybrid import BorgHybridArgs

Key = tuple[int, int, int, int]
SUBSTEPS = 64  # levels 0..63: the lowest step by bit length of free; q >= 1: q * 64


def free_range(level: int, capacity: int, steps: int) -> tuple[int, int]:
    """(lowest, highest) free amount a machine filed at ``level`` can have (inclusive; a
    negative free is filed as 0)."""
    q, bits = divmod(level, SUBSTEPS)
    if capacity <= 0:
        return 0, 0
    if q > 0:  # q * capacity <= free * steps < (q + 1) * capacity, free <= capacity
        return -(-q * capacity // steps), min(-(-(q + 1) * capacity // steps) - 1, capacity)
    if bits == 0:
        return 0, 0
    return 1 << (bits - 1), min((1 << bits) - 1, -(-capacity // steps) - 1)


def span(level: int, capacity: int, steps: int) -> tuple[float, float]:
    """[low, high): the free amounts of a level as the estimate takes them."""
    q, bits = divmod(level, SUBSTEPS)
    if q > 0:
        return q * capacity / steps, min((q + 1) * capacity / steps, capacity + 1)
    return (1 << bits) / 2 if bits else 0.0, min(1 << bits, capacity / steps) if bits else 1.0


class KeyTable:
    """The bucket keys in sorted order with their ranges as arrays (see the module doc)."""

    def __init__(self, steps: int, hybrid: BorgHybridArgs, checked: tuple[bool, bool], bounds: bool) -> None:
        self.steps, self.hybrid, self.checked, self.bounds = steps, hybrid, checked, bounds
        self.keys: list[Key] = []
        self._ints = np.zeros((0, 6), dtype=np.int64)  # cap cpu, cap memory, lo/hi free cpu, lo/hi free memory
        self._spans = np.zeros((0, 4))  # low/high span cpu, low/high span memory

    def insert(self, at: int, key: Key) -> None:
        """Add ``key`` at position ``at`` of the sorted keys."""
        cap_cpu, cap_memory, level_cpu, level_memory = key
        steps = self.steps
        ints = (cap_cpu, cap_memory, *free_range(level_cpu, cap_cpu, steps),
                *free_range(level_memory, cap_memory, steps))
        self.keys.insert(at, key)
        self._ints = np.insert(self._ints, at, ints, axis=0)
        self._spans = np.insert(self._spans, at, (*span(level_cpu, cap_cpu, steps),
                                                  *span(level_memory, cap_memory, steps)), axis=0)

    def plan(self, cpu: int, memory: int) -> tuple[list[Key], list[Key], dict[Key, str], list[float] | None]:
        """(walked keys best estimate first, skipped keys, skipped key -> the resource all
        its machines lack first, per walked key the highest bound from it on or None)."""
        ints, keys = self._ints, self.keys
        cap_c, cap_m, lo_c, hi_c, lo_m, hi_m = ints.T
        check_cpu, check_memory = self.checked
        none_c = (hi_c < cpu) if check_cpu else np.zeros(len(keys), dtype=bool)
        none_m = (hi_m < memory) if check_memory else np.zeros(len(keys), dtype=bool)
        skipped = none_c | none_m
        short_m = ~none_c & none_m & ((lo_c >= cpu) if check_cpu else True)
        short = {keys[i]: "cpu" for i in np.flatnonzero(none_c)}
        short.update((keys[i], "memory") for i in np.flatnonzero(short_m))
        walked = np.flatnonzero(~skipped)
        estimate = self._estimate(walked, cpu, memory)
        if not self.bounds:
            order = walked[np.argsort(-estimate, kind="stable")]
            return [keys[i] for i in order], [keys[i] for i in np.flatnonzero(skipped)], short, None
        rows = ints[walked]
        upper = hybrid_upper(rows[:, [0, 2, 3]].T, rows[:, [1, 4, 5]].T, (cpu, memory), self.hybrid)
        position = np.lexsort((-estimate, -upper))  # highest bound first, then best estimate
        order, upper = walked[position], upper[position]
        suffix = np.maximum.accumulate(upper[::-1])[::-1].tolist()  # = upper (kept general)
        return [keys[i] for i in order], [keys[i] for i in np.flatnonzero(skipped)], short, suffix

    def _estimate(self, rows: np.ndarray, cpu: int, memory: int) -> np.ndarray:
        """borg_hybrid's score of the request on a machine of each bucket's capacity and
        middle free amounts (borg_hybrid's operations, in its order)."""
        args = self.hybrid
        cap = self._ints[rows, :2].astype(float)
        spans = self._spans[rows]
        lefts = []
        for j, asked in ((0, cpu), (1, memory)):
            low, high = spans[:, 2 * j], spans[:, 2 * j + 1]
            left = np.maximum((np.maximum(low, asked) + high) / 2 - asked, 0.0)
            lefts.append(left / np.where(cap[:, j] > 0, cap[:, j], 1))
        a, b = lefts
        has_a, has_b = cap[:, 0] > 0, cap[:, 1] > 0
        low, high = np.minimum(a, b), np.maximum(a, b)
        stranded = np.where(low <= args.exhausted, high, args.imbalance * (high - low))
        both = 1.0 - (args.stranding * stranded + (1.0 - args.stranding) * (a + b) / 2)
        one = 1.0 - (1.0 - args.stranding) * np.where(has_a, a, b) / 1
        return np.where(has_a & has_b, both, np.where(has_a | has_b, one, 0.0))
