"""What the conflict monitor shows, computed from a replica of the cell: ``MonitorFrame``.

A frame is plain data (``to_dict`` makes it JSON-ready). It is built while the caller holds
the replica still (``ReplicaThread.locked()``), from the schedulers' ``stats/`` keys (a key
exists while its owner's lease lives, so every row is a live scheduler), the UP machines'
ledgers and the pending-job index.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict, deque
from dataclasses import asdict, dataclass

from cellstate.codec.fields import CodecError
from cellstate.devices import MILLI, device_count, device_free
from cellstate.model import JobKind, MachineState
from cellstate.replica.watched import Replica
from cellstate.resources import CORE_NAMES
from cellstate.codec.stats import decode_stats
from cellstate.scheduler_stats import SchedulerStats

HOT_ROWS = 10
CONFLICT_ROWS = 20
WINDOWS_S = (10.0, 60.0)
TREND_STEP_S = 10.0
TREND_STEPS = 6
HISTORY_S = WINDOWS_S[-1] + 2 * TREND_STEP_S  # samples older than this (behind the newest) are dropped


@dataclass(frozen=True, slots=True)
class WindowRate:
    """Commits and conflicts of one scheduler over its last ``seconds`` (the window, or less
    when the monitor has not watched it that long), from the counters in its stats."""

    seconds: float
    commits: int
    conflicts: int

    @property
    def fraction(self) -> float | None:
        """Conflicts per commit in the window; ``inf`` for conflicts without a commit, None when idle."""
        if self.commits:
            return self.conflicts / self.commits
        return math.inf if self.conflicts else None


@dataclass(frozen=True, slots=True)
class SchedulerRow:
    """One live scheduler, from its stats key."""

    name: str
    kind: str
    alive: bool
    host: str
    pid: int
    updated_at: float
    jobs_per_s: float
    placements_per_s: float
    txns: int
    commits: int
    conflicts: int
    conflict_fraction: float
    retries: int
    busyness: float
    decision_ms_p50: float
    decision_ms_p99: float
    stale_retries: int = 0
    """Failed txns that were not conflicts (resource-fit re-checks that still fit)."""
    quarantined: int = 0
    """Keys the scheduler's view holds quarantined (bad values it leaves out of decisions)."""
    job_conflicts: int = 0
    """Of ``conflicts``, those caused by the job record alone (no machine contended)."""
    recent: WindowRate | None = None
    """The last ``WINDOWS_S[0]`` seconds (None until the monitor has two samples of the scheduler)."""
    minute: WindowRate | None = None
    """The last ``WINDOWS_S[1]`` seconds, likewise."""
    trend: tuple[WindowRate | None, ...] = ()
    """``TREND_STEPS`` consecutive ``TREND_STEP_S`` windows, oldest first, ending at the scheduler's
    last sample (None: before the monitor's first sample of it)."""


