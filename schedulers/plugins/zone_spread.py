"""Scorer: anti-affinity — prefer the zone with fewer of the job's tasks, then (within
equally used zones) the machine with fewer of them."""

from __future__ import annotations

from dataclasses import dataclass

from cellstate.model import Job, Machine
from cellstate.resources import Resources
from schedulers.plugin import PluginConfigError, ScoreContext, ScorerTraits, build_args

NAME = "zone_spread"


@dataclass(frozen=True, slots=True)
class ZoneSpreadArgs:
    """``machines``: also spread across machines within a zone (the tie-break)."""

    machines: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.machines, bool):
            raise PluginConfigError(f"{NAME}: machines must be a bool, got {self.machines!r}")


class ZoneSpread:
    """Exactly lexicographic (zone count, machine count), mapped into [0, 1]: with T of the
    job's tasks counted so far, key = zone*(T+1) + machine <= T*(T+2), score = 1 - key/(T*(T+2)+1).
    Depends on where the job's tasks already are, so it cannot sign (reads None)."""

    name = NAME
    reads = None

    def __init__(self, args: ZoneSpreadArgs) -> None:
        self.args = args
        self.traits = ScorerTraits(NAME, args)  # its score is this formula: searches may index or bound it

    def score(self, job: Job, machine: Machine, free: Resources, ctx: ScoreContext) -> float:
        placement = ctx.placement
        total = placement.total
        if total <= 0:
            return 1.0
        key = placement.in_zone(machine.zone) * (total + 1)
        if self.args.machines:
            key += placement.on_machine(machine.id)
        return 1.0 - key / (total * (total + 2) + 1)


def factory(args: ZoneSpreadArgs | dict | None = None) -> ZoneSpread:
    return ZoneSpread(build_args(ZoneSpreadArgs, args, NAME))
