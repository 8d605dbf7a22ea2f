"""Fidelity of a replay: what the replayed cell did against what the real cell did (the trace's
ground truth, ``tools.trace.truth``). Computed once, after the replay, from what the replay kept
anyway (submission times, each task's first placement, the utilization samples, the recorded
t = 0 state's counters); nothing here runs during the replay.

Definitions (docs/FAUXMASTER.md, "Fidelity"):

- horizon H = min(the replay's end, the truth's horizon): both sides are censored at H;
- population: the jobs of the truth submitted at or before H, each of their tasks (``unit="task"``)
  or each job (``unit="job"``: a gang, placed whole);
- real delay: the truth's submit → scheduled seconds, "never" (+inf) when None or after H;
  replay delay: submit → the replay's first placement of the task (the job's full placement for
  ``unit="job"``), "never" when not placed by H;
- ``initial_pending_fraction``: recorded t = 0 placements left pending ÷ recorded t = 0 placements;
- ``scheduled_ratio``: population tasks the replay placed ÷ population tasks the real cell scheduled
  (the tasks only the replay placed, ``replay_only``, are counted apart: a ratio above 1.05 is
  the replay running work the real cell did not, and misses the goal);
- ``delay_p50_ratio`` / ``delay_p90_ratio``: replay ÷ real nearest-rank percentile of the delays
  over the tasks both placed (None when the real percentile is 0 and the replay's is not);
- occupancy: the real cell's occupancy at its sample times beside the replay's utilization
  sample at or before each (both as fractions of the same machines' capacity).

Goals (issues 20, 29, 30): ``initial_pending_fraction`` <= 0.01, ``scheduled_ratio`` in
[0.95, 1.05], delay ratios in [0.5, 2].

Windows (issue 30): the same figures per imported part (``GroundTruth.windows``; a truth without
parts is one window, the whole): the population of a window is the jobs submitted in it (the
first window from 0 to its end, each later one after the previous end up to its own), censored
at H as above, so a task submitted late in one part and placed in the next counts in its own
part. A window's ``initial_pending_fraction`` is the recorded t = 0 one for the first window; for
a later window it is, of the tasks submitted before it opened that the real cell had scheduled by
then, the fraction the replay had not placed by then. Each window has the whole's goals.

What cannot be known (``GroundTruth.occupancy_lower_bound``: a later part imported alone): the
real occupancy counts only tasks with a row in the parts read, so it is a lower bound; the
section says so in ``warnings`` and sets ``occupancy_lower_bound``, and never calls it matched.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import asdict, dataclass, field
from typing import Any

from omega.stats import percentile
from tools.trace.truth import GroundTruth

INF = math.inf
GOALS = {"initial_pending_fraction": ("<=", 0.01), "scheduled_ratio": ("in", (0.95, 1.05)),
         "delay_p50_ratio": ("in", (0.5, 2.0)), "delay_p90_ratio": ("in", (0.5, 2.0))}
CDF_POINTS = 20  # the JSON's CDFs: the delay at each 1/CDF_POINTS of the population


@dataclass
class Fidelity:
    """The fidelity section of a replay (see the module docstring). ``real_delays`` and
    ``replay_delays`` (one per population task, +inf = never) are kept for the plots only."""

    unit: str
    horizon_s: float
    initial_tasks: int
    initial_pending: int
    initial_pending_fraction: float | None
    tasks: int
    real_scheduled: int
    replay_placed: int
    both_placed: int
    real_only: int
    replay_only: int
    neither: int
    scheduled_ratio: float | None
    real_delay: dict[str, float]
    replay_delay: dict[str, float]
    delay_p50_ratio: float | None
    delay_p90_ratio: float | None
    cdf: dict[str, list]
    occupancy: dict[str, list] | None
    goals: dict[str, bool | None]
    notes: str
    capacity_model: str = ""
    """The trace header's statement of the cell (capacities, cell model: docs/TRACE_FORMAT.md)."""
    windows: list[dict[str, Any]] = field(default_factory=list)
    """One object per imported part (module docstring, "Windows")."""
    occupancy_lower_bound: bool = False
    warnings: list[str] = field(default_factory=list)
    """What the truth cannot tell (e.g. a part imported alone), in words."""
    real_delays: list[float] = field(default_factory=list, repr=False)
    replay_delays: list[float] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        del d["real_delays"], d["replay_delays"]
        return d

    def lines(self, cell: bool = True) -> list[str]:
        """The section as printed by ``omega replay`` and the bench; ``cell``: end with the replayed
        cell's paragraph (False where the page or summary already shows it)."""
        def num(x, fmt="{:.3f}"):
            return "n/a" if x is None else fmt.format(x)

        def mark(name):
            met = self.goals.get(name)
            return "" if met is None else (" (goal met)" if met else " (goal MISSED)")

        r, p = self.real_delay, self.replay_delay
        out = [f"fidelity against the trace's ground truth (per {self.unit}, horizon {self.horizon_s:,.0f} s):",
               f"  initial_pending_fraction {num(self.initial_pending_fraction, '{:.4f}')}"
               f"{mark('initial_pending_fraction')}: {self.initial_pending:,} of {self.initial_tasks:,} "
               "recorded t = 0 tasks left pending",
               f"  scheduled_ratio {num(self.scheduled_ratio)}{mark('scheduled_ratio')}: the replay placed "
               f"{self.replay_placed:,}, the real cell scheduled {self.real_scheduled:,} of {self.tasks:,} "
               f"{self.unit}s submitted in the window ({self.both_placed:,} both, {self.real_only:,} real only, "
               f"{self.replay_only:,} replay only, {self.neither:,} never)"
,
               f"  delay_p50_ratio {num(self.delay_p50_ratio)}{mark('delay_p50_ratio')}, delay_p90_ratio "
               f"{num(self.delay_p90_ratio)}{mark('delay_p90_ratio')}: submit -> placed over {self.both_placed:,} "
               f"{self.unit}s both placed, replay p50 {p['p50']:.2f} s p90 {p['p90']:.2f} s p99 {p['p99']:.2f} s; "
               f"real p50 {r['p50']:.2f} s p90 {r['p90']:.2f} s p99 {r['p99']:.2f} s"]
        if self.occupancy:
            o = self.occupancy
            bound = "at least " if self.occupancy_lower_bound else ""
            out.append(f"  occupancy: real cpu mean {bound}{o['real_cpu_mean']:.3f} (memory {bound}"
                       f"{o['real_memory_mean']:.3f}) of the capacity, replay cpu mean {o['replay_cpu_mean']:.3f} "
                       f"(memory {o['replay_memory_mean']:.3f}), over {len(o['t'])} samples"
                       + ("; the real figures are a LOWER BOUND, not comparable" if self.occupancy_lower_bound else ""))
        for w in self.windows:
            def wmark(name, w=w):
                met = w["goals"].get(name)
                return "" if met is None else ("" if met else " MISSED")
            cut = ("" if w["end_s"] <= self.horizon_s else f", after the horizon {self.horizon_s:,.0f} s"
                   if w["start_s"] >= self.horizon_s and w["part"] != self.windows[0]["part"]
                   else f", cut at the horizon {self.horizon_s:,.0f} s")
            out.append(f"  part {w['part']} ({w['start_s']:,.0f}..{w['end_s']:,.0f} s{cut}, {w['tasks']:,} "
                       f"{self.unit}s): "
                       f"t=0 pending {num(w['initial_pending_fraction'], '{:.4f}')}{wmark('initial_pending_fraction')}, "
                       f"scheduled {num(w['scheduled_ratio'])}{wmark('scheduled_ratio')}, "
                       f"delay p50 {num(w['delay_p50_ratio'])}{wmark('delay_p50_ratio')} "
                       f"(replay {num(w['replay_delay_p50_s'], '{:.2f}')} s / real "
                       f"{num(w['real_delay_p50_s'], '{:.2f}')} s), "
                       f"p90 {num(w['delay_p90_ratio'])}{wmark('delay_p90_ratio')} "
                       f"({num(w['replay_delay_p90_s'], '{:.2f}')} / {num(w['real_delay_p90_s'], '{:.2f}')} s)")
        for warning in self.warnings:
            out.append(f"  WARNING: {warning}")
        if cell and self.capacity_model:
            out.append(f"  the replayed cell (trace header): {self.capacity_model}")
        return out


