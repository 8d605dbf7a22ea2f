"""A scheduler's chain of plugins: filters run in order (first failure decides), scorers
are grouped into ranking stages compared lexicographically, each stage a weighted sum, and
post-filters run when filtering leaves a task no feasible machine (kube-scheduler's PostFilter:
they may make room, e.g. Borg's preemption, ``schedulers.plugins.preemption``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, Sequence

from cellstate.model import Alloc, Job, Machine
from cellstate.resources import Resources
from schedulers.plugin import Filter, JobPlacement, PluginConfigError, ScoreContext, Scorer, Verdict, union_reads

if TYPE_CHECKING:
    from omega.protocols import CellView
    from schedulers.reservation import Reservations

FEASIBLE = Verdict.fit("")
NO_MACHINES = "no machine fits: the cell has no machines"


class PostFilterContext(Protocol):
    """What a post-filter reads of the decision it runs in: the job's spec, the view, the
    machine ids in walk order, what the decision reserved (``res``: free resources per machine),
    where the job's tasks are (``placement``), the machines the decision reserved on
    (``touched``), the allocations it evicted (``evicted``), a memo kept across decisions
    (``floors``: machine id -> (revision, lowest allocated priority)) and how many options to
    weigh before taking the best (``options``: None, all of them)."""

    spec: Job
    view: CellView
    ids: Sequence[str]
    res: Reservations
    placement: JobPlacement
    touched: set[str]
    evicted: set[tuple[str, int]]
    floors: dict[str, tuple[int, int]]
    options: int | None


class PostFilter(Protocol):
    """Runs when no machine passed the filters for a task: a machine it makes feasible and the
    allocations to evict there ([] when none need to go), or None."""

    name: str

    def nominate(self, pipeline: Pipeline, ctx: PostFilterContext) -> tuple[Machine, list[Alloc]] | None: ...


class Pipeline:
    """Filters (cheap first), ranking stages ``[[(scorer, weight), ...], ...]`` and post-filters
    (run in order when a task fits nowhere; the first nomination wins)."""

    def __init__(self, filters: Sequence[Filter], stages: Sequence[Sequence[tuple[Scorer, float]]] = (),
                 post_filters: Sequence[PostFilter] = ()):
        self.filters = tuple(filters)
        self.stages = tuple(tuple(stage) for stage in stages)
        self.post_filters = tuple(post_filters)
        for stage in self.stages:
            if not stage:
                raise PluginConfigError("a ranking stage needs at least one scorer")
            for scorer, weight in stage:
                if not isinstance(weight, (int, float)) or weight <= 0:
                    raise PluginConfigError(f"{scorer.name}: weight must be > 0, got {weight!r}")

    @property
    def reads(self) -> frozenset[str] | None:
        """Job fields the whole chain reads (None: some plugin cannot sign)."""
        return union_reads(list(self.filters) + [s for stage in self.stages for s, _ in stage])

    def names(self) -> tuple[str, ...]:
        """The filters' and scorers' names, in order (post-filters: ``post_filters``)."""
        return tuple(f.name for f in self.filters) + tuple(s.name for st in self.stages for s, _ in st)

    def with_post_filters(self, post_filters: Sequence[PostFilter]) -> Pipeline:
        """The same filters and stages with ``post_filters`` instead."""
        return Pipeline(self.filters, self.stages, post_filters)

    def post_filter(self, ctx: PostFilterContext) -> tuple[Machine, list[Alloc]] | None:
        """The first post-filter's nomination for a task no machine passed the filters for, or None."""
        for post in self.post_filters:
            nominated = post.nominate(self, ctx)
            if nominated is not None:
                return nominated
        return None

    def check(self, job: Job, machine: Machine, free: Resources, placed_here: int) -> Verdict:
        """The first failing filter's verdict, or a feasible verdict."""
        for f in self.filters:
            verdict = f.fits(job, machine, free, placed_here)
            if not verdict.ok:
                return verdict
        return FEASIBLE

    def bind(self, job: Job, machine: Machine, free: Resources) -> Resources:
        """The request a task of ``job`` claims on ``machine`` with ``free``: bound to devices by
        the first scorer with a device choice (a ``bind(job, machine, free)`` method, e.g.
        ``fgd``); else ``job.request`` as it is, its devices bound by the plan's default
        (``cellstate.devices.best_fit``). A choice that cannot hold the task leaves it unbound."""
        for stage in self.stages:
            for scorer, _ in stage:
                bind = getattr(scorer, "bind", None)
                if bind is not None:
                    return bind(job, machine, free) or job.request
        return job.request

    @property
    def binds(self) -> bool:
        """True when a scorer of the chain chooses devices (``bind``)."""
        return any(hasattr(s, "bind") for stage in self.stages for s, _ in stage)

    def rank(self, job: Job, machine: Machine, free: Resources, ctx: ScoreContext) -> tuple[float, ...]:
        """One weighted mean per stage, normalized to [0, 1]; compare tuples, higher wins."""
        out = []
        for stage in self.stages:
            total = weights = 0.0
            for scorer, weight in stage:
                total += weight * scorer.score(job, machine, free, ctx)
                weights += weight
            out.append(total / weights)
        return tuple(out)


class Rejections:
    """Tally of why machines were excluded: (plugin, reason) -> machine count."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}

    def add(self, verdict: Verdict) -> None:
        key = (verdict.plugin, verdict.reason)
        self.counts[key] = self.counts.get(key, 0) + 1

    def reason(self, top: int = 3) -> str:
        """``no machine fits: resources_fit: memory (812 machines), constraints: zone in [a] (188)``."""
        if not self.counts:
            return NO_MACHINES
        ranked = sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
        parts = [f"{plugin}: {why} ({n}{' machines' if i == 0 else ''})"
                 for i, ((plugin, why), n) in enumerate(ranked)]
        return "no machine fits: " + ", ".join(parts)
