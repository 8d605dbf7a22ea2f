"""Scorer: prefer the lighter machine — the mean fraction of capacity still free after
placing the task, over the configured resources."""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter

from cellstate.model import Job, Machine
from cellstate.resources import Resources
from schedulers.plugin import PluginConfigError, ScoreContext, ScorerTraits, build_args

NAME = "least_loaded"
_CORE = frozenset(("cpu", "memory", "disk"))


@dataclass(frozen=True, slots=True)
class LeastLoadedArgs:
    """``resources``: the resources whose free fraction is averaged."""

    resources: tuple[str, ...] = ("cpu", "memory")

    def __post_init__(self) -> None:
        names = self.resources
        if isinstance(names, str) or not names or not all(isinstance(n, str) and n for n in names):
            raise PluginConfigError(f"{NAME}: resources must be a non-empty tuple of names, got {names!r}")
        object.__setattr__(self, "resources", tuple(names))


class LeastLoaded:
    """1.0 for an empty machine, 0.0 for one the task would fill; resources the machine
    has no capacity of are left out of the mean."""

    name = NAME
    reads = frozenset({"request"})

    def __init__(self, args: LeastLoadedArgs) -> None:
        self.args = args
        self.traits = ScorerTraits(NAME, args)  # its score is this formula: searches may index or bound it
        names = args.resources
        if len(names) > 1 and set(names) <= _CORE:
            self._amounts = attrgetter(*names)  # a tuple of the named core fields, in C
        else:
            self._amounts = lambda resources: tuple(resources.get(name) for name in names)

    def score(self, job: Job, machine: Machine, free: Resources, ctx: ScoreContext) -> float:
        total = 0.0
        counted = 0
        amounts = self._amounts
        for cap, now, asked in zip(amounts(machine.capacity), amounts(free), amounts(job.request)):
            if cap <= 0:
                continue
            left = (now - asked) / cap
            total += 0.0 if left < 0.0 else (1.0 if left > 1.0 else left)
            counted += 1
        return total / counted if counted else 0.0


def factory(args: LeastLoadedArgs | dict | None = None) -> LeastLoaded:
    return LeastLoaded(build_args(LeastLoadedArgs, args, NAME))
