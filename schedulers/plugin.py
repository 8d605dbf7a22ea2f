"""The plugin framework: feasibility ``Filter``s return a ``Verdict``, ``Scorer``s a number.

Modelled on Nomad's feasibility/rank iterators and the kube-scheduler framework:
each plugin is a tiny object with a ``name``, built by a factory from a frozen args
dataclass, and declares the job fields it ``reads`` (None: it cannot sign, which
turns equivalence-class caching off). A filter's verdict may depend only on those
job fields, the machine, the free resources and ``placed_here``.

A plugin may also declare ``traits`` (``FilterTraits``, ``ScorerTraits``): what the schedulers'
fast paths need to know to stay exact with it (its verdict only worsens as a decision
reserves, it is a resource fit over these resources, which events can lift a rejection, its
score is a known formula). The fast paths read them once per chain (``filter_traits``,
``scorer_traits``), never a plugin's name or type; a plugin that declares nothing gets the
safe default (no fast path relies on it: its scheduler takes the slow, general path).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Iterable, Mapping, Protocol, TypeVar

from cellstate.fastbuild import builder
from cellstate.model import Job, Machine, MachineState
from cellstate.resources import Resources


class PluginConfigError(ValueError):
    """A plugin or chain was configured with a bad name or bad arguments."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """Outcome of one filter on one machine: ok, unfit (may change as the machine frees
    up or by preemption) or unresolvable (no eviction on this machine can help)."""

    ok: bool
    plugin: str
    reason: str = ""
    unresolvable: bool = False

    @staticmethod
    def fit(plugin: str) -> Verdict:
        return Verdict(True, plugin)

    @staticmethod
    def unfit(plugin: str, reason: str) -> Verdict:
        return Verdict(False, plugin, reason)

    @staticmethod
    def never(plugin: str, reason: str) -> Verdict:
        """Unresolvable: preemption on this machine would not make the task fit."""
        return Verdict(False, plugin, reason, unresolvable=True)


ROOM = "room"
"""Event: a machine gained free room, came back up or was added (what a view reports as a
freed machine, ``ReplicaView.take_freed_machines``)."""
JOB = "job"
"""Event: the job's own record changed (one of its tasks ended, was evicted back to pending,
was placed by a peer; its spec changed)."""


@dataclass(frozen=True, slots=True)
class FilterTraits:
    """What a filter promises, for the fast paths (the default promises nothing).

    ``monotone_in_free``: within one decision its verdict on a machine only gets worse as
    resources are reserved there (``free`` shrinks) and the job's tasks there grow
    (``placed_here``); it reads nothing else that a decision changes.

    ``resource_fit``: it passes a machine exactly when the task's request fits the free
    amounts of every resource but ``ignores`` (``compares(name)``), and when it fails it
    returns ``Verdict(False, self.name, <the first short resource>)`` in the order cpu,
    memory, disk, then the request's extra resources (``unresolvable`` when the capacity
    itself is short) — what ``resources_fit`` does, so indexes of free amounts can stand
    in for it and count its reasons.

    ``passes_unplaced``: on a machine whose state it accepts that holds none of the job's
    tasks it passes, and elsewhere its verdict reads only the job and ``placed_here`` (and
    rejects from some count of tasks on: more tasks never pass where fewer failed).

    ``accepts_states``: the machine states it passes (None: it does not read the state).

    ``lifted_by``: the events (``ROOM``, ``JOB``) after which a machine it rejected may
    pass; None: unknown (anything may, e.g. time or other jobs' placements)."""

    monotone_in_free: bool = False
    resource_fit: bool = False
    ignores: frozenset[str] = frozenset()
    passes_unplaced: bool = False
    accepts_states: frozenset[MachineState] | None = None
    lifted_by: frozenset[str] | None = None

    def compares(self, resource: str) -> bool:
        """True when a resource fit compares ``resource`` (False for any other filter)."""
        return self.resource_fit and resource not in self.ignores


@dataclass(frozen=True, slots=True)
class ScorerTraits:
    """What a scorer promises, for the fast paths (the default promises nothing).
    ``formula``: its score equals the built-in formula of that name with ``args`` (an args
    dataclass of that formula: ``"least_loaded"`` (``LeastLoadedArgs``), ``"zone_spread"``
    (``ZoneSpreadArgs``), ``"borg_hybrid"`` (``BorgHybridArgs``)), so a search that indexes
    or bounds that formula stays exact with it."""

    formula: str | None = None
    args: Any = None


NO_FILTER_TRAITS = FilterTraits()
NO_SCORER_TRAITS = ScorerTraits()


def filter_traits(plugin: Any) -> FilterTraits:
    """The traits ``plugin`` declares (its ``traits`` attribute), else none."""
    traits = getattr(plugin, "traits", None)
    return traits if isinstance(traits, FilterTraits) else NO_FILTER_TRAITS


def scorer_traits(plugin: Any) -> ScorerTraits:
    """The traits ``plugin`` declares (its ``traits`` attribute), else none."""
    traits = getattr(plugin, "traits", None)
    return traits if isinstance(traits, ScorerTraits) else NO_SCORER_TRAITS


class Filter(Protocol):
    """A feasibility check of one task of ``job`` on ``machine``."""

    name: str
    reads: frozenset[str] | None

    def fits(self, job: Job, machine: Machine, free: Resources, placed_here: int) -> Verdict:
        """``free``: what the machine has left (after this decision's reservations);
        ``placed_here``: tasks of ``job`` already on the machine, including reserved ones."""
        ...


@dataclass(slots=True)
class JobPlacement:
    """Where one job's tasks are: existing allocations plus claims reserved in this decision.
    ``stamp`` (not None): placements with the same stamp hold the same tasks per machine (a
    ``PlacementCache`` stamps the placements it hands out; ``add`` clears it, so change the
    counts only through ``add``). ``shared``: the dicts may be another placement's too
    (``share``), so ``add`` copies them first."""

    machines: dict[str, int] = field(default_factory=dict)
    zones: dict[str, int] = field(default_factory=dict)
    total: int = 0
    racks: dict[str, int] = field(default_factory=dict)
    stamp: int | None = field(default=None, compare=False, repr=False)
    shared: bool = field(default=False, compare=False, repr=False)

    def on_machine(self, machine_id: str) -> int:
        return self.machines.get(machine_id, 0)

    def in_zone(self, zone: str) -> int:
        return self.zones.get(zone, 0)

    def in_rack(self, rack: str) -> int:
        return self.racks.get(rack, 0)

    def add(self, machine_id: str, zone: str, tasks: int = 1, rack: str = "") -> None:
        """Count ``tasks`` more (negative: fewer) tasks of the job on a machine in ``zone``
        (and ``rack``: racks are counted only when given)."""
        if self.shared:
            self.machines, self.zones, self.racks = dict(self.machines), dict(self.zones), dict(self.racks)
            self.shared = False
        self.machines[machine_id] = self.machines.get(machine_id, 0) + tasks
        self.zones[zone] = self.zones.get(zone, 0) + tasks
        if rack:
            self.racks[rack] = self.racks.get(rack, 0) + tasks
        self.total += tasks
        self.stamp = None

    def share(self) -> JobPlacement:
        """An equal placement (same stamp) holding the same dicts, copied by whichever of the
        two is first changed: a copy that costs nothing until then."""
        self.shared = True
        return _placement(self.machines, self.zones, self.total, self.racks, self.stamp, True)


_placement = builder(JobPlacement)


@dataclass(frozen=True, slots=True)
class ScoreContext:
    """What a scorer may consult besides the job and machine. ``victims``: priorities of the
    allocations that would be evicted from this machine to fit the task (preemption ranking;
    empty in the ordinary pass, where the task fits the free resources)."""

    placement: JobPlacement
    victims: tuple[int, ...] = ()


score_context = builder(ScoreContext)
"""``score_context(placement, victims)``: a ``ScoreContext`` built without its ``__init__``."""


class Scorer(Protocol):
    """Ranks a feasible machine for a task of ``job``; higher is better, within [0, 1]."""

    name: str
    reads: frozenset[str] | None

    def score(self, job: Job, machine: Machine, free: Resources, ctx: ScoreContext) -> float: ...


A = TypeVar("A")


def build_args(cls: type[A], raw: A | Mapping[str, Any] | None, plugin: str) -> A:
    """An args dataclass from an instance, a mapping of its fields, or None (defaults).

    Unknown keys and rejected values raise PluginConfigError naming the plugin."""
    if raw is None:
        raw = {}
    if isinstance(raw, cls):
        return raw
    if not isinstance(raw, Mapping):
        raise PluginConfigError(f"{plugin}: args must be a mapping or {cls.__name__}, got {raw!r}")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise PluginConfigError(f"{plugin}: unknown args {unknown}; known: {sorted(known)}")
    try:
        return cls(**raw)
    except PluginConfigError:
        raise  # the args dataclass's own check already names the plugin and the field
    except (TypeError, ValueError) as err:
        raise PluginConfigError(f"{plugin}: bad args {dict(raw)!r}: {err}") from err


def union_reads(plugins: Iterable[Filter | Scorer]) -> frozenset[str] | None:
    """Job fields a chain of plugins reads; None as soon as one plugin cannot sign."""
    out: set[str] = set()
    for plugin in plugins:
        if plugin.reads is None:
            return None
        out |= plugin.reads
    return frozenset(out)
