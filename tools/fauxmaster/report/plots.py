"""The report's plots, drawn with matplotlib on a figure, one run or several overlaid and labelled:
utilization over time, the CDFs of job wait times (the jobs never attempted or never placed counted,
not dropped), scheduler busyness, the conflict fraction over time per scheduler, and, for a trace with
ground truth, the fidelity plots. Time axes are in the unit that fits the span (``time_unit``)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from tools.fauxmaster.report.result import Run, extra_names

PLOTS = ("utilization.png", "wait_cdf.png", "busyness.png", "conflicts.png")
FIDELITY_PLOTS = ("fidelity_delay_cdf.png", "fidelity_occupancy.png")  # a trace with ground truth only
MAX_POINTS = 1000  # per line of a plot over time


def time_unit(span_s: float) -> tuple[float, str]:
    """Seconds per unit of a plot's time axis and its label, from the span shown: seconds up to 3 minutes,
    minutes up to 3 hours, hours up to 3 days, days beyond (a 20-minute run is drawn in minutes)."""
    for limit, unit, label in ((180.0, 1.0, "s"), (3 * 3600.0, 60.0, "min"), (72 * 3600.0, 3600.0, "h")):
        if span_s <= limit:
            return unit, label
    return 86_400.0, "days"


def _span_unit(runs: list[Run]) -> tuple[float, str]:
    return time_unit(max(r.data["sim_time_s"] for r in runs))


def _colors(n: int) -> list[str]:
    return [f"C{i % 10}" for i in range(n)]


def _prefix(runs: list[Run], run: Run) -> str:
    return "" if len(runs) == 1 else f"{run.label}: "


def binned_means(t: list[float], series: list[list[float]], max_points: int = MAX_POINTS):
    """``(t, series)`` with consecutive samples averaged in groups of ``ceil(n / max_points)``
    (the last group may be smaller), so at most ``max_points`` remain; unchanged when fewer."""
    n = len(t)
    size = -(-n // max_points) if max_points > 0 else n
    if size <= 1:
        return list(t), [list(s) for s in series]
    starts = np.arange(0, n, size)
    counts = np.diff(np.append(starts, n))

    def means(values) -> list[float]:
        return (np.add.reduceat(np.asarray(values, dtype=float), starts) / counts).tolist()

    return means(t), [means(s) for s in series]


def draw_utilization(fig, runs: list[Run]) -> None:
    """Cpu and memory utilization (0..1, above 1 when overcommitted) above the load's std/mean across
    machines; a long run's samples averaged over bins (``binned_means``). Several runs: one colour each,
    cpu solid, memory dashed."""
    unit, label = _span_unit(runs)
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    highest = 1.02
    notes = []
    for run, color in zip(runs, _colors(len(runs))):
        samples = run.data["utilization"]
        t, (cpu, memory, cv) = binned_means([u["t"] / unit for u in samples],
                                            [[u["cpu"] for u in samples], [u["memory"] for u in samples],
                                             [u["load_cv"] for u in samples]])
        single = len(runs) == 1
        top.plot(t, cpu, label=f"{_prefix(runs, run)}cpu", color=None if single else color)
        top.plot(t, memory, label=f"{_prefix(runs, run)}memory", color=None if single else color,
                 linestyle="-" if single else "--")
        bottom.plot(t, cv, color="tab:green" if single else color, label=run.label)
        highest = max([highest] + [v * 1.05 for v in cpu + memory])
        for k, name in enumerate(extra_names([run])):  # gpu, …: dotted, one per resource
            _, (values,) = binned_means([u["t"] for u in samples], [[u.get("extra", {}).get(name, 0.0)
                                                                     for u in samples]])
            top.plot(t, values, label=f"{_prefix(runs, run)}{name}", linestyle=(0, (1, 1 + k)),
                     color=None if single else color)
            highest = max([highest] + [v * 1.05 for v in values])
        averaged = f" (means of {-(-len(samples) // len(t))} samples)" if samples and len(t) < len(samples) else ""
        every = run.data.get("utilization_interval_s")
        notes.append((f"sampled every {every:,.0f} s" if every else "") + averaged)
    top.set_ylim(0, highest)  # above 1: an overcommitted cell
    top.set_ylabel("allocated / capacity")
    top.set_title("Utilization over time" + (f", {notes[0]}" if len(runs) == 1 and notes[0] else ""))
    top.legend(loc="lower right", fontsize="small")
    bottom.set_ylabel("load std / mean")
    bottom.set_xlabel(f"virtual time ({label})")
    if len(runs) > 1:
        bottom.legend(loc="upper right", fontsize="small")


def draw_wait_cdf(fig, runs: list[Run]) -> None:
    """Per run, the CDFs of the wait to first attempt and to fully placed over every job a scheduler had
    to place: a curve ends at the fraction that got there; the legend counts the rest ("never"). A result
    written before the CDFs were kept draws its placed jobs only, and says so."""
    ax = fig.subplots()
    styles = {"to_first_attempt": ":", "to_placed": "-"}
    for run, color in zip(runs, _colors(len(runs))):
        cdf = run.data.get("wait_cdf")
        prefix = _prefix(runs, run)
        if not cdf:
            ax.plot([], [], color=color, label=f"{prefix}no wait CDF in this result (an older replay)")
            continue
        for key, what in (("to_first_attempt", "to first attempt"), ("to_placed", "to fully placed")):
            c = cdf[key]
            never = f"{c['never']:,} never"
            if key == "to_placed" and c["never"]:
                never += f" ({c['pending_at_end']:,} pending at the end, {c['ended_unplaced']:,} ended unplaced)"
            legend = f"{prefix}{what}: {cdf['jobs'] - c['never']:,} jobs, {never}"
            if c["waits_s"]:
                ax.step(c["waits_s"], c["fractions"], where="post", linestyle=styles[key],
                        color=color if len(runs) > 1 else None, label=legend)
            else:
                ax.plot([], [], linestyle=styles[key], color=color, label=legend)
    ax.axhline(1.0, color="grey", linewidth=0.6)
    ax.set_xscale("symlog", linthresh=0.1)
    ax.set_xlim(left=0)  # waits are >= 0: no empty negative half
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("job wait time (s)")
    jobs = ", ".join(f"{r.data['wait_cdf']['jobs']:,}" + (f" ({r.label})" if len(runs) > 1 else "")
                     for r in runs if r.data.get("wait_cdf"))
    ax.set_ylabel("fraction of jobs")
    ax.set_title(f"Job wait time CDF over {jobs} jobs\n(a curve ends below 1 by its share that never got there)"
                 if jobs else "Job wait time CDF", fontsize="medium")
    ax.legend(loc="lower right", fontsize="x-small")


def draw_busyness(fig, runs: list[Run]) -> None:
    """Busyness per scheduler (several runs: grouped bars, one colour per run)."""
    ax = fig.subplots()
    names = list(dict.fromkeys(s["name"] for r in runs for s in r.data["schedulers"]))
    width = 0.8 / len(runs)
    for i, (run, color) in enumerate(zip(runs, _colors(len(runs)))):
        by_name = {s["name"]: s["busyness"] for s in run.data["schedulers"]}
        xs = [j + (i - (len(runs) - 1) / 2) * width for j, name in enumerate(names) if name in by_name]
        ax.bar(xs, [by_name[name] for name in names if name in by_name], width=width, color=color,
               label=run.label if len(runs) > 1 else None)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("busy time / simulated time")
    ax.set_title("Scheduler busyness")
    if len(runs) > 1:
        ax.legend(fontsize="small")


def draw_conflicts(fig, runs: list[Run]) -> None:
    """Per run and scheduler, the conflict fraction (conflict txns ÷ successful txns) in windows over
    time, from the cumulative counts sampled with utilization (merged to at most ``MAX_POINTS`` windows;
    a window without a successful txn is a gap); the legend gives each scheduler's overall fraction."""
    from tools.fauxmaster.metrics import windowed_fractions

    unit, label = _span_unit(runs)
    ax = fig.subplots()
    styles = ("-", "--", ":", "-.")
    widest = 0.0
    line = 0
    for i, run in enumerate(runs):
        over_time = run.data.get("conflicts_over_time")
        prefix = _prefix(runs, run)
        if not over_time:
            ax.plot([], [], label=f"{prefix}no conflicts over time in this result (an older replay)")
            continue
        t = over_time["t"]
        step = max(1, -(-len(t) // MAX_POINTS))
        overall = {s["name"]: s["conflict_fraction"] for s in run.data["schedulers"]}
        for name, counts in over_time["schedulers"].items():
            ends, fractions = windowed_fractions(counts["transactions"], counts["failed"], counts["conflicts"], step)
            values = [math.nan if f is None else f for f in fractions]
            widest = max([widest] + [v for v in values if v == v])
            # each value holds over its window (previous end, end]: a step drawn back from the end
            ax.step([t[0] / unit] + [t[e] / unit for e in ends], [values[0] if values else math.nan] + values,
                    where="pre", linestyle=styles[i % len(styles)], color=f"C{line % 10}",
                    label=f"{prefix}{name} ({overall.get(name, 0.0):.4f} overall)")
            line += 1
        if step > 1 and len(t) > 1:
            ax.plot([], [], " ", label=f"{prefix}windows of {step} samples ({(t[1] - t[0]) * step:,.0f} s)")
    ax.set_ylim(0, max(0.05, widest * 1.1))
    ax.set_xlabel(f"virtual time ({label})")
    ax.set_ylabel("conflicts / successful txns")
    ax.set_title("Conflict fraction over time, per scheduler and sampling window")
    ax.legend(loc="upper right", fontsize="x-small")


def _fidelity_steps(run: Run) -> list[tuple[str, list[float], list[float], int, int]]:
    """(side, delays, fractions, placed, population) of the real and replay delay CDFs of ``run``: every
    step from a live result, else the JSON's delay at each twentieth of the population."""
    f = run.data["fidelity"]
    out = []
    if run.fidelity_delays is not None:
        for side, delays in zip(("real cell", "replay"), run.fidelity_delays):
            n = len(delays)
            placed = [d for d in delays if d != math.inf]
            out.append((side, placed, [(i + 1) / n for i in range(len(placed))], len(placed), n))
        return out
    cdf, n = f["cdf"], f["tasks"]
    for side, key, count in (("real cell", "real_s", f["real_scheduled"]), ("replay", "replay_s", f["replay_placed"])):
        points = [(x, q) for x, q in zip(cdf[key], cdf["fractions"]) if x is not None]
        out.append((side, [x for x, _ in points], [q for _, q in points], count, n))
    return out


def draw_fidelity_cdf(fig, runs: list[Run]) -> None:
    """Replay vs real submit -> placed delay CDFs over the whole population: a curve ends at the
    fraction placed; the rest ("never") is counted in the legend, not dropped. The real cell's curve is
    drawn once per trace."""
    ax = fig.subplots()
    drawn_real = set()
    units = set()
    for run, color in zip(runs, _colors(len(runs))):
        f = run.data.get("fidelity")
        if not f:
            continue
        units.add(f["unit"])
        for side, delays, fractions, placed, n in _fidelity_steps(run):
            if side == "real cell":
                if run.data["trace"] in drawn_real:
                    continue
                drawn_real.add(run.data["trace"])
                label = side if len(runs) == 1 else f"real cell ({Path(run.data['trace']).name})"
                style = {"color": "black", "linestyle": "--"} if len(runs) > 1 else {}
            else:
                label = f"{_prefix(runs, run)}replay"
                style = {"color": color} if len(runs) > 1 else {}
            legend = f"{label}: {placed:,} placed, {n - placed:,} never"
            if delays:
                ax.step(delays, fractions, where="post", label=legend, **style)
            else:
                ax.plot([], [], label=legend, **style)
    unit = "/".join(sorted(units)) or "task"
    ax.set_xscale("symlog", linthresh=0.1)
    ax.set_xlim(left=0)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel(f"submit -> placed (s), per {unit}")
    ax.set_ylabel(f"fraction of {unit}s")
    coarse = any(r.data.get("fidelity") and r.fidelity_delays is None for r in runs)
    ax.set_title("Delay to placement: replay vs real cell" + (" (the result's twentieths)" if coarse else ""))
    ax.legend(loc="best", fontsize="small")


def draw_fidelity_occupancy(fig, runs: list[Run]) -> None:
    """The replay's utilization against the real cell's occupancy (same capacity; above 1: the real
    cell ran more than the capacity model holds)."""
    ax = fig.subplots()
    unit, label = _span_unit(runs)
    top = 1.05
    drawn_real, any_drawn = set(), False
    for run, color in zip(runs, _colors(len(runs))):
        f = run.data.get("fidelity")
        o = f and f["occupancy"]
        if not o:
            continue
        any_drawn = True
        t = [x / unit for x in o["t"]]
        prefix = _prefix(runs, run)
        if run.data["trace"] not in drawn_real:
            drawn_real.add(run.data["trace"])
            ax.plot(t, o["real_cpu"], label="real cpu", color="tab:blue" if len(runs) == 1 else "black",
                    linestyle="--")
            ax.plot(t, o["real_memory"], label="real memory", color="tab:orange" if len(runs) == 1 else "grey",
                    linestyle="--")
        ax.plot(t, o["replay_cpu"], label=f"{prefix}replay cpu", color="tab:blue" if len(runs) == 1 else color)
        ax.plot(t, o["replay_memory"], label=f"{prefix}replay memory",
                color="tab:orange" if len(runs) == 1 else color, linestyle="-" if len(runs) == 1 else ":")
        top = max([top] + [v * 1.05 for v in o["real_cpu"] + o["real_memory"]])
    if any_drawn:
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_ylim(0, top)
        ax.legend(loc="lower right", fontsize="small")
    else:
        ax.text(0.5, 0.5, "the trace records no occupancy", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel(f"virtual time ({label})")
    ax.set_ylabel("allocated / capacity")
    ax.set_title("Utilization: replay vs real cell occupancy")

