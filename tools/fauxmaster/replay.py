"""``replay(trace_path, config) -> ReplayResult``: the fauxmaster.

Reads an omega trace, builds the cell in a ``MemoryStore`` (default, leases on virtual time)
or a real etcd (``store="etcd"``), writes the machines present at t = 0 (and, with
``initial_state="recorded"``, the default, the tasks the trace records running at t = 0
where they fit: ``tools.fauxmaster.initial_state``), then runs the
configured schedulers (``SimScheduler``: real scheduler classes, real optimistic placer and
committer, one watch-fed replica each) on an ``EventCore`` while a feeder applies the
trace's events at their times. The replay stops at ``until`` (virtual seconds) or, by
default, at the time of the trace's last event. Same trace, config and seeds → the same
result (with ``decision_time="modelled"``; measured times vary with the host).
"""

from __future__ import annotations

import gc
import math
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Mapping

from cellstate.check import check_cell
from cellstate.keys import CellKeys
from cellstate.memory.store import MemoryStore
from omega.gangs import cell_room
from tools.fauxmaster.cell import JobLog, SimCell
from tools.fauxmaster.clock import EventCore, VirtualClock
from tools.fauxmaster.fidelity import Fidelity, compute_fidelity
from tools.fauxmaster.initial_state import INITIAL_STATES
from tools.fauxmaster.job_records import job_rows
from tools.fauxmaster.metrics import (
    JobJournal, SchedulerMetrics, UtilizationSample, WaitStats, busyness, conflict_fraction, conflicts_over_time,
    sample_utilization, slowdown, wait_cdf,
)
from tools.fauxmaster.scheduler_process import (
    DECISION_COMMITS, DECISION_TIME_MODES, UNPLACED_CHARGES, SchedulerConfig, SimScheduler,
)
from tools.fauxmaster.trace_feed import TraceFeed

DEFAULT_SCHEDULERS = (SchedulerConfig("batch", "batch"), SchedulerConfig("service", "service"))
STORES = ("memory", "etcd")


