"""Filter: the task's request fits the machine's free resources (after reservations)."""

from __future__ import annotations

from dataclasses import dataclass

from cellstate.devices import GPU, bind_in
from cellstate.model import Job, Machine
from cellstate.resources import Resources
from schedulers.plugin import ROOM, FilterTraits, PluginConfigError, Verdict, build_args

NAME = "resources_fit"
DEVICES = "gpu device"


@dataclass(frozen=True, slots=True)
class ResourcesFitArgs:
    """``ignore``: resource names this filter does not check (e.g. ``("disk",)``)."""

    ignore: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.ignore, str) or not all(isinstance(n, str) and n for n in self.ignore):
            raise PluginConfigError(f"{NAME}: ignore must be a tuple of resource names, got {self.ignore!r}")
        object.__setattr__(self, "ignore", tuple(self.ignore))


class ResourcesFit:
    """Unfit naming the first short resource; unresolvable when even the machine's whole
    capacity is too small for it (no eviction could help)."""

    name = NAME
    reads = frozenset({"request"})

    def __init__(self, args: ResourcesFitArgs) -> None:
        self.args = args
        self._ignore = frozenset(args.ignore)
        self.traits = FilterTraits(monotone_in_free=True, resource_fit=True, ignores=self._ignore,
                                   lifted_by=frozenset({ROOM}))
        self._ok = Verdict.fit(NAME)
        self._unfit: dict[str, Verdict] = {}
        self._never: dict[str, Verdict] = {}

    def fits(self, job: Job, machine: Machine, free: Resources, placed_here: int) -> Verdict:
        request = job.request
        if request.cpu <= free.cpu and request.memory <= free.memory and request.disk <= free.disk \
                and not request.extra:
            return self._ok
        short = self._first_short(request, free)
        if short is None:
            if request.extra and GPU not in self._ignore and bind_in(request, free) is None:
                return self._verdict(self._unfit, Verdict.unfit, DEVICES)  # the sum fits, no device does
            return self._ok
        if request.get(short) > machine.capacity.get(short):
            return self._verdict(self._never, Verdict.never, short)
        return self._verdict(self._unfit, Verdict.unfit, short)

    def _first_short(self, request: Resources, free: Resources) -> str | None:
        ignore = self._ignore
        if request.cpu > free.cpu and "cpu" not in ignore:
            return "cpu"
        if request.memory > free.memory and "memory" not in ignore:
            return "memory"
        if request.disk > free.disk and "disk" not in ignore:
            return "disk"
        for name, amount in request.extra:
            if amount > free.get(name) and name not in ignore:
                return name
        return None

    @staticmethod
    def _verdict(cache: dict[str, Verdict], make, short: str) -> Verdict:
        verdict = cache.get(short)
        if verdict is None:
            verdict = cache[short] = make(NAME, short)
        return verdict


def factory(args: ResourcesFitArgs | dict | None = None) -> ResourcesFit:
    return ResourcesFit(build_args(ResourcesFitArgs, args, NAME))