def _stats(values: list[float]) -> dict[str, float]:
    return {"p50": percentile(values, 50), "p90": percentile(values, 90), "p99": percentile(values, 99),
            "mean": sum(values) / len(values) if values else 0.0}


def _ratio(replay: float, real: float) -> float | None:
    if real > 0:
        return replay / real
    return 1.0 if replay == 0 else None


def _goal(name: str, value) -> bool | None:
    if value is None:
        return None
    op, bound = GOALS[name]
    if op == "<=":
        return value <= bound
    if op == ">=":
        return value >= bound
    return bound[0] <= value <= bound[1]


def cdf_points(delays_sorted: list[float], points: int = CDF_POINTS) -> list[float | None]:
    """The delay at each k/points of the population (k = 1..points; None = never: +inf)."""
    n = len(delays_sorted)
    out = []
    for k in range(1, points + 1):
        if not n:
            out.append(None)
            continue
        x = delays_sorted[max(1, math.ceil(k / points * n)) - 1]
        out.append(None if x == INF else x)
    return out


def compute_fidelity(truth: GroundTruth, sim_time: float, submitted_at: dict[str, float],
                     placed_log: dict[str, dict[int, float]] | None, fully_placed: dict[str, float],
                     initial_placed: int, initial_not_placed: int, samples: list | None = None,
                     capacity_model: str = "") -> Fidelity:
    """The fidelity of a replay that ended at ``sim_time`` (see the module docstring).
    ``submitted_at``: job → its submission in the replay; ``placed_log``: job → task → first
    placement (``unit="task"``); ``fully_placed``: job → its full placement (``unit="job"``);
    ``samples``: the replay's ``UtilizationSample`` list (time order)."""
    horizon = min(sim_time, truth.horizon)
    real_all: list[float] = []
    replay_all: list[float] = []
    at_all: list[float] = []  # each entry's submission (the truth's)
    log = placed_log or {}
    for job, delays in truth.delays.items():
        t = truth.submitted[job]
        if t > horizon:
            continue
        limit = horizon - t
        if truth.unit == "task":
            placed = log.get(job, {}) if job in submitted_at else {}
            at = submitted_at.get(job, t)
            for task, d in enumerate(delays):
                at_all.append(t)
                real_all.append(d if d is not None and d <= limit else INF)
                p = placed.get(task)
                replay_all.append(p - at if p is not None and p <= horizon else INF)
        else:
            d = delays[0]
            at_all.append(t)
            real_all.append(d if d is not None and d <= limit else INF)
            p = fully_placed.get(job)
            replay_all.append(p - submitted_at.get(job, t) if p is not None and p <= horizon else INF)
    both_real, both_replay = [], []
    real_only = replay_only = neither = 0
    for a, b in zip(real_all, replay_all):
        if a != INF and b != INF:
            both_real.append(a)
            both_replay.append(b)
        elif a != INF:
            real_only += 1
        elif b != INF:
            replay_only += 1
        else:
            neither += 1
    both_real.sort()
    both_replay.sort()
    real_scheduled, replay_placed = len(both_real) + real_only, len(both_replay) + replay_only
    real_stats, replay_stats = _stats(both_real), _stats(both_replay)
    initial_tasks = initial_placed + initial_not_placed
    values = {
        "initial_pending_fraction": initial_not_placed / initial_tasks if initial_tasks else None,
        "scheduled_ratio": replay_placed / real_scheduled if real_scheduled else None,
        "delay_p50_ratio": _ratio(replay_stats["p50"], real_stats["p50"]) if both_real else None,
        "delay_p90_ratio": _ratio(replay_stats["p90"], real_stats["p90"]) if both_real else None,
    }
    real_sorted, replay_sorted = sorted(real_all), sorted(replay_all)
    cdf = {"fractions": [k / CDF_POINTS for k in range(1, CDF_POINTS + 1)],
           "real_s": cdf_points(real_sorted), "replay_s": cdf_points(replay_sorted)}
    return Fidelity(
        unit=truth.unit, horizon_s=horizon, initial_tasks=initial_tasks, initial_pending=initial_not_placed,
        tasks=len(real_all), real_scheduled=real_scheduled, replay_placed=replay_placed,
        both_placed=len(both_real), real_only=real_only, replay_only=replay_only, neither=neither,
        real_delay=real_stats, replay_delay=replay_stats, cdf=cdf,
        occupancy=_occupancy(truth, horizon, samples or []),
        goals={name: _goal(name, value) for name, value in values.items()},
        notes=truth.notes, capacity_model=capacity_model, real_delays=real_sorted, replay_delays=replay_sorted,
        windows=_windows(truth, horizon, at_all, real_all, replay_all, values["initial_pending_fraction"]),
        occupancy_lower_bound=truth.occupancy_lower_bound, warnings=_warnings(truth), **values)