class ConflictHistory:
    """The stats samples (``updated_at``, commits, conflicts) the monitor has seen of each live
    scheduler, for windowed conflict fractions and their trend. Times are the scheduler's own
    stamps, so windows end at its last publication (no clock skew between hosts). A scheduler
    whose counters go down (restarted under the same name) starts a new history."""

    def __init__(self, keep_s: float = HISTORY_S):
        self.keep_s = keep_s
        self._samples: dict[str, deque[tuple[float, int, int]]] = {}

    def observe(self, stats: list[SchedulerStats]) -> None:
        """Add each scheduler's sample (once per ``updated_at``); forget schedulers not in ``stats``."""
        live = set()
        for s in stats:
            live.add(s.name)
            samples = self._samples.setdefault(s.name, deque())
            if samples:
                at, commits, conflicts = samples[-1]
                if s.updated_at <= at:
                    continue
                if s.commits < commits or s.conflicts < conflicts:
                    samples.clear()
            samples.append((s.updated_at, s.commits, s.conflicts))
            while samples[0][0] < s.updated_at - self.keep_s:
                samples.popleft()
        for name in set(self._samples) - live:
            del self._samples[name]

    def window(self, name: str, seconds: float) -> WindowRate | None:
        """The scheduler's last ``seconds`` (or as much of them as was seen); None with < 2 samples."""
        samples = self._samples.get(name)
        if not samples or len(samples) < 2:
            return None
        end = samples[-1]
        return self._between(samples, end[0] - seconds, end)

    def trend(self, name: str, step: float = TREND_STEP_S, steps: int = TREND_STEPS) -> tuple[WindowRate | None, ...]:
        """``steps`` consecutive windows of ``step`` seconds ending at the last sample, oldest
        first; a window that starts before the first sample is None."""
        samples = self._samples.get(name)
        if not samples:
            return ()
        end_at = samples[-1][0]
        out = []
        for i in range(steps, 0, -1):
            start_at, stop_at = end_at - i * step, end_at - (i - 1) * step
            if start_at < samples[0][0]:
                out.append(None)
                continue
            out.append(self._between(samples, start_at, _at(samples, stop_at)))
        return tuple(out)

    @staticmethod
    def _between(samples, start_at: float, end: tuple[float, int, int]) -> WindowRate:
        base = _at(samples, start_at) if start_at >= samples[0][0] else samples[0]
        return WindowRate(end[0] - base[0], end[1] - base[1], end[2] - base[2])


def _at(samples, at: float) -> tuple[float, int, int]:
    """The last sample at or before ``at`` (the counters then); the first one if none is."""
    found = samples[0]
    for sample in samples:
        if sample[0] > at:
            break
        found = sample
    return found


@dataclass(frozen=True, slots=True)
class ResourceUse:
    """Sum allocated and sum capacity of one resource over the UP machines."""

    name: str
    allocated: int
    capacity: int

    @property
    def fraction(self) -> float:
        return self.allocated / self.capacity if self.capacity else 0.0


@dataclass(frozen=True, slots=True)
class GpuUse:
    """The GPU devices of the UP machines that have some (``cellstate.devices``): how much of
    them is allocated, and how the idle rest lies. ``partial_idle`` is the idle milli on
    devices partly allocated: only shares can use it (a whole-GPU task cannot), the
    fragmentation a cell of shares builds up."""

    machines: int
    devices: int
    allocated: int
    """Milli allocated over all devices."""
    capacity: int
    idle_devices: int
    """Devices with nothing allocated."""
    partial_devices: int
    """Devices partly allocated (some milli free, some not)."""
    partial_idle: int
    """Free milli on the partly allocated devices."""

    @property
    def fraction(self) -> float:
        return self.allocated / self.capacity if self.capacity else 0.0

    @property
    def partial_fraction(self) -> float:
        """The share of the idle GPU that lies on partly allocated devices (0 when none is idle)."""
        idle = self.capacity - self.allocated
        return self.partial_idle / idle if idle > 0 else 0.0


@dataclass(frozen=True, slots=True)
class PendingQueue:
    """Jobs of one kind with pending tasks; ``oldest_wait_s`` since the oldest's submission."""

    kind: str
    jobs: int
    tasks: int
    oldest_wait_s: float


@dataclass(frozen=True, slots=True)
class HotSpot:
    """A machine where schedulers' transactions failed: ``losers`` are the schedulers whose
    compares failed there (with counts), ``winners`` those that had changed it first."""

    machine: str
    conflicts: int
    losers: tuple[tuple[str, int], ...]
    winners: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class ConflictRow:
    """One recent conflict of ``scheduler`` (see omega.stats.ConflictNote)."""

    at: float
    scheduler: str
    job: str
    machines: tuple[str, ...]
    winners: tuple[str, ...]

    @property
    def cause(self) -> str:
        """"machine" (a claimed machine had changed) or "job" (only the job record had)."""
        return "machine" if self.machines else "job"


