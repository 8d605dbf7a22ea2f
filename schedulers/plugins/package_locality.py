"""Scorer: package locality — prefer machines that already cache the job's package
(Borg §3.2: most of a task's startup latency is installing its packages)."""

from __future__ import annotations

from dataclasses import dataclass

from cellstate.model import Job, Machine
from cellstate.resources import Resources
from schedulers.plugin import PluginConfigError, ScoreContext, build_args

NAME = "package_locality"


@dataclass(frozen=True, slots=True)
class PackageLocalityArgs:
    """``missing``: the score of a machine without the package (in [0, 1))."""

    missing: float = 0.0

    def __post_init__(self) -> None:
        value = self.missing
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
            raise PluginConfigError(f"{NAME}: missing must be a number in [0, 1), got {value!r}")


class PackageLocality:
    """1.0 when the machine caches ``job.package`` (or the job names none), else ``missing``."""

    name = NAME
    reads = frozenset({"package"})

    def __init__(self, args: PackageLocalityArgs) -> None:
        self.args = args

    def score(self, job: Job, machine: Machine, free: Resources, ctx: ScoreContext) -> float:
        if not job.package or job.package in machine.packages:
            return 1.0
        return self.args.missing


def factory(args: PackageLocalityArgs | dict | None = None) -> PackageLocality:
    return PackageLocality(build_args(PackageLocalityArgs, args, NAME))
