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

When a task fits nowhere, ``preemption`` picks one machine and the lower-priority
allocations to evict there (fewest victims, then lowest priorities; see
``schedulers.preemption``); the claim lists them in ``evicts``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from cellstate.model import Alloc, Job, JobKind, Machine
from cellstate.plan import Claim, JobEntry, MachineEntry
from omega.protocols import CellView
from schedulers.base import Decision, checked_tasks, gang_outcome, needs_nothing
from schedulers.borg.bound import Prover
from schedulers.borg.cache import ScoreCache, Signer
from schedulers.borg.index import LoadIndex
from schedulers.borg.search import Search
from schedulers.pipeline import NO_MACHINES, Pipeline
from schedulers.plugin import PluginConfigError, ScoreContext, filter_traits, scorer_traits
from schedulers.preemption import choose_victims, cost, preemptible
from schedulers.reservation import Reservations

ALL_KINDS = (JobKind.BATCH, JobKind.SERVICE)
WALK_STARTS = ("packed", "first", "sticky", "random")
_NO_ALLOCS = 1 << 62  # the floor of a machine without allocations: nothing to evict


@dataclass(slots=True)
class BorgCounters:
    """What the scheduler did, cumulatively: machines evaluated (through the chain or the
    cache), cache hits, decisions, tasks decided, tasks placed by preemption, searches that
    found no feasible machine after walking them all (``fits_nowhere``), preemption passes."""

    decisions: int = 0
    tasks: int = 0
    evaluations: int = 0
    cache_hits: int = 0
    preemptions: int = 0
    fits_nowhere: int = 0
    preemption_passes: int = 0


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
        self.index: LoadIndex | None = None  # the packed walk's load index (built with the ids)
        self.before_fit = _before_fit(pipeline)
        before_reads = [f.reads for f in self.before_fit[0]]
        self._before_signer = (Signer(frozenset().union(*before_reads))
                               if self.cache is not None and None not in before_reads else None)
        self._before_memos: dict[tuple, dict] = {}  # before_memo
        # the packed walk goes on past k feasible machines until the best is proved (borg_bound)
        self.prover = Prover.of(pipeline, _hybrid_args(pipeline)) if prove and walk_start == "packed" else None
        self._changed: set[str] = set()  # machines to re-key in the index before the next decision
        self.sticky = 0  # walk position where the last decision found its first feasible machine
        self.relaxed = relaxed_randomization
        self.preemption = preemption
        self.counters = BorgCounters()
        self._ids: list[str] = []
        self._count = -1
        self._base_free: dict = {}
        self._floors: dict[str, tuple[int, int]] = {}  # machine id -> (revision, lowest alloc priority)

    @property
    def tricks(self) -> dict[str, bool]:
        """The tricks in effect (a chain that cannot sign turns classes and the cache off)."""
        return {"equivalence_classes": self.classes, "score_cache": self.cache is not None,
                "relaxed_randomization": self.relaxed, "preemption": self.preemption}

    def decide(self, job: JobEntry, tasks: list[int], view: CellView) -> Decision:
        """Claims for ``tasks`` of ``job``, fitting cumulatively on ``view`` (with evictions
        of lower-priority allocations when preemption is on and a task fits nowhere)."""
        tasks = checked_tasks(job, tasks)
        ids = self._machine_ids(view)
        self.counters.decisions += 1
        self.counters.tasks += len(tasks)
        if not ids:
            return gang_outcome(job, tasks, Decision([], {t: NO_MACHINES for t in tasks}))
        if self.index is not None:
            self.index.refresh(view, self._changed)
            self._changed.clear()
        decider = _Decider(self, job, view, ids)
        decision = decider.run(tasks)
        self._changed.update(decider.touched)
        if self.cache is not None:
            self.cache.trim()
        return gang_outcome(job, tasks, decision)

    def _machine_ids(self, view: CellView) -> list[str]:
        """All machine ids, sorted then shuffled by the seeded rng (refreshed when the count
        changes, or when a listed machine disappeared)."""
        count = view.machine_count()
        if count != self._count:
            self._ids = sorted(entry.id for entry in view.machines())
            if self.relaxed:
                self.rng.shuffle(self._ids)
            self._count = len(self._ids)
            self._base_free.clear()
            self._floors.clear()
            self._changed.clear()
            packed = self.relaxed and self.walk_start == "packed"
            self.index = LoadIndex(self._ids, view, sweep=self.sweep, hybrid=_hybrid_args(self.pipeline),
                                   checked=_checked_resources(self.pipeline),
                                   bounds=self.prover is not None) if packed else None
        return self._ids

    def start_of_walk(self, n: int) -> int:
        """Where a decision's walk over the ``n`` shuffled machines starts: ``first`` at the
        start of the permutation (first-fit order: packs), ``sticky`` where the previous
        decision found its first feasible machine (next-fit order), ``random`` anywhere
        (spreads: consecutive decisions see different machines). 0 without randomization,
        and for ``packed`` (it walks the load index: ``schedulers.borg.index``; the shuffled
        order only when that walk found nothing feasible)."""
        if not self.relaxed or self.walk_start in ("first", "packed"):
            return 0
        return self.rng.randrange(n) if self.walk_start == "random" else self.sticky % n

    def before_memo(self, spec: Job) -> dict | None:
        """With the score cache: machine id -> (revision, the first failing verdict of the
        filters before resources_fit, or None) for jobs with ``spec``'s signature over those
        filters' fields, valid for a machine at that revision, untouched and without the
        job's tasks (the exact "fits nowhere" walk reads it: ``Search._fill_rest``)."""
        if self._before_signer is None:
            return None
        signature = self._before_signer.signature(spec)
        memo = self._before_memos.get(signature)
        if memo is None:
            if len(self._before_memos) >= 64:
                self._before_memos.clear()
            memo = self._before_memos[signature] = {}
        return memo

    def table_for(self, spec: Job, task: int | None):
        """The cache table of the class of ``spec`` (or of one task when classes are off)."""
        if self.cache is None:
            return None
        key = self.signer.signature(spec) if task is None else ("task", spec.id, task)
        return self.cache.table(self.signer.class_of(key))