@dataclass
class ReplayConfig:
    """How to replay. ``schedulers`` also accepts dicts of ``SchedulerConfig`` fields."""

    schedulers: list[SchedulerConfig] = field(default_factory=lambda: list(DEFAULT_SCHEDULERS))
    store: str = "memory"
    endpoints: list[str] = field(default_factory=list)
    cell: str = "fauxmaster"
    decision_time: str = "modelled"
    decision_commits: str = "as-decided"
    """A modelled decision's txns: "as-decided" or "at-end" (``scheduler_process.DECISION_COMMITS``)."""
    unplaced_charge: str = "every"
    """A modelled decision's ``t_task`` for the tasks it left unplaced: "every" one (the paper's
    model) or "once" (``scheduler_process.UNPLACED_CHARGES``)."""
    time_scale: float = 1.0
    until: float | None = None
    sample_every_s: float = 60.0
    check: bool = True
    max_txn_ops: int = 128
    submit_latency_s: float | None = None
    """Seconds from a job's submission after t = 0 to the schedulers seeing it (its record
    reaching the store; ``SimCell.submit_latency``); waits and delays count from the
    submission. None: the trace header's (``TraceHeader.submit_latency_s``: a model constant
    of the source cell, Google-2011's calibrated on part 0, docs/EXPERIMENTS.md; else 0); the
    result's config holds the value used."""
    store_auth: dict[str, Any] = field(default_factory=dict, repr=False)
    """``store="etcd"``: the ``EtcdStore`` TLS and login keywords (ca_cert, cert, key, user,
    password); never written to a result (``asdict`` below leaves it out)."""
    job_records: bool = False
    """Keep per-job records (``ReplayResult.jobs``: ``tools.fauxmaster.job_records``)."""
    store_history: bool = False
    """Memory store only: keep every key's versions and the revision log (``MemoryStore``'s
    default); a replay needs neither, so by default the store keeps only the current state."""
    skip_nothing_fits: bool = True
    """Batch and service schedulers leave out jobs whose last decision found no machine until
    room may have appeared for them (``schedulers.fit_memo``): only decisions that would
    have found nothing are skipped. False: every such job is decided again whenever the cell
    frees room anywhere."""
    initial_state: str = "recorded"
    """"recorded": start from the trace's t = 0 ``task_placed`` events (where they fit), as
    Omega's simulator and Borg's Fauxmaster start from the recorded cell; "scheduled": ignore
    them and let the schedulers place every task submitted at t = 0. Default "recorded": it
    replays the cell the trace describes, and a trace without such events is the same both ways."""

    def __post_init__(self):
        self.schedulers = [s if isinstance(s, SchedulerConfig) else _scheduler_from_dict(s) for s in self.schedulers]
        if not self.schedulers:
            raise ValueError("replay needs at least one scheduler")
        names = [s.name for s in self.schedulers]
        if len(set(names)) != len(names):
            raise ValueError(f"scheduler names must be unique, got {names}")
        if self.initial_state not in INITIAL_STATES:
            raise ValueError(f"initial_state must be one of {INITIAL_STATES}, got {self.initial_state!r}")
        if self.store not in STORES:
            raise ValueError(f"store must be one of {STORES}, got {self.store!r}")
        if self.store == "etcd" and not self.endpoints:
            raise ValueError('store="etcd" needs endpoints (["host:port", …])')
        if self.decision_time not in DECISION_TIME_MODES:
            raise ValueError(f"decision_time must be one of {DECISION_TIME_MODES}, got {self.decision_time!r}")
        if self.decision_commits not in DECISION_COMMITS:
            raise ValueError(f"decision_commits must be one of {DECISION_COMMITS}, got {self.decision_commits!r}")
        if self.unplaced_charge not in UNPLACED_CHARGES:
            raise ValueError(f"unplaced_charge must be one of {UNPLACED_CHARGES}, got {self.unplaced_charge!r}")
        if self.until is not None and not 0 < self.until < math.inf:
            raise ValueError(f"until must be a finite number > 0 of virtual seconds, got {self.until!r}")
        if type(self.max_txn_ops) is not int or self.max_txn_ops < 4:
            raise ValueError(f"max_txn_ops must be an int >= 4 (one claim per txn), got {self.max_txn_ops!r}")
        if self.submit_latency_s is not None and not 0 <= self.submit_latency_s < float("inf"):
            raise ValueError(f"submit_latency_s must be a finite number >= 0, got {self.submit_latency_s!r}")
        if not (0 < self.sample_every_s < math.inf and 0 < self.time_scale < math.inf):
            raise ValueError(f"sample_every_s and time_scale must be finite numbers > 0, got {self.sample_every_s!r}, "
                             f"{self.time_scale!r}")


def decision_model(config: Mapping[str, Any]) -> str:
    """The decision-time model of a replay's config (``ReplayConfig`` as a dict, as in a result's
    JSON), in words: what the report and the summary state."""
    latency = config.get("submit_latency_s") or 0.0
    late = f"; submissions reach the schedulers {latency:g} s late" if latency else ""
    if config.get("decision_time") == "measured":
        return f"measured wall time x {config.get('time_scale', 1.0):g}" + late
    times = ", ".join(f"{s['name']} {s['t_job']:g} + {s['t_task']:g} s" for s in config.get("schedulers", ()))
    commits = config.get("decision_commits", "at-end")
    charge = config.get("unplaced_charge", "every")
    return (f"modelled t_job + t_task x tasks ({times}); txns "
            + ("as the decision reaches them" if commits == "as-decided" else "after the whole decision")
            + "; unplaced tasks charged " + ("every one" if charge == "every" else "once per decision")
            + late)


def _scheduler_from_dict(d: Mapping[str, Any]) -> SchedulerConfig:
    if not isinstance(d, Mapping):
        raise ValueError(f"a scheduler config must be a SchedulerConfig or a mapping, got {d!r}")
    known = set(SchedulerConfig.__dataclass_fields__)
    unknown = sorted(set(d) - known)
    if unknown:
        raise ValueError(f"scheduler config {dict(d)!r}: unknown keys {unknown}; known: {sorted(known)}")
    return SchedulerConfig(**d)