@dataclass(frozen=True, slots=True)
class MonitorFrame:
    """Everything one refresh of the monitor shows, as of ``revision`` and wall time ``at``."""

    cell: str
    revision: int
    at: float
    machines_up: int
    machines_total: int
    schedulers: tuple[SchedulerRow, ...]
    utilization: tuple[ResourceUse, ...]
    pending: tuple[PendingQueue, ...]
    hot_machines: tuple[HotSpot, ...]
    recent_conflicts: tuple[ConflictRow, ...]
    errors: tuple[str, ...] = ()
    quarantined: int = 0
    """Keys of the cell whose values the monitor's replica quarantined (each one also in ``errors``)."""
    gpu: GpuUse | None = None
    """The GPU devices (None: no UP machine has any)."""


def build_frame(replica: Replica, now: float, store_error: str = "",
                history: ConflictHistory | None = None) -> MonitorFrame:
    """The frame of ``replica`` (held still by the caller) at wall time ``now`` (epoch s).
    Stats values that do not decode are listed in ``errors`` (key and field), not dropped
    silently; so are keys the replica quarantined and ``store_error``, when given. With
    ``history`` (kept across frames), the stats are added to it and each row gets its
    windowed conflict fractions and trend."""
    stats, errors = decode_all_stats(replica.stats_raw)
    if history is not None:
        history.observe(stats)
    errors += [f"{key}: {message}" for key, message in sorted(replica.quarantine.items())]
    if store_error:
        errors.insert(0, f"store: {store_error}")
    machines = [entry.machine for entry in replica.machines()]
    up = [m for m in machines if m.state is MachineState.UP]
    return MonitorFrame(
        cell=replica.keys.cell, revision=replica.revision, at=now,
        machines_up=len(up), machines_total=len(machines),
        schedulers=tuple(scheduler_row(s, history) for s in stats),
        utilization=utilization(up),
        pending=tuple(pending_queue(replica, kind, now) for kind in JobKind),
        hot_machines=merge_hot_machines(stats),
        recent_conflicts=merge_recent_conflicts(stats),
        errors=tuple(errors),
        quarantined=len(replica.quarantine),
        gpu=gpu_use(up),
    )


def decode_all_stats(stats_raw: dict[str, bytes]) -> tuple[list[SchedulerStats], list[str]]:
    """Decoded stats ordered by (kind, name), and an error line per value that fails."""
    decoded, errors = [], []
    for key, raw in stats_raw.items():
        try:
            decoded.append(decode_stats(key, raw))
        except CodecError as exc:
            errors.append(str(exc))
    decoded.sort(key=lambda s: (s.kind, s.name))
    return decoded, sorted(errors)


def scheduler_row(s: SchedulerStats, history: ConflictHistory | None = None) -> SchedulerRow:
    windows = {}
    if history is not None:
        windows = dict(recent=history.window(s.name, WINDOWS_S[0]), minute=history.window(s.name, WINDOWS_S[1]),
                       trend=history.trend(s.name))
    return SchedulerRow(
        name=s.name, kind=s.kind, alive=True, host=s.host, pid=s.pid, updated_at=s.updated_at,
        jobs_per_s=s.jobs_per_s, placements_per_s=s.placements_per_s, txns=s.txns, commits=s.commits,
        conflicts=s.conflicts, conflict_fraction=s.conflict_fraction, retries=s.retries,
        busyness=s.busyness, decision_ms_p50=s.decision_ms_p50, decision_ms_p99=s.decision_ms_p99,
        quarantined=s.quarantined,
        stale_retries=s.stale_retries, job_conflicts=s.job_conflicts, **windows,
    )


def utilization(up_machines) -> tuple[ResourceUse, ...]:
    """Per resource (cpu, memory, disk, then extras by name): sums over ``up_machines``."""
    allocated: Counter[str] = Counter()
    capacity: Counter[str] = Counter()
    for m in up_machines:
        for source, totals in ((m.capacity, capacity), (m.allocated, allocated)):
            totals["cpu"] += source.cpu
            totals["memory"] += source.memory
            totals["disk"] += source.disk
            for name, amount in source.extra:
                totals[name] += amount
    extras = sorted((set(capacity) | set(allocated)) - set(CORE_NAMES))
    return tuple(ResourceUse(name, allocated[name], capacity[name]) for name in CORE_NAMES + tuple(extras))


