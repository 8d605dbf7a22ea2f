"""Scorer: worst fit (spread load) — prefer the machine whose scarcest resource stays most
free after placing: min over resources of the fraction left. Unlike ``least_loaded``
(the mean), one nearly exhausted resource sinks the machine's score."""

from __future__ import annotations

from dataclasses import dataclass

from cellstate.model import Job, Machine
from cellstate.resources import Resources
from schedulers.plugin import ScoreContext, build_args
from schedulers.plugins.fit_math import checked_resources, left_fractions

NAME = "worst_fit"


@dataclass(frozen=True, slots=True)
class WorstFitArgs:
    """``resources``: the resources considered (the minimum left-over fraction counts)."""

    resources: tuple[str, ...] = ("cpu", "memory")

    def __post_init__(self) -> None:
        object.__setattr__(self, "resources", checked_resources(NAME, self.resources))


class WorstFit:
    """1.0 on an empty machine (minus the task), 0.0 when the task exhausts any resource."""

    name = NAME
    reads = frozenset({"request"})

    def __init__(self, args: WorstFitArgs) -> None:
        self.args = args

    def score(self, job: Job, machine: Machine, free: Resources, ctx: ScoreContext) -> float:
        left = left_fractions(machine, free, job.request, self.args.resources)
        return min(left) if left else 0.0


def factory(args: WorstFitArgs | dict | None = None) -> WorstFit:
    return WorstFit(build_args(WorstFitArgs, args, NAME))