@dataclass
class ReplayResult:
    """Figures of one replay (see ``tools.fauxmaster.metrics``); ``store``/``keys`` are the
    final cell (not serialized)."""

    trace: str
    sim_time_s: float
    wall_time_s: float
    events: int
    schedulers: list[SchedulerMetrics]
    wait_to_first_attempt: WaitStats
    wait_to_placed: WaitStats
    jobs_submitted: int
    jobs_unscheduled: int
    cell: dict[str, Any]
    utilization: list[UtilizationSample]
    check: dict[str, Any] | None
    config: dict[str, Any]
    waits_first: list[float] = field(default_factory=list, repr=False)
    waits_placed: list[float] = field(default_factory=list, repr=False)
    store: Any = field(default=None, repr=False, compare=False)
    keys: CellKeys | None = field(default=None, repr=False, compare=False)
    fidelity: Fidelity | None = None
    """Against the trace's ground truth (``tools.fauxmaster.fidelity``), when it has one."""
    utilization_interval_s: float = 0.0
    """The interval of the utilization samples at the end (``MAX_SAMPLES``: it grows with the span)."""
    losses: dict[str, int] = field(default_factory=dict)
    """What the replay did not apply as the trace has it, every count zero or not (``LOSSES``)."""
    wait_cdf: dict[str, Any] = field(default_factory=dict)
    """The wait CDFs over every job a scheduler had to place, the never-placed counted
    (``tools.fauxmaster.metrics.wait_cdf``)."""
    conflicts_over_time: dict[str, Any] = field(default_factory=dict)
    """Per scheduler, cumulative transaction counts at the utilization sample times and the conflict
    fraction in each window (``tools.fauxmaster.metrics.conflicts_over_time``)."""
    jobs: list[dict[str, Any]] | None = field(default=None, repr=False, compare=False)
    """Per-job records (``ReplayConfig.job_records``; not in ``to_dict``: ``--jobs-out`` writes them)."""
    slowdown: dict[str, Any] = field(default_factory=dict)
    """Bounded slowdown (mean, median, p90) and makespan of the jobs with a run time
    (``tools.fauxmaster.metrics.slowdown``)."""
    capacity_model: str = field(default="", repr=False, compare=False)
    """The trace header's statement of the cell (not in ``to_dict``: the figures of a trace
    without ground truth stay as they were; the fidelity section carries it)."""

    @property
    def speedup(self) -> float:
        """Virtual seconds per wall second."""
        return self.sim_time_s / self.wall_time_s if self.wall_time_s > 0 else 0.0

    def to_dict(self, include_wall: bool = True) -> dict[str, Any]:
        """Plain data (without the raw wait lists); ``include_wall=False`` drops the host-dependent
        wall-clock figures, so two replays with the same seeds compare equal."""
        out = {name: getattr(self, name) for name in (
            "trace", "sim_time_s", "events", "jobs_submitted", "jobs_unscheduled", "cell", "check", "config")}
        out["schedulers"] = [asdict(s) for s in self.schedulers]
        out["wait_to_first_attempt"] = asdict(self.wait_to_first_attempt)
        out["wait_to_placed"] = asdict(self.wait_to_placed)
        out["utilization"] = [u.to_dict() for u in self.utilization]
        out["losses"] = dict(self.losses)
        out["utilization_interval_s"] = self.utilization_interval_s
        out["wait_cdf"] = self.wait_cdf
        out["conflicts_over_time"] = self.conflicts_over_time
        out["slowdown"] = self.slowdown
        if self.fidelity is not None:  # a trace without ground truth: the same figures as before
            out["fidelity"] = self.fidelity.to_dict()
        if include_wall:
            out["wall_time_s"] = self.wall_time_s
            out["speedup"] = self.speedup
        else:
            for s in out["schedulers"]:
                s.pop("decide_wall_s")
        return out

    def to_json(self, include_wall: bool = True, indent: int | None = 2) -> str:
        import json

        return json.dumps(self.to_dict(include_wall), indent=indent, sort_keys=True)