def _delays(both: list[float], real: dict[str, float], replay: dict[str, float]) -> dict[str, float | None]:
    """A window's p50/p90 delays of each side (None when no task was placed by both)."""
    return {f"{side}_delay_{q}_s": (stats[q] if both else None)
            for side, stats in (("real", real), ("replay", replay)) for q in ("p50", "p90")}


def _warnings(truth: GroundTruth) -> list[str]:
    if not truth.occupancy_lower_bound:
        return []
    first = truth.windows[0].part if truth.windows else None
    return [f"the trace opens at part {first}, not at the source's start: tasks that ran throughout without a row "
            "in the parts read are not in the truth, so its occupancy is a lower bound (never a match) and the "
            "replay's opening state is partial; import from part 0 for a full opening"]


def _windows(truth: GroundTruth, horizon: float, at: list[float], real: list[float], replay: list[float],
             initial_pending: float | None) -> list[dict[str, Any]]:
    """The figures per part window (module docstring, "Windows")."""
    spans = [(w.part, w.start, w.end) for w in truth.windows] or [(0, 0.0, truth.horizon)]
    out = []
    for i, (part, start, end) in enumerate(spans):
        rows = [k for k, t in enumerate(at) if t <= end and (i == 0 or t > start)]
        both_real = sorted(real[k] for k in rows if real[k] != INF and replay[k] != INF)
        both_replay = sorted(replay[k] for k in rows if real[k] != INF and replay[k] != INF)
        real_n = sum(1 for k in rows if real[k] != INF)
        replay_n = sum(1 for k in rows if replay[k] != INF)
        if i == 0:
            pending = initial_pending
        elif start >= horizon:  # the replay stopped before this part opened: nothing to compare
            pending = None
        else:
            before = [k for k, t in enumerate(at) if t <= start and t + real[k] <= start]
            pending = (sum(1 for k in before if at[k] + replay[k] > start) / len(before)) if before else None
        r, p = _stats(both_real), _stats(both_replay)
        values = {
            "initial_pending_fraction": pending,
            "scheduled_ratio": replay_n / real_n if real_n else None,
            "delay_p50_ratio": _ratio(p["p50"], r["p50"]) if both_real else None,
            "delay_p90_ratio": _ratio(p["p90"], r["p90"]) if both_real else None,
        }
        out.append({"part": part, "start_s": start, "end_s": end, **values,
                    "tasks": len(rows), "real_scheduled": real_n, "replay_placed": replay_n,
                    "both_placed": len(both_real), **_delays(both_real, r, p),
                    "real_delay_min_s": both_real[0] if both_real else None,
                    "replay_delay_min_s": both_replay[0] if both_replay else None,
                    "goals": {name: _goal(name, v) for name, v in values.items()}})
    return out


def _occupancy(truth: GroundTruth, horizon: float, samples: list) -> dict[str, list] | None:
    """The real occupancy's samples up to ``horizon`` beside the replay's utilization sample at or
    before each (the first sample for times before it)."""
    occ = truth.occupancy
    if occ is None or not samples:
        return None
    cpu, memory = occ.fractions()
    times = [s.t for s in samples]
    out = {"t": [], "real_cpu": [], "real_memory": [], "replay_cpu": [], "replay_memory": []}
    for t, c, m in zip(occ.t, cpu, memory):
        if t > horizon:
            break
        s = samples[max(0, bisect_right(times, t) - 1)]
        for name, x in (("t", t), ("real_cpu", c), ("real_memory", m), ("replay_cpu", s.cpu),
                        ("replay_memory", s.memory)):
            out[name].append(x)
    n = len(out["t"])
    if not n:
        return None
    for name in ("real_cpu", "real_memory", "replay_cpu", "replay_memory"):
        out[f"{name}_mean"] = sum(out[name]) / n
    out["capacity_cpu"], out["capacity_memory"] = occ.capacity_cpu, occ.capacity_memory
    return out
