"""Filter: a job marked ``different_machine`` runs at most one task per machine."""

from __future__ import annotations

from dataclasses import dataclass

from cellstate.model import Job, Machine
from cellstate.resources import Resources
from schedulers.plugin import JOB, ROOM, FilterTraits, PluginConfigError, Verdict, build_args

NAME = "different_machine"


@dataclass(frozen=True, slots=True)
class DifferentMachineArgs:
    """``all_jobs``: enforce for every job, not only those that ask for it."""

    all_jobs: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.all_jobs, bool):
            raise PluginConfigError(f"{NAME}: all_jobs must be a bool, got {self.all_jobs!r}")


class DifferentMachine:
    """Unresolvable on a machine already holding one of the job's tasks."""

    name = NAME
    reads = frozenset({"different_machine"})
    # the job's tasks leaving the machine lift it (the job's record changes, the machine frees room)
    traits = FilterTraits(monotone_in_free=True, passes_unplaced=True, lifted_by=frozenset({ROOM, JOB}))

    def __init__(self, args: DifferentMachineArgs) -> None:
        self.args = args
        self._ok = Verdict.fit(NAME)
        self._taken = Verdict.never(NAME, "job already on machine")

    def fits(self, job: Job, machine: Machine, free: Resources, placed_here: int) -> Verdict:
        if placed_here and (job.different_machine or self.args.all_jobs):
            return self._taken
        return self._ok


def factory(args: DifferentMachineArgs | dict | None = None) -> DifferentMachine:
    return DifferentMachine(build_args(DifferentMachineArgs, args, NAME))