def replay(trace_path, config: ReplayConfig | Mapping[str, Any] | None = None,
           progress: Callable[[float, float | None], None] | None = None,
           setup: Callable[[list[SimScheduler], EventCore], None] | None = None) -> ReplayResult:
    """Replay the trace at ``trace_path`` (see the module docstring). ``progress(now, until)`` is
    called every few thousand events. ``config`` may be a ReplayConfig or a dict of its fields.
    ``setup(schedulers, core)``, if given, is called once the schedulers are built, before
    virtual time starts (experiments use it to change how they decide, e.g. offers)."""
    config = _config_of(config)
    started = time.perf_counter()
    core = EventCore()
    store, owned = _open_store(config, core)
    keys = CellKeys(cell=config.cell)
    try:
        with _young_collections_only():
            return _run(trace_path, config, core, store, keys, started, progress, setup)
    finally:
        if owned and config.store == "etcd":
            store.close()


GC_THRESHOLDS = (100_000, 50, 1000)


@contextmanager
def _young_collections_only():
    """Run the replay with the cyclic collector on young objects only: rarer collections
    (``GC_THRESHOLDS``), and what survives one is frozen (``gc.freeze``), so the cell's
    hundreds of thousands of long-lived, acyclic records are not scanned again and again
    (a tenth of a replay's CPU). Young cycles are still collected; the previous thresholds
    are restored and the frozen objects handed back to the collector afterwards."""
    def freeze_survivors(phase: str, info: dict) -> None:
        if phase == "stop" and info["generation"] == 0:
            gc.freeze()

    before = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLDS)
    gc.callbacks.append(freeze_survivors)
    try:
        yield
    finally:
        gc.callbacks.remove(freeze_survivors)
        gc.unfreeze()
        gc.set_threshold(*before)


def _config_of(config) -> ReplayConfig:
    if config is None:
        return ReplayConfig()
    if isinstance(config, ReplayConfig):
        return config
    if isinstance(config, Mapping):
        return ReplayConfig(**config)
    raise TypeError(f"config must be a ReplayConfig or a mapping, got {type(config).__name__}")


def _open_store(config: ReplayConfig, core: EventCore):
    if config.store == "memory":
        return MemoryStore(clock=lambda: core.now, max_txn_ops=config.max_txn_ops,
                           history=config.store_history), True
    from cellstate.etcd.store import EtcdStore

    return EtcdStore(list(config.endpoints), max_txn_ops=config.max_txn_ops, **config.store_auth), True


def _run(trace_path, config: ReplayConfig, core: EventCore, store, keys: CellKeys, started: float,
         progress, setup=None) -> ReplayResult:
    if store.range(keys.prefix).kvs:
        raise ValueError(f"cell {keys.cell!r} (prefix {keys.prefix}) is not empty; replay into a new cell")
    clock = VirtualClock(core)
    schedulers: list[SimScheduler] = []

    def wake() -> None:
        for s in schedulers:
            s.process.wake()

    cell = SimCell(store, keys, core, wake=wake)
    journal = JobJournal(submitted=cell.submitted_at, runs=cell.run_s)
    if config.job_records:
        cell.job_log, journal.taken_by = JobLog(), {}
    with TraceFeed(trace_path, cell, core, config.until, config.initial_state) as feed:
        truth, capacity_model = feed._reader.truth, feed.header.capacity_model
        if config.submit_latency_s is None:
            config = replace(config, submit_latency_s=feed.header.submit_latency_s)
        cell.submit_latency = config.submit_latency_s
        if truth is not None and truth.unit == "task":
            cell.placed_log = {}
        feed.write_initial_machines()
        for sc in config.schedulers:
            peers = [o.name for o in config.schedulers if (o.jobs or o.kind) == (sc.jobs or sc.kind)]
            schedulers.append(SimScheduler(sc, store, core, clock, cell, peers, config.decision_time,
                                           config.time_scale, journal, config.skip_nothing_fits,
                                           config.decision_commits, config.unplaced_charge))
        if setup is not None:
            setup(schedulers, core)
        feed.start()
        samples: list[UtilizationSample] = []
        counts: list[tuple[float, tuple]] = []
        interval = _sample_every(core, cell, config.sample_every_s, samples, config.until, schedulers, counts)
        # progress against the end: ``until``, else the ground truth's horizon (the trace's end)
        core.run(config.until, _progress_hook(core, progress,
                                              config.until or (truth.horizon if truth is not None else None)))
        sim_time = core.now
        events = feed.events
    samples.append(sample_utilization(sim_time, cell.usage))
    counts.append((sim_time, _txn_counts(schedulers)))
    result = _result(trace_path, config, store, keys, schedulers, cell, journal, samples, sim_time, events,
                     core, started)
    result.conflicts_over_time = conflicts_over_time([s.name for s in schedulers], counts)
    result.capacity_model = capacity_model
    result.utilization_interval_s = interval[0]
    if config.job_records:
        result.jobs = job_rows(journal, cell.job_log, cell.initial_jobs)
    if truth is not None:  # after the replay: its cost is not in the replay's wall time
        counters = cell.counters
        not_placed = sum(counters.initial_not_placed.values())
        if config.initial_state == "scheduled":  # every recorded t = 0 placement left to the schedulers
            not_placed = counters.skipped.get("task_placed (initial_state=scheduled)", 0)
        result.fidelity = compute_fidelity(truth, sim_time, cell.submitted_at, cell.placed_log,
                                           journal.fully_placed, counters.initial_placed, not_placed, samples,
                                           capacity_model)
    return result


