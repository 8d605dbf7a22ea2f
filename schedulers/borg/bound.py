"""Upper bounds for the Borg scheduler's packed walk: when is the best machine found so far
provably as good as any machine left unwalked?

The load index files a machine by capacity and a range of free cpu and memory (a bucket).
Over a bucket, ``hybrid_upper`` bounds borg_hybrid's score of a request from above: the
score is ``1 - g(a, b)`` with ``a, b`` the cpu and memory fractions left after placing, and
the least ``g`` over the bucket's box of ``(a, b)`` is found exactly (``g`` is increasing
where a resource is exhausted, and bounded below by its convex piecewise-linear form
elsewhere, whose least value lies on a corner or on the diagonal ``a = b``).

A ``Prover`` lifts that to the chain's rank (one weighted mean per stage): a stage's bound
is its borg_hybrid weight times the bucket's bound plus its other weights times 1 (every
scorer scores within [0, 1]). The walk may stop once the best rank found reaches, stage by
stage, the bound of every unwalked bucket (within ``EPS``, for float rounding): then no
unwalked machine ranks higher, and the pick has the full scan's best rank.
"""

from __future__ import annotations

import numpy as np

from schedulers.plugin import scorer_traits
from schedulers.plugins.borg_hybrid import BorgHybridArgs

EPS = 1e-9  # rank tolerance of the proof (float rounding of the bound vs the scorer)


def hybrid_upper(cpu, memory, asked: tuple[int, int], args: BorgHybridArgs) -> np.ndarray:
    """Per bucket, the highest borg_hybrid score (``args``) of a request ``asked`` = (cpu,
    memory) on any machine of capacity and free amounts ``cpu`` = (capacities, lowest
    free, highest free), ``memory`` likewise (arrays, one entry per bucket; free amounts
    inclusive); 1.0 (no bound) for a bucket without cpu or memory."""
    cap_a, cap_b = np.asarray(cpu[0]), np.asarray(memory[0])
    has = (cap_a > 0) & (cap_b > 0)
    cap_a, cap_b = np.where(has, cap_a, 1), np.where(has, cap_b, 1)
    a_lo, a_hi = (np.clip((np.asarray(f) - asked[0]) / cap_a, 0.0, 1.0) for f in cpu[1:])
    b_lo, b_hi = (np.clip((np.asarray(f) - asked[1]) / cap_b, 0.0, 1.0) for f in memory[1:])
    s, e, imbalance = args.stranding, args.exhausted, args.imbalance
    # exhausted (min <= e): g = s * max + (1 - s) * mean, increasing in a and b: least at the low corner
    least = np.where(np.minimum(a_lo, b_lo) <= e, s * np.maximum(a_lo, b_lo) + (1.0 - s) * (a_lo + b_lo) / 2, 2.0)
    # nothing exhausted: g >= s * imbalance * |a - b| + (1 - s) * mean, convex: least at a corner or on a = b
    a1, b1 = np.maximum(a_lo, e), np.maximum(b_lo, e)

    def g(a, b):
        return s * imbalance * np.abs(a - b) + (1.0 - s) * (a + b) / 2

    t = np.maximum(a1, b1)
    diagonal = np.where(t <= np.minimum(a_hi, b_hi), g(t, t), 2.0)
    corners = np.minimum(np.minimum(g(a1, b1), g(a1, b_hi)), np.minimum(g(a_hi, b1), g(a_hi, b_hi)))
    least = np.where((a1 <= a_hi) & (b1 <= b_hi), np.minimum(least, np.minimum(corners, diagonal)), least)
    return np.where(has, 1.0 - least, 1.0)


def _hybrid_with(scorer, args: BorgHybridArgs) -> bool:
    """True when ``scorer`` declares the borg_hybrid formula with ``args`` (``ScorerTraits``)."""
    traits = scorer_traits(scorer)
    return traits.formula == "borg_hybrid" and traits.args == args


class Prover:
    """Per stage of the chain (stage weight ``a`` of the borg_hybrid scorer with the index's
    args, ``c`` of the others, both over the stage's total): a rank bound ``a * h + c`` for
    a bucket whose borg_hybrid bound is ``h``."""

    def __init__(self, stages: list[tuple[float, float]]) -> None:
        self.stages = stages

    @classmethod
    def of(cls, pipeline, hybrid: BorgHybridArgs | None) -> Prover | None:
        """The prover of ``pipeline``; None when no stage holds a borg_hybrid scorer with
        the args ``hybrid`` over exactly cpu and memory (no bound to prove with)."""
        if hybrid is None or sorted(hybrid.resources) != ["cpu", "memory"]:
            return None
        stages = []
        for stage in pipeline.stages:
            total = sum(w for _, w in stage)
            mine = sum(w for s, w in stage if _hybrid_with(s, hybrid))
            stages.append((mine / total, (total - mine) / total) if total > 0 else (0.0, 0.0))
        return cls(stages) if any(a > 0 for a, _ in stages) else None

    def threshold(self, rank: tuple[float, ...] | None) -> float:
        """The highest bucket bound ``h`` the best ``rank`` found proves unbeatable
        (-inf: none, e.g. no rank yet or a stage below its bound)."""
        if rank is None:
            return float("-inf")
        out = float("inf")
        for (a, c), r in zip(self.stages, rank):
            if a > 0:
                out = min(out, (r - c + EPS) / a)
            elif r < c - EPS:
                return float("-inf")
        return out
