"""Filter: only machines in an accepted state (by default only ``up``) take new tasks."""

from __future__ import annotations

from dataclasses import dataclass

from cellstate.model import Job, Machine, MachineState
from cellstate.resources import Resources
from schedulers.plugin import ROOM, FilterTraits, PluginConfigError, Verdict, build_args

NAME = "machine_state"


@dataclass(frozen=True, slots=True)
class MachineStateArgs:
    """``accept``: machine states that may receive tasks."""

    accept: tuple[MachineState, ...] = (MachineState.UP,)

    def __post_init__(self) -> None:
        if isinstance(self.accept, str) or not self.accept:
            raise PluginConfigError(f"{NAME}: accept must be a non-empty tuple of states, got {self.accept!r}")
        try:
            states = tuple(MachineState(s) for s in self.accept)
        except ValueError as err:
            raise PluginConfigError(f"{NAME}: {err}; states: {[s.value for s in MachineState]}") from err
        object.__setattr__(self, "accept", states)


class MachineStateFilter:
    """Unresolvable for a machine whose state is not accepted; reason is the state."""

    name = NAME
    reads = frozenset()

    def __init__(self, args: MachineStateArgs) -> None:
        self.args = args
        self._accept = frozenset(args.accept)
        self.traits = FilterTraits(monotone_in_free=True, passes_unplaced=True, accepts_states=self._accept,
                                   lifted_by=frozenset({ROOM}))  # a machine coming (back) up is a freed one
        self._ok = Verdict.fit(NAME)
        self._no = {s: Verdict.never(NAME, s.value) for s in MachineState}

    def fits(self, job: Job, machine: Machine, free: Resources, placed_here: int) -> Verdict:
        if machine.state in self._accept:
            return self._ok
        return self._no[machine.state]


def factory(args: MachineStateArgs | dict | None = None) -> MachineStateFilter:
    return MachineStateFilter(build_args(MachineStateArgs, args, NAME))