MAX_SAMPLES = 2_000
"""Utilization samples are bounded by the span, not one per ``sample_every_s`` whatever the length:
every 60 virtual s, a 149-day replay took 214,560 samples (102 s of its wall time and 36 MB of JSON).
``_sample_every``: the interval starts at max(sample_every_s, until / MAX_SAMPLES) when ``until`` is
given, and whenever 2 × MAX_SAMPLES samples are held (a replay to the trace's end, whose span is not
known in advance), every other one is dropped and the interval doubles: at most 2 × MAX_SAMPLES samples
(plus the final one), evenly spaced. A rule of the count, not fitted to any trace."""


def _sample_every(core: EventCore, cell: SimCell, every: float, samples: list[UtilizationSample],
                  until: float | None = None, schedulers: list[SimScheduler] = (),
                  counts: list[tuple[float, tuple]] | None = None) -> list[float]:
    """Sample utilization into ``samples`` from now, by the ``MAX_SAMPLES`` rule, and at the same times the
    ``schedulers``' cumulative transaction counts into ``counts`` (``_txn_counts``; thinned alike); the
    interval in use (a one-item list, updated as it doubles)."""
    interval = [max(every, until / MAX_SAMPLES) if until is not None else every]
    if counts is None:
        counts = []

    def sample() -> None:
        samples.append(sample_utilization(core.now, cell.usage))
        counts.append((core.now, _txn_counts(schedulers)))
        if len(samples) < 2 * MAX_SAMPLES:
            core.after(interval[0], sample)
            return
        del samples[1::2]  # keep t0, t0 + 2 i, ...: evenly spaced at the doubled interval
        del counts[1::2]  # cumulative counts: the windows merge, nothing is lost
        interval[0] *= 2
        core.at(samples[-1].t + interval[0], sample)

    core.at(core.now, sample)
    return interval


def _txn_counts(schedulers: list[SimScheduler]) -> tuple:
    """Each scheduler's cumulative (transactions, failed, conflict) transactions now."""
    return tuple((t.transactions, t.failed_transactions, t.conflict_transactions)
                 for t in (s.tally for s in schedulers))


def _progress_hook(core: EventCore, progress, until):
    if progress is None:
        return None
    step = [0]

    def hook(now: float) -> None:
        step[0] += 1
        if step[0] % 2000 == 0:
            progress(now, until)
    return hook


