"""Scorer: priority awareness — prefer machines where nothing must be preempted; among
machines that need preemption, fewer victims, then victims of lower priority.

The victims come from ``ScoreContext.victims`` (the priorities of the allocations the
scheduler would evict from this machine); in an ordinary pass the task fits the free
resources and every machine scores 1.0."""

from __future__ import annotations

from dataclasses import dataclass

from cellstate.model import Job, Machine
from cellstate.resources import Resources
from schedulers.plugin import PluginConfigError, ScoreContext, build_args

NAME = "priority_aware"


@dataclass(frozen=True, slots=True)
class PriorityAwareArgs:
    """``max_priority``: the highest priority in use (scales the victims' priority term)."""

    max_priority: int = 11

    def __post_init__(self) -> None:
        value = self.max_priority
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise PluginConfigError(f"{NAME}: max_priority must be an int >= 0, got {value!r}")


class PriorityAware:
    """1.0 without victims; with n victims of highest priority p (clamped to max_priority):
    1/(n+1) - f/((n+1)(n+2)) with f = (p+1)/(max_priority+2) in (0, 1), which stays above
    1/(n+2): fewer victims always score higher and, at equal count, a lower top priority."""

    name = NAME
    reads = frozenset()  # the victims come from the context; job.priority only picks them

    def __init__(self, args: PriorityAwareArgs) -> None:
        self.args = args

    def score(self, job: Job, machine: Machine, free: Resources, ctx: ScoreContext) -> float:
        victims = ctx.victims
        if not victims:
            return 1.0
        n = len(victims)
        top = min(max(victims), self.args.max_priority)
        f = (max(top, 0) + 1) / (self.args.max_priority + 2)
        return 1.0 / (n + 1) - f / ((n + 1) * (n + 2))


def factory(args: PriorityAwareArgs | dict | None = None) -> PriorityAware:
    return PriorityAware(build_args(PriorityAwareArgs, args, NAME))
