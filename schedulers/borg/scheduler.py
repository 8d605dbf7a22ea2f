"""The Borg-style scheduler: one chain of filters and weighted scorers, made fast by the
three tricks of Borg (EuroSys'15 §3.4), each switchable:

- equivalence classes: the tasks of a decision share one walk: feasibility and scores are
  computed once per machine for the class and only the machines this decision reserved
  on are evaluated again; off, every task evaluates machines afresh (its own class);
- score cache: (class, machine) -> verdict and rank at the machine's mod_revision, kept
  across decisions, so jobs with the same signature reuse them; exact invalidation;
- relaxed randomization: stop once ``k`` feasible machines are in hand and take the best;
  off, every machine is scored. The walk (``walk_start``): ``packed`` (default) visits the
  machines where the task fits best first, by a load index of buckets (``borg_index``),
  seeded-shuffled within a bucket, so the best of ``k`` packs about as a full scan does;
  ``random``/``first``/``sticky`` walk a seeded shuffle of all machines from a random
  cursor / its start / where the last decision found its first feasible machine. With
  ``prove`` (default) the packed walk goes on past ``k`` until no unwalked bucket's upper
  bound of the rank beats the best found (``borg_bound``), so the pick has the full scan's
  best rank (chains with a borg_hybrid scorer; otherwise it stops at ``k``).

Classes and the cache need every plugin of the chain to sign (``reads`` not None); with
one that cannot (zone_spread, domain_spread: they depend on where the job's tasks are) both
are off, whatever the config says (``tricks`` tells what is in effect).

When a task fits nowhere, the pipeline's post-filter stage runs: with ``preemption`` on it
holds the preemption plugin (``schedulers.plugins.preemption``), which picks one machine and the
lower-priority allocations to evict there (fewest victims, then lowest priorities; see
``schedulers.preemption``); the claim lists them in ``evicts``.

This module is the configuration and ``decide``; the decision is ``schedulers.borg.decision``,
the walk ``schedulers.borg.search``, and what is kept from one decision to the next the explicit
``SearchState`` (``schedulers.borg.state``) each decision takes in and hands back.
"""

from __future__ import annotations

import random

from cellstate.model import JobKind
from cellstate.plan import JobEntry
from omega.protocols import CellView
from schedulers.base import Decision, checked_tasks, gang_outcome, needs_nothing
from schedulers.borg import decision as borg_decision
from schedulers.borg.bound import Prover
from schedulers.borg.cache import ScoreCache, Signer
from schedulers.borg.index import LoadIndex
from schedulers.borg.state import BorgCounters, SearchState
from schedulers.pipeline import Pipeline
from schedulers.plugin import PluginConfigError, filter_traits, scorer_traits
from schedulers.plugins.preemption import Preemption

__all__ = ["ALL_KINDS", "WALK_STARTS", "BorgCounters", "BorgScheduler"]

ALL_KINDS = (JobKind.BATCH, JobKind.SERVICE)
WALK_STARTS = ("packed", "first", "sticky", "random")


def _serves(value) -> tuple[JobKind, ...]:
    if isinstance(value, (str, JobKind)) or not value:
        raise PluginConfigError(f"borg: serves must be a non-empty list of job kinds, got {value!r}")
    try:
        return tuple(dict.fromkeys(JobKind(v) for v in value))
    except ValueError:
        raise PluginConfigError(f"borg: serves: unknown job kind in {value!r}; "
                                f"known: {[k.value for k in JobKind]}") from None


def _hybrid_args(pipeline: Pipeline):
    """The args of the chain's first scorer whose score is the borg_hybrid formula (the packed
    walk estimates with them), or None."""
    for stage in pipeline.stages:
        for scorer, _ in stage:
            traits = scorer_traits(scorer)
            if traits.formula == "borg_hybrid":
                return traits.args
    return None


def _before_fit(pipeline: Pipeline) -> tuple[tuple, object | None]:
    """(the filters before the chain's first resource fit, that filter); ((), None) without one."""
    for i, f in enumerate(pipeline.filters):
        if filter_traits(f).resource_fit:
            return tuple(pipeline.filters[:i]), f
    return (), None


