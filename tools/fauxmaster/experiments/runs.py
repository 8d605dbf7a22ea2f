"""One fauxmaster run of an experiment and the figures the experiments compare.

``run_case`` replays a trace with a list of ``SchedulerConfig`` and an optional architecture
(``"monolithic"`` needs one scheduler with ``jobs="all"`` and the per-kind ``Path``s;
``"two-level"`` an ``OfferBroker``), then sorts the figures by job kind: waits (from the
replay's job journal), jobs left unscheduled (from the final cell), and per-scheduler
busyness and conflict fraction (aggregated over the schedulers of a kind as conflicts ÷
successful transactions; a resource-fit *stale retry* — a failed txn whose claims all still
fit, which Omega's fine-grained store would have accepted — is not a conflict).

``Bench``: where an experiment's runs get their trace (the given one, or seeded synthetic ones
at the ``Sizing``) and the ``Overrides`` applied to their schedulers.
"""

from __future__ import annotations

import copy

import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

from cellstate.codec.records import decode_alloc, decode_job_record
from omega.queue import check_order
from tools.fauxmaster.experiments.architectures import MultiPath, OfferBroker
from tools.fauxmaster.experiments.synthetic import SyntheticSpec, write_synthetic_trace
from tools.fauxmaster.metrics import SchedulerMetrics, WaitStats
from tools.fauxmaster.replay import ReplayConfig, ReplayResult, replay
from tools.fauxmaster.scheduler_process import SchedulerConfig
from tools.trace.format import read_trace

TXN_OPS = 4096  # big enough that a gang of up to 1000 tasks fits one transaction
BATCH_T_JOB, BATCH_T_TASK, T_TASK = 0.1, 0.005, 0.005  # Omega's modelled decision times


@dataclass(frozen=True, slots=True)
class KindFigures:
    """Figures of the jobs of one kind."""

    jobs: int
    wait_first: WaitStats
    wait_placed: WaitStats
    unscheduled: int


@dataclass
class RunFigures:
    """What an experiment reads from one run."""

    kinds: dict[str, KindFigures]
    schedulers: list[SchedulerMetrics]
    sim_time_s: float
    wall_time_s: float
    invariants_ok: bool
    stale: dict[str, int] = field(default_factory=dict)
    """Failed txns per scheduler that were stale retries (see ``omega.modes``: accounting)."""
    extra: dict[str, float] = field(default_factory=dict)

    def of(self, kind: str) -> KindFigures:
        return self.kinds.get(kind) or KindFigures(0, WaitStats.of([]), WaitStats.of([]), 0)

    def busyness(self, names: list[str] | None = None) -> float:
        """Mean busyness of the named schedulers (all if None), each at most 1 (the replay
        counts a decision still running when it stops only up to the stop)."""
        chosen = [s for s in self.schedulers if names is None or s.name in names]
        return sum(min(1.0, s.busyness) for s in chosen) / len(chosen) if chosen else 0.0

    def conflicts(self, names: list[str] | None = None) -> int:
        """Failed transactions that were real conflicts (not resource-fit stale retries)."""
        return sum(s.failed_transactions - self.stale.get(s.name, 0) for s in self._chosen(names))

    def conflict_fraction(self, names: list[str] | None = None) -> float:
        """Conflicts ÷ successful transactions, summed over the named schedulers (all if None)."""
        chosen = self._chosen(names)
        successful = sum(s.transactions - s.failed_transactions for s in chosen)
        return self.conflicts(names) / successful if successful > 0 else 0.0

    def _chosen(self, names: list[str] | None) -> list[SchedulerMetrics]:
        return [s for s in self.schedulers if names is None or s.name in names]


