"""Scorer: Borg's hybrid of best fit and stranded-resource avoidance (Borg, EuroSys'15 §3.2).

With the fractions of capacity left after placing, per resource: ``stranded`` is the
largest fraction left when some resource would be exhausted (at or below ``exhausted``:
everything else on the machine becomes unusable), otherwise ``imbalance`` times the gap
between the most and the least free resource (what is at risk of stranding; with a large
``imbalance`` an empty machine can beat a half-used uneven one). The score rewards packing
tightly (best fit) and penalizes stranding:

    score = 1 - (stranding * stranded + (1 - stranding) * mean_left)
"""

from __future__ import annotations

from dataclasses import dataclass

from cellstate.model import Job, Machine
from cellstate.resources import Resources
from schedulers.plugin import PluginConfigError, ScoreContext, ScorerTraits, build_args
from schedulers.plugins.fit_math import checked_resources, left_fractions

NAME = "borg_hybrid"


def _fraction(field: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise PluginConfigError(f"{NAME}: {field} must be a number in [0, 1], got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class BorgHybridArgs:
    """``stranding``: weight of the stranding penalty against best fit (0: pure best fit);
    ``exhausted``: a fraction left at or below this counts as exhausted; ``imbalance``: the
    weight of the free-resource gap when nothing is exhausted."""

    resources: tuple[str, ...] = ("cpu", "memory")
    stranding: float = 0.5
    exhausted: float = 0.02
    imbalance: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "resources", checked_resources(NAME, self.resources))
        object.__setattr__(self, "stranding", _fraction("stranding", self.stranding))
        object.__setattr__(self, "exhausted", _fraction("exhausted", self.exhausted))
        object.__setattr__(self, "imbalance", _fraction("imbalance", self.imbalance))


def stranded_fraction(left: list[float], exhausted: float, imbalance: float = 1.0) -> float:
    """The share of a machine made unusable (or at risk) by unbalanced use (see module doc)."""
    if len(left) < 2:
        return 0.0
    low, high = min(left), max(left)
    return high if low <= exhausted else imbalance * (high - low)


class BorgHybrid:
    """Higher for a machine the task fills tightly and evenly across resources."""

    name = NAME
    reads = frozenset({"request"})

    def __init__(self, args: BorgHybridArgs) -> None:
        self.args = args
        self.traits = ScorerTraits(NAME, args)  # its score is this formula: searches may index or bound it

    def score(self, job: Job, machine: Machine, free: Resources, ctx: ScoreContext) -> float:
        args = self.args
        left = left_fractions(machine, free, job.request, args.resources)
        if not left:
            return 0.0
        stranded = stranded_fraction(left, args.exhausted, args.imbalance)
        mean = sum(left) / len(left)
        return 1.0 - (args.stranding * stranded + (1.0 - args.stranding) * mean)


def factory(args: BorgHybridArgs | dict | None = None) -> BorgHybrid:
    return BorgHybrid(build_args(BorgHybridArgs, args, NAME))