def _checked_resources(pipeline: Pipeline) -> frozenset[str]:
    """cpu and memory, less those the chain's first resource fit ignores (none without one)."""
    for f in pipeline.filters:
        traits = filter_traits(f)
        if traits.resource_fit:
            return frozenset(r for r in ("cpu", "memory") if traits.compares(r))
    return frozenset()


class BorgScheduler:
    """See the module docstring. ``serves``: the job kinds the runtime should hand it."""

    kind = "borg"
    unplaced_means_no_room = False  # it preempts: room may appear by eviction (no nothing-fits memo)
    attach = needs_nothing

    def __init__(self, name: str, rng: random.Random, pipeline: Pipeline | None = None, *, k: int = 50,
                 equivalence_classes: bool = True, score_cache: bool = True,
                 relaxed_randomization: bool = True, preemption: bool = True,
                 cache_entries: int = 500_000, serves=ALL_KINDS, walk_start: str = "packed",
                 sweep: int = 32, prove: bool = True) -> None:
        for label, flag in (("equivalence_classes", equivalence_classes), ("score_cache", score_cache),
                            ("relaxed_randomization", relaxed_randomization), ("preemption", preemption),
                            ("prove", prove)):
            if not isinstance(flag, bool):
                raise PluginConfigError(f"borg {name!r}: {label} must be a bool, got {flag!r}")
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise PluginConfigError(f"borg {name!r}: k must be an int >= 1, got {k!r}")
        if not isinstance(rng, random.Random):
            raise PluginConfigError(f"borg {name!r}: rng must be a random.Random, got {rng!r}")
        if pipeline is None:
            from schedulers.chain_spec import borg_pipeline
            pipeline = borg_pipeline()
        self.name, self.rng, self.pipeline, self.k = name, rng, pipeline, k
        self.serves = _serves(serves)
        reads = pipeline.reads
        self.signer = Signer(reads) if reads is not None else None
        self.classes = equivalence_classes and reads is not None
        self.cache = ScoreCache(cache_entries) if score_cache and reads is not None else None
        if walk_start not in WALK_STARTS:
            raise PluginConfigError(f"borg {name!r}: walk_start must be one of {list(WALK_STARTS)}, "
                                    f"got {walk_start!r}")
        self.walk_start = walk_start
        if not isinstance(sweep, int) or isinstance(sweep, bool) or sweep < 0:
            raise PluginConfigError(f"borg {name!r}: sweep must be an int >= 0, got {sweep!r}")
        self.sweep = sweep
        self.before_fit = _before_fit(pipeline)
        before_reads = [f.reads for f in self.before_fit[0]]
        self.before_signer = (Signer(frozenset().union(*before_reads))
                              if self.cache is not None and None not in before_reads else None)
        # the packed walk goes on past k feasible machines until the best is proved (borg_bound)
        self.prover = Prover.of(pipeline, _hybrid_args(pipeline)) if prove and walk_start == "packed" else None
        self.hybrid, self.checked = _hybrid_args(pipeline), _checked_resources(pipeline)
        self.relaxed = relaxed_randomization
        self.preemption = preemption
        # the post-filter stage: the chain's own post-filters, and preemption when it is on
        post = tuple(p for p in pipeline.post_filters if not isinstance(p, Preemption))
        post += (Preemption(),) if preemption else ()
        self.pipeline = pipeline if post == pipeline.post_filters else pipeline.with_post_filters(post)
        self.state = SearchState()

    @property
    def counters(self) -> BorgCounters:
        return self.state.counters

    @property
    def index(self) -> LoadIndex | None:
        """The packed walk's load index (built with the machine ids; None for other walks)."""
        return self.state.index

    @property
    def tricks(self) -> dict[str, bool]:
        """The tricks in effect (a chain that cannot sign turns classes and the cache off)."""
        return {"equivalence_classes": self.classes, "score_cache": self.cache is not None,
                "relaxed_randomization": self.relaxed, "preemption": self.preemption}

    def decide(self, job: JobEntry, tasks: list[int], view: CellView) -> Decision:
        """Claims for ``tasks`` of ``job``, fitting cumulatively on ``view`` (with evictions
        of lower-priority allocations when preemption is on and a task fits nowhere)."""
        tasks = checked_tasks(job, tasks)
        decision, self.state = borg_decision.decide(self, self.state, job, tasks, view)
        return gang_outcome(job, tasks, decision)