def run_case(trace, schedulers: list[SchedulerConfig], architecture: str = "shared-state",
             multipath: MultiPath | None = None, broker: OfferBroker | None = None,
             until: float | None = None, progress=None) -> RunFigures:
    """Replay ``trace`` with ``schedulers`` under ``architecture`` (see the module docstring);
    ``progress(now, until)`` as ``replay``'s."""
    journals, stale = [], {s.name: 0 for s in schedulers}

    def setup(sims, core) -> None:
        journals.append(sims[0].journal)
        for sim in sims:
            _count_stale(sim, stale)
        if architecture == "monolithic":
            if multipath is None or len(sims) != 1:
                raise ValueError("the monolithic architecture needs exactly one scheduler and a MultiPath")
            multipath.install(sims[0])
        elif architecture == "two-level":
            if broker is None:
                raise ValueError("the two-level architecture needs an OfferBroker")
            broker.install(sims)
        elif architecture != "shared-state":
            raise ValueError(f"unknown architecture {architecture!r}")

    # skip_nothing_fits=False: the experiments keep every fruitless retry (and its modelled
    # decision time), as the figures in docs/EXPERIMENTS.md were measured.
    config = ReplayConfig(schedulers=list(schedulers), until=until, max_txn_ops=TXN_OPS,
                          sample_every_s=1e9, check=True, skip_nothing_fits=False)
    result = replay(trace, config, progress, setup=setup)
    extra = {}
    if broker is not None:
        extra = {"offers": broker.stats.offers, "empty_offers": broker.stats.empty,
                 "mean_offer_machines": broker.stats.mean_size}
    return RunFigures(_kind_figures(result, journals[0]), result.schedulers, result.sim_time_s,
                      result.wall_time_s, bool(result.check and result.check["ok"]), stale, extra)


def _count_stale(sim, stale: dict[str, int]) -> None:
    """Count the stale retries of ``sim``'s attempts (the replay's tally counts them as failed)."""
    report = sim.placer.on_attempt

    def note(attempt) -> None:
        stale[sim.name] += attempt.stale_retries
        if report is not None:
            report(attempt)
    sim.placer.on_attempt = note


def _kind_figures(result: ReplayResult, journal) -> dict[str, KindFigures]:
    kinds: dict[str, str] = {}
    unscheduled: dict[str, int] = {}
    placed: dict[str, list] = {}  # job -> its allocs (placements write no record: JobRecord.with_allocs)
    for kv in result.store.range(result.keys.kind_prefix("allocs")).kvs:
        alloc = decode_alloc(kv.key, kv.value)
        placed.setdefault(alloc.job_id, []).append(alloc)
    for kv in result.store.range(result.keys.kind_prefix("jobs")).kvs:
        record = decode_job_record(kv.key, kv.value)
        record = record.with_allocs(placed.get(record.id, ()))
        kind = str(record.job.kind)
        kinds[record.id] = kind
        unscheduled[kind] = unscheduled.get(kind, 0) + bool(record.pending_tasks())
    out = {}
    for kind in sorted(set(kinds.values())):
        first = [t - journal.submitted[j] for j, t in journal.first_taken.items() if kinds.get(j) == kind]
        placed = [t - journal.submitted[j] for j, t in journal.fully_placed.items() if kinds.get(j) == kind]
        jobs = sum(1 for k in kinds.values() if k == kind)
        out[kind] = KindFigures(jobs, WaitStats.of(first), WaitStats.of(placed), unscheduled.get(kind, 0))
    return out


def pair(conflict: str = "resource-fit", commit: str = "incremental", service_t_job: float = 0.1,
         batch_t_job: float = BATCH_T_JOB) -> list[SchedulerConfig]:
    """One batch and one service scheduler with the given modes and decision times."""
    return [SchedulerConfig("batch", "batch", conflict, commit, seed=1, t_job=batch_t_job, t_task=BATCH_T_TASK),
            SchedulerConfig("service", "service", conflict, commit, seed=2, t_job=service_t_job, t_task=T_TASK)]


@dataclass(frozen=True)
class Sizing:
    """How big the runs are: the synthetic cell/workload and the swept values."""

    spec: SyntheticSpec
    service_t_job: float
    tjob_sweep: tuple[float, ...]
    load_factors: tuple[float, ...]
    scaling_batch_t_job: float
    scaling_duration_s: float
    scaling_task_median_s: float
    modes_batch_factor: float
    """Batch load multiplier of the conflict/commit mode runs: a nearly full cell, so that
    resource-fit detection meets real conflicts, not only stale retries."""


