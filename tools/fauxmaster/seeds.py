"""Several seeds of one replay (``omega replay --seeds N``): the headline figures of each run
and, over the runs, their mean and 95 % confidence interval (Student's t: mean ± t(0.975, n-1) ×
s / sqrt(n), s the sample standard deviation; no interval for one run).

Headline figures: the wait to placed (mean, p90) and to the first attempt (mean), each
scheduler's busyness and conflict fraction, the mean cpu utilization, and with ground truth the
fidelity ratios (scheduled, delay p50, delay p90); a figure a run lacks (None) is left out of that
figure's statistics and the count says how many runs it covers.
"""

from __future__ import annotations

import math
from typing import Any

# two-sided 95 % quantiles t(0.975, df) of Student's t for df = 1..30; beyond, the next tabulated
# df at or below (40, 60, 120) and the normal's 1.960 past 120 (standard tables)
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)
_T975_LARGE = ((120, 1.980), (60, 2.000), (40, 2.021))


def t975(df: int) -> float:
    """t(0.975, df), df >= 1."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    for at, value in _T975_LARGE:
        if df >= at:
            return 1.960 if df > 120 else value
    return _T975[-1]


def interval(values: list[float]) -> dict[str, Any]:
    """``{"n", "mean", "low", "high"}`` of ``values`` (low/high None for fewer than two)."""
    n = len(values)
    if not n:
        return {"n": 0, "mean": None, "low": None, "high": None}
    mean = sum(values) / n
    if n < 2:
        return {"n": 1, "mean": mean, "low": None, "high": None}
    sd = math.sqrt(sum((x - mean) ** 2 for x in values) / (n - 1))
    half = t975(n - 1) * sd / math.sqrt(n)
    return {"n": n, "mean": mean, "low": mean - half, "high": mean + half}


def headline(result) -> dict[str, float | None]:
    """The headline figures of one ``ReplayResult`` (module docstring)."""
    out: dict[str, float | None] = {
        "wait_to_placed_mean_s": result.wait_to_placed.mean, "wait_to_placed_p90_s": result.wait_to_placed.p90,
        "wait_to_first_attempt_mean_s": result.wait_to_first_attempt.mean,
        "cpu_utilization_mean": (sum(u.cpu for u in result.utilization) / len(result.utilization)
                                 if result.utilization else None)}
    for s in result.schedulers:
        out[f"{s.name}_busyness"] = s.busyness
        out[f"{s.name}_conflict_fraction"] = s.conflict_fraction
    f = result.fidelity
    if f is not None:
        out["scheduled_ratio"] = f.scheduled_ratio
        out["delay_p50_ratio"] = f.delay_p50_ratio
        out["delay_p90_ratio"] = f.delay_p90_ratio
    return out


def summarize(figures: list[dict[str, float | None]]) -> dict[str, dict[str, Any]]:
    """Per headline figure, its ``interval`` over the runs that have it (first-seen order)."""
    names = list(dict.fromkeys(name for f in figures for name in f))
    return {name: interval([f[name] for f in figures if f.get(name) is not None]) for name in names}


def lines(seeds: list[int], summary: dict[str, dict[str, Any]]) -> list[str]:
    """The summary as printed by ``omega replay --seeds``."""
    out = [f"over {len(seeds)} seeds ({', '.join(map(str, seeds))}): mean [95 % t-interval]"]
    for name, s in summary.items():
        if s["mean"] is None:
            out.append(f"  {name}: n/a (no run has it)")
        elif s["low"] is None:
            out.append(f"  {name}: {s['mean']:.4g} (one run: no interval)")
        else:
            same = "; the same in every run" if s["low"] == s["high"] else ""
            out.append(f"  {name}: {s['mean']:.4g} [{s['low']:.4g}, {s['high']:.4g}] (n={s['n']}{same})")
    spread = [s for s in summary.values() if s["low"] is not None]
    if len(seeds) > 1 and spread and all(s["low"] == s["high"] for s in spread):
        out.append("  every figure is the same in every run: the seed changes nothing in this replay")
    return out
