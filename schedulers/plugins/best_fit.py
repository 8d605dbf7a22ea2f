"""Scorer: best fit — prefer the machine the task leaves fullest (packs tightly, keeps
other machines empty for big tasks): 1 - mean fraction left after placing."""

from __future__ import annotations

from dataclasses import dataclass

from cellstate.model import Job, Machine
from cellstate.resources import Resources
from schedulers.plugin import ScoreContext, build_args
from schedulers.plugins.fit_math import checked_resources, left_fractions

NAME = "best_fit"


@dataclass(frozen=True, slots=True)
class BestFitArgs:
    """``resources``: the resources whose left-over fraction is averaged."""

    resources: tuple[str, ...] = ("cpu", "memory")

    def __post_init__(self) -> None:
        object.__setattr__(self, "resources", checked_resources(NAME, self.resources))


class BestFit:
    """1.0 when the task fills the machine exactly, 0.0 on an empty machine it barely dents."""

    name = NAME
    reads = frozenset({"request"})

    def __init__(self, args: BestFitArgs) -> None:
        self.args = args

    def score(self, job: Job, machine: Machine, free: Resources, ctx: ScoreContext) -> float:
        left = left_fractions(machine, free, job.request, self.args.resources)
        return 1.0 - sum(left) / len(left) if left else 0.0


def factory(args: BestFitArgs | dict | None = None) -> BestFit:
    return BestFit(build_args(BestFitArgs, args, NAME))