@dataclass(frozen=True)
class Overrides:
    """Choices applied to every scheduler of an experiment: the kind of its batch schedulers
    (``batch_kind``: any ``schedulers.chains.KINDS`` kind, e.g. borg or solver) and the queue
    order (``order``: fair or drf, with ``drf_weights``)."""

    batch_kind: str = "batch"
    order: str = "fair"
    drf_weights: dict[str, float] = field(default_factory=dict)
    seed: int = 0
    """Added to every scheduler's seed and to the synthetic workload's (``omega experiment --seed``;
    0: the experiments' own seeds)."""

    def __post_init__(self):
        from schedulers.chains import KINDS

        if self.batch_kind not in KINDS:
            raise ValueError(f"batch kind must be one of {sorted(KINDS)}, got {self.batch_kind!r}")
        object.__setattr__(self, "drf_weights", check_order(self.order, self.drf_weights))

    def apply(self, config: SchedulerConfig) -> SchedulerConfig:
        """``config`` with these choices (its kind replaced only if it is ``batch``)."""
        kind = self.batch_kind if config.kind == "batch" else config.kind
        return replace(config, kind=kind, order=self.order, drf_weights=dict(self.drf_weights),
                       seed=config.seed + self.seed)

    def describe(self) -> str:
        weights = f" {self.drf_weights}" if self.drf_weights else ""
        seed = f", seeds + {self.seed}" if self.seed else ""
        return f"batch schedulers of kind {self.batch_kind}, queue order {self.order}{weights}{seed}"


def _check_spans_time(path: str) -> None:
    """ValueError unless some event of the trace at ``path`` comes after t = 0: an experiment
    replays the trace's span, so a trace of the initial state only (e.g. a ``--limit`` import
    cut inside Google-2011's t = 0 rows) would compare runs in which nothing was decided."""
    _, events = read_trace(path)
    with events:
        count = 0
        for event in events:
            if event.t > 0:
                return
            count += 1
    raise ValueError(f"trace {path}: all {count} events are at t = 0, so an experiment would replay no time; "
                     "give a trace that runs on (an import of Google-2011 part 0 reaches t > 0 after its "
                     "277,321 rows at t = 0)")


class Bench:
    """Where runs get their trace: ``trace`` if given, else synthetic ones (cached in a temp dir);
    ``overrides`` apply to every scheduler the experiment runs (``run``)."""

    def __init__(self, sizing: Sizing, trace: str | None = None, workdir: str | None = None,
                 overrides: Overrides = Overrides(), progress_for=None):
        self.sizing = sizing
        self.progress_for = progress_for
        """``progress_for(label)`` → a ``replay`` progress callback for each run (None: none)."""
        self.runs = 0
        self.given = trace
        if trace is not None:
            _check_spans_time(trace)
        self.overrides = overrides
        self._dir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="omega-experiment-"))
        self._cache: dict[SyntheticSpec, str] = {}

    def trace(self, spec: SyntheticSpec | None = None) -> str:
        """The given trace, or the synthetic trace of ``spec`` (default: the sizing's)."""
        if self.given:
            return self.given
        spec = spec or self.sizing.spec
        if self.overrides.seed:
            spec = replace(spec, seed=spec.seed + self.overrides.seed)
        if spec not in self._cache:
            path = self._dir / f"synthetic-{len(self._cache)}.omt"
            self._cache[spec] = str(write_synthetic_trace(path, spec))
        return self._cache[spec]

    def describe(self, spec: SyntheticSpec | None = None) -> str:
        where = f"trace {self.given}" if self.given else f"synthetic: {(spec or self.sizing.spec).describe()}"
        return where if self.overrides == Overrides() else f"{where}; {self.overrides.describe()}"

    def run(self, trace, schedulers: list[SchedulerConfig], architecture: str = "shared-state",
            multipath: MultiPath | None = None, **kwargs) -> RunFigures:
        """``run_case`` with the overrides applied to the schedulers (and the monolithic batch path)."""
        if multipath is not None and self.overrides.batch_kind != "batch":
            multipath = multipath.with_kind("batch", self.overrides.batch_kind)
        if multipath is not None and self.overrides.seed:
            multipath = copy.copy(multipath)
            multipath.seed += self.overrides.seed
        self.runs += 1
        if self.progress_for is not None and "progress" not in kwargs:
            kwargs["progress"] = self.progress_for(f"run {self.runs} ({architecture})")
        return run_case(trace, [self.overrides.apply(s) for s in schedulers], architecture, multipath, **kwargs)
