"""Scorer: failure-domain spread — prefer the rack (or zone) holding fewer of the job's
tasks, so one rack failure takes out as few of them as possible. Depends on where the
job's tasks already are (``ScoreContext.placement``), so it cannot sign: ``reads`` is None
and a chain with it gets no equivalence classes or score cache."""

from __future__ import annotations

from dataclasses import dataclass

from cellstate.model import Job, Machine
from cellstate.resources import Resources
from schedulers.plugin import PluginConfigError, ScoreContext, build_args

NAME = "domain_spread"
_DOMAINS = ("rack", "zone")


@dataclass(frozen=True, slots=True)
class DomainSpreadArgs:
    """``domain``: the failure domain spread over, ``rack`` or ``zone``."""

    domain: str = "rack"

    def __post_init__(self) -> None:
        if self.domain not in _DOMAINS:
            raise PluginConfigError(f"{NAME}: domain must be one of {list(_DOMAINS)}, got {self.domain!r}")


class DomainSpread:
    """1 / (1 + tasks of the job already in the machine's domain). A machine without the
    attribute (empty rack) is its own domain: only its own tasks count."""

    name = NAME
    reads = None

    def __init__(self, args: DomainSpreadArgs) -> None:
        self.args = args

    def score(self, job: Job, machine: Machine, free: Resources, ctx: ScoreContext) -> float:
        placement = ctx.placement
        if placement.total <= 0:
            return 1.0
        if self.args.domain == "zone":
            count = placement.in_zone(machine.zone) if machine.zone else placement.on_machine(machine.id)
        else:
            count = placement.in_rack(machine.rack) if machine.rack else placement.on_machine(machine.id)
        return 1.0 / (1.0 + count)


def factory(args: DomainSpreadArgs | dict | None = None) -> DomainSpread:
    return DomainSpread(build_args(DomainSpreadArgs, args, NAME))