LOSSES = {
    "durations_ignored": "jobs whose duration_s the replay ignores (not batch: their tasks end only by the "
                         "trace's task_end / job_kill)",
    "gang_refusals": "refusals of a job the cell can never commit as it stands (PlanTooLarge: a gang of more "
                     "tasks than one txn holds, or a plan over the request size limit), all schedulers",
    "jobs_refused_at_end": "jobs still held out as refused when the replay stopped (RefusedJobs)",
    "events_skipped": "trace events skipped (CellCounters.skipped, by reason in cell.skipped)",
    "initial_not_placed": "recorded t = 0 placements that did not fit, left pending for the schedulers",
    "gangs_pending_at_end": "gangs (all-or-nothing jobs) not placed when the replay stopped (also among the "
                            "unscheduled; their records say why)",
    "gangs_never_fit": "of those, gangs wider than the cell: its up machines would not hold them even empty",
}
"""The replay's losses (``ReplayResult.losses``), in the order shown: name -> what it counts."""


def replay_losses(schedulers, counters, gangs: tuple[int, int] = (0, 0)) -> dict[str, int]:
    """Every ``LOSSES`` count of a finished replay (the schedulers' tallies and refusals, the cell's
    counters, and ``gangs``: the gangs pending at the end and how many of them never fit the cell)."""
    return {
        "durations_ignored": counters.durations_ignored,
        "gang_refusals": sum(s.tally.too_large for s in schedulers),
        "jobs_refused_at_end": sum(len(s.refused) for s in schedulers),
        "events_skipped": sum(counters.skipped.values()),
        "initial_not_placed": sum(counters.initial_not_placed.values()),
        "gangs_pending_at_end": gangs[0],
        "gangs_never_fit": gangs[1],
    }


def pending_gangs(view, pending: set[str]) -> tuple[int, int]:
    """(gangs among the ``pending`` jobs, how many of them the view's up machines would not hold
    even empty: ``omega.gangs.cell_room``)."""
    gangs = never = 0
    for job_id in sorted(pending):
        entry = view.job(job_id)
        if entry is None or not entry.record.job.gang:
            continue
        gangs += 1
        tasks = len(entry.record.pending_tasks())
        never += cell_room(view, entry.record.job.request, tasks)[2] < tasks
    return gangs, never


def _result(trace_path, config, store, keys, schedulers, cell, journal, samples, sim_time, events, core,
            started) -> ReplayResult:
    first = schedulers[0]
    first.catch_up()
    pending = {entry.id for entry in first.view.pending_jobs()}
    gangs = pending_gangs(first.view, pending)
    for s in schedulers:
        s.view.close()
    report = check_cell(store, keys).to_dict() if config.check else None
    metrics = [_scheduler_metrics(s, sim_time) for s in schedulers]
    waits_first, waits_placed = journal.waits_to_first_attempt(), journal.waits_to_placed()
    plain_config = asdict(config)
    plain_config.pop("store_auth", None)  # credentials stay out of results
    return ReplayResult(
        trace=str(trace_path), sim_time_s=sim_time, wall_time_s=time.perf_counter() - started,
        events=events, schedulers=metrics, wait_to_first_attempt=WaitStats.of(waits_first),
        wait_to_placed=WaitStats.of(waits_placed), jobs_submitted=cell.counters.jobs_submitted,
        jobs_unscheduled=len(pending), cell=asdict(cell.counters), utilization=samples, check=report,
        config=plain_config, waits_first=waits_first, waits_placed=waits_placed, store=store, keys=keys,
        losses=replay_losses(schedulers, cell.counters, gangs), wait_cdf=wait_cdf(journal, pending, cell.initial_jobs),
        slowdown=slowdown(journal, sim_time, cell.initial_jobs))


def _scheduler_metrics(s: SimScheduler, sim_time: float) -> SchedulerMetrics:
    t, c = s.tally, s.config
    return SchedulerMetrics(
        name=c.name, kind=c.kind, conflict_mode=c.conflict_mode, commit_mode=c.commit_mode, busy_s=s.busy_s,
        busyness=busyness(s.busy_s, sim_time), attempts=t.attempts, transactions=t.transactions,
        failed_transactions=t.failed_transactions, conflict_transactions=t.conflict_transactions,
        conflict_fraction=conflict_fraction(t.transactions, t.failed_transactions, t.conflict_transactions),
        jobs_taken=t.jobs_taken,
        tasks_placed=t.tasks_placed, gave_up=t.gave_up, decide_wall_s=t.decide_wall_s)