class _Decider:
    """One decision: the reservation overlay, the per-class searches and the preemption pass."""

    def __init__(self, sched: BorgScheduler, job: JobEntry, view: CellView, ids: list[str]):
        self.sched, self.job, self.view, self.ids = sched, job, view, ids
        self.spec = job.record.job
        self.res = Reservations(view, sched._base_free)
        self.placement = self.res.placement(job.id)
        self.touched: set[str] = set()
        self.evicted: set[tuple[str, int]] = set()
        self.cursor = sched.start_of_walk(len(ids))

    def run(self, tasks: list[int]) -> Decision:
        decision = Decision()
        search = None
        for i, task in enumerate(tasks):
            if search is None or not self.sched.classes:
                search = Search(self, self.sched.table_for(self.spec, None if self.sched.classes else task))
            want = self.sched.k if self.sched.relaxed else len(self.ids)
            search.fill(want)
            machine = search.best()
            victims: list[Alloc] = []
            if machine is None:
                self.sched.counters.fits_nowhere += 1
            if machine is None and self.sched.preemption:
                self.sched.counters.preemption_passes += 1
                machine, victims = self._preempt()
            if machine is None:
                reason = search.rejections.reason()
                decision.unplaced.update((t, reason) for t in tasks[i:])
                break
            self._reserve(machine, victims)
            decision.claims.append(Claim(task, machine.id, self.spec.request,
                                         tuple((a.job_id, a.task_index) for a in victims)))
            self.cursor = search.cursor
            if self.sched.classes and i + 1 < len(tasks):
                search.refresh(machine)  # without classes the next task walks afresh:
            elif self.sched.index is not None and i + 1 < len(tasks):  # its walk and bounds see what is left
                self.sched.index.file_reserved(machine, self.res.free(machine))
            if i == 0 and search.first_feasible is not None:
                self.sched.sticky = search.first_feasible
        return decision

    def _reserve(self, machine: Machine, victims: list[Alloc]) -> None:
        for a in victims:
            self.res.release(a.job_id, machine, a.resources)
            self.evicted.add((a.job_id, a.task_index))
        self.res.reserve(self.job.id, machine, self.spec.request)
        self.touched.add(machine.id)
        self.sched.counters.preemptions += bool(victims)

    def _preempt(self) -> tuple[Machine | None, list[Alloc]]:
        """The machine and victims of least cost (then best rank, then id). With relaxed
        randomization the scan stops once ``k`` machines could make room; a machine that
        needs no victim (room freed by this decision's evictions) ends it at once."""
        spec, pipeline, best, options = self.spec, self.sched.pipeline, None, 0
        floors, machine_of, touched, priority = self.sched._floors, self.view.machine, self.touched, spec.priority
        for machine_id in self.ids:
            entry = machine_of(machine_id)
            if entry is None:
                continue
            if machine_id not in touched:
                floor = floors.get(machine_id)
                lowest = floor[1] if floor is not None and floor[0] == entry.mod_revision else self._floor(entry)
                if lowest >= priority:
                    continue  # untouched and nothing of lower priority on it: no eviction can help
            option = self._victims_on(entry.machine)
            if option is None:
                continue
            victims, free = option
            ctx = ScoreContext(self.placement, tuple(a.priority for a in victims))
            rank = pipeline.rank(spec, entry.machine, free, ctx)
            key = (cost(victims), tuple(-x for x in rank), machine_id)
            if best is None or key < best[0]:
                best = (key, entry.machine, victims)
            options += 1
            if not victims or (self.sched.relaxed and options >= self.sched.k):
                break
        return (best[1], best[2]) if best else (None, [])

    def _floor(self, entry: MachineEntry) -> int:
        """The lowest priority allocated on the machine, cached at its revision (allocation
        changes always rewrite the machine's ledger, so the revision covers them)."""
        floors = self.sched._floors
        cached = floors.get(entry.id)
        if cached is not None and cached[0] == entry.mod_revision:
            return cached[1]
        lowest = min((a.priority for a in self.view.allocs_on(entry.id)), default=_NO_ALLOCS)
        floors[entry.id] = (entry.mod_revision, lowest)
        return lowest

    def _victims_on(self, machine: Machine):
        """(victims, free after evicting them) when evicting lower-priority allocations lets
        the task pass every filter on ``machine``; None otherwise."""
        spec, check = self.spec, self.sched.pipeline.check
        free = self.res.free(machine)
        here = self.placement.on_machine(machine.id)
        verdict = check(spec, machine, free, here)
        if verdict.ok:
            return [], free
        if verdict.unresolvable:
            return None
        candidates = [a for a in preemptible(self.view.allocs_on(machine.id), spec.priority, spec.id,
                                             self.evicted) if self._live(a)]
        if not candidates:
            return None
        victims = choose_victims(spec.request, free, candidates)
        if victims is None:
            return None
        for a in victims:
            free = free + a.resources
        return (victims, free) if check(spec, machine, free, here).ok else None

    def _live(self, alloc: Alloc) -> bool:
        """The alloc's task is placed or running in its job record (a replica may see a
        rival's eviction in the job record before the alloc's deletion)."""
        entry = self.view.job(alloc.job_id)
        tasks = entry.record.tasks if entry is not None else ""
        return alloc.task_index < len(tasks) and tasks[alloc.task_index] in "ar"