def gpu_use(up_machines) -> GpuUse | None:
    """The devices of ``up_machines`` summed (None when none has a device)."""
    machines = devices = allocated = capacity = idle = partial = partial_idle = 0
    for m in up_machines:
        n = device_count(m.capacity)
        if not n:
            continue
        machines += 1
        devices += n
        capacity += n * MILLI
        for free in device_free(m.capacity, m.allocated):
            free = max(0, min(MILLI, free))
            allocated += MILLI - free
            if free == MILLI:
                idle += 1
            elif free:
                partial += 1
                partial_idle += free
    if not devices:
        return None
    return GpuUse(machines, devices, allocated, capacity, idle, partial, partial_idle)


def pending_queue(replica: Replica, kind: JobKind, now: float) -> PendingQueue:
    entries = replica.pending_jobs(kind)
    tasks = sum(e.record.tasks.count("p") for e in entries)
    oldest = min((e.record.submitted_at for e in entries), default=None)
    wait = max(0.0, now - oldest) if oldest is not None else 0.0
    return PendingQueue(str(kind), len(entries), tasks, wait)


def merge_hot_machines(stats: list[SchedulerStats], limit: int = HOT_ROWS) -> tuple[HotSpot, ...]:
    """Hot machines of all schedulers summed per machine, most conflicts first (ties by id)."""
    losers: dict[str, Counter[str]] = defaultdict(Counter)
    winners: dict[str, Counter[str]] = defaultdict(Counter)
    for s in stats:
        for hot in s.hot_machines:
            losers[hot.machine][s.name] += hot.conflicts
            winners[hot.machine].update(dict(hot.winners))
    totals = sorted(((sum(c.values()), machine) for machine, c in losers.items()), key=lambda t: (-t[0], t[1]))
    return tuple(HotSpot(machine, total, _ranked(losers[machine]), _ranked(winners[machine]))
                 for total, machine in totals[:limit])


def merge_recent_conflicts(stats: list[SchedulerStats], limit: int = CONFLICT_ROWS) -> tuple[ConflictRow, ...]:
    """Recent conflicts of all schedulers, newest first."""
    rows = [ConflictRow(n.at, s.name, n.job, n.machines, n.winners) for s in stats for n in s.recent_conflicts]
    rows.sort(key=lambda r: (-r.at, r.scheduler, r.job))
    return tuple(rows[:limit])


def _ranked(counts: Counter[str]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def to_dict(frame: MonitorFrame) -> dict:
    """The frame as JSON-ready data: lists for tuples, ``{name: count}`` maps for counted
    pairs, and each resource's ``fraction``."""
    d = _lists(asdict(frame))
    for row, r in zip(d["schedulers"], frame.schedulers):
        row["recent"], row["minute"] = _window_dict(r.recent), _window_dict(r.minute)
        row["trend"] = [_window_dict(w) for w in r.trend]
    for row, c in zip(d["recent_conflicts"], frame.recent_conflicts):
        row["cause"] = c.cause
    d["utilization"] = [{**asdict(u), "fraction": u.fraction} for u in frame.utilization]
    if frame.gpu is not None:
        d["gpu"] = {**asdict(frame.gpu), "fraction": frame.gpu.fraction,
                    "partial_fraction": frame.gpu.partial_fraction}
    for spot, h in zip(d["hot_machines"], frame.hot_machines):
        spot["losers"], spot["winners"] = dict(h.losers), dict(h.winners)
    return d


def _window_dict(w: WindowRate | None) -> dict | None:
    """A window as JSON: its figures and fraction (None when idle, "inf" for conflicts without a commit)."""
    if w is None:
        return None
    fraction = w.fraction
    return {**asdict(w), "fraction": "inf" if fraction == math.inf else fraction}


def _lists(x):
    """``x`` with every tuple (at any depth) turned into a list."""
    if isinstance(x, dict):
        return {k: _lists(v) for k, v in x.items()}
    if isinstance(x, (tuple, list)):
        return [_lists(v) for v in x]
    return x
