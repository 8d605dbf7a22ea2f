"""Filter: at most ``job.max_per_machine`` tasks of a job per machine (0: no limit)."""

from __future__ import annotations

from dataclasses import dataclass

from cellstate.model import Job, Machine
from cellstate.resources import Resources
from schedulers.plugin import JOB, ROOM, FilterTraits, PluginConfigError, Verdict, build_args

NAME = "max_per_machine"


@dataclass(frozen=True, slots=True)
class MaxPerMachineArgs:
    """``default``: the limit for jobs that set none (0: no limit)."""

    default: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.default, int) or isinstance(self.default, bool) or self.default < 0:
            raise PluginConfigError(f"{NAME}: default must be an int >= 0, got {self.default!r}")


class MaxPerMachine:
    """Unresolvable once the machine holds the limit of the job's tasks."""

    name = NAME
    reads = frozenset({"max_per_machine"})
    # the job's tasks leaving the machine lift it (the job's record changes, the machine frees room)
    traits = FilterTraits(monotone_in_free=True, passes_unplaced=True, lifted_by=frozenset({ROOM, JOB}))

    def __init__(self, args: MaxPerMachineArgs) -> None:
        self.args = args
        self._ok = Verdict.fit(NAME)

    def fits(self, job: Job, machine: Machine, free: Resources, placed_here: int) -> Verdict:
        limit = job.max_per_machine or self.args.default
        if not limit or placed_here < limit:
            return self._ok
        return Verdict.never(NAME, f"limit {limit} reached")


def factory(args: MaxPerMachineArgs | dict | None = None) -> MaxPerMachine:
    return MaxPerMachine(build_args(MaxPerMachineArgs, args, NAME))
