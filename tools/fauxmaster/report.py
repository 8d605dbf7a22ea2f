"""Reports of a replay: JSON, and an HTML page with PNG plots (matplotlib, the ``report``
extra): utilization over time, the CDF of job wait times, busyness per scheduler.
Also ``rich_progress``, a progress bar over virtual time for the command line."""

from __future__ import annotations

import html
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from tools.fauxmaster.replay import MAX_SAMPLES, ReplayResult

PLOTS = ("utilization.png", "wait_cdf.png", "busyness.png")
FIDELITY_PLOTS = ("fidelity_delay_cdf.png", "fidelity_occupancy.png")  # a trace with ground truth only
MAX_POINTS = 1000  # per line of a plot over time


def write_json(result: ReplayResult, path) -> Path:
    """The result as JSON at ``path`` (parent directories created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(result.to_json() + "\n")
    return path


def write_html(result: ReplayResult, directory) -> Path:
    """``index.html``, ``result.json`` and the PNG plots in ``directory``; the index path."""
    try:
        import matplotlib
    except ImportError:
        raise RuntimeError("the HTML report needs matplotlib: pip install 'omega-scheduler[report]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    write_json(result, out / "result.json")
    plots = list(zip(PLOTS, (_utilization, _wait_cdf, _busyness), (5.0, 3.6, 3.6)))
    if result.fidelity is not None:
        plots += list(zip(FIDELITY_PLOTS, (_fidelity_cdf, _fidelity_occupancy), (3.6, 3.6)))
    for name, draw, height in plots:
        fig = plt.figure(figsize=(7, height))
        draw(fig, result)
        fig.tight_layout()
        fig.savefig(out / name, dpi=100)
        plt.close(fig)
    index = out / "index.html"
    index.write_text(_page(result))
    return index


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


def _utilization(fig, result: ReplayResult) -> None:
    """Cpu and memory utilization (0..1) above the load's std/mean across machines; a long run's
    samples averaged over bins (``binned_means``)."""
    samples = result.utilization
    unit, label = time_unit(samples[-1].t if samples else 0.0)
    t, (cpu, memory, cv) = binned_means([u.t / unit for u in samples],
                                        [[u.cpu for u in samples], [u.memory for u in samples],
                                         [u.load_cv for u in samples]])
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    top.plot(t, cpu, label="cpu")
    top.plot(t, memory, label="memory")
    top.set_ylim(0, max([1.02] + [v * 1.05 for v in cpu + memory]))  # above 1: an overcommitted cell
    top.set_ylabel("allocated / capacity")
    averaged = f" (means of {-(-len(samples) // len(t))} samples)" if samples and len(t) < len(samples) else ""
    every = f", sampled every {result.utilization_interval_s:,.0f} s" if result.utilization_interval_s else ""
    top.set_title(f"Utilization over time{every}{averaged}")
    top.legend(loc="lower right")
    bottom.plot(t, cv, color="tab:green")
    bottom.set_ylabel("load std / mean")
    bottom.set_xlabel(f"virtual time ({label})")


def time_unit(span_s: float) -> tuple[float, str]:
    """Seconds per unit of a plot's time axis and its label: hours up to 72 h, days beyond."""
    return (86_400.0, "days") if span_s > 72 * 3600 else (3600.0, "h")


def _wait_cdf(fig, result: ReplayResult) -> None:
    ax = fig.subplots()
    for label, waits in (("to first attempt", result.waits_first), ("to fully placed", result.waits_placed)):
        ordered = sorted(waits)
        if ordered:
            n = len(ordered)
            ax.step(ordered, [(i + 1) / n for i in range(n)], where="post", label=f"{label} ({n} jobs)")
    ax.set_xscale("symlog", linthresh=0.1)
    ax.set_xlabel("job wait time (s)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("Job wait time CDF")
    ax.legend()


def _busyness(fig, result: ReplayResult) -> None:
    ax = fig.subplots()
    names = [s.name for s in result.schedulers]
    ax.bar(names, [s.busyness for s in result.schedulers])
    ax.set_ylabel("busy time / simulated time")
    ax.set_title("Scheduler busyness")


def _fidelity_cdf(fig, result: ReplayResult) -> None:
    """Replay vs real submit -> placed delay CDFs over the whole population: a curve ends at the
    fraction placed; the rest ("never") is counted in the legend, not dropped."""
    f = result.fidelity
    ax = fig.subplots()
    for label, delays in (("real cell", f.real_delays), ("replay", f.replay_delays)):
        n = len(delays)
        placed = [d for d in delays if d != float("inf")]
        if placed:
            ax.step(placed, [(i + 1) / n for i in range(len(placed))], where="post",
                    label=f"{label}: {len(placed):,} placed, {n - len(placed):,} never")
        else:
            ax.plot([], [], label=f"{label}: 0 placed, {n:,} never")
    ax.set_xscale("symlog", linthresh=0.1)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel(f"submit -> placed (s), per {f.unit}")
    ax.set_ylabel(f"fraction of {f.tasks:,} {f.unit}s")
    ax.set_title("Delay to placement: replay vs real cell")
    ax.legend(loc="lower right", fontsize="small")


def _fidelity_occupancy(fig, result: ReplayResult) -> None:
    """The replay's utilization against the real cell's occupancy (same capacity; above 1: the real
    cell ran more than the capacity model holds)."""
    o = result.fidelity.occupancy
    ax = fig.subplots()
    if o:
        t = [x / 3600 for x in o["t"]]
        ax.plot(t, o["real_cpu"], label="real cpu", color="tab:blue", linestyle="--")
        ax.plot(t, o["replay_cpu"], label="replay cpu", color="tab:blue")
        ax.plot(t, o["real_memory"], label="real memory", color="tab:orange", linestyle="--")
        ax.plot(t, o["replay_memory"], label="replay memory", color="tab:orange")
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_ylim(0, max(1.05, max(o["real_cpu"] + o["real_memory"]) * 1.05))
        ax.legend(loc="lower right", fontsize="small")
    else:
        ax.text(0.5, 0.5, "the trace records no occupancy", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("virtual time (h)")
    ax.set_ylabel("allocated / capacity")
    ax.set_title("Utilization: replay vs real cell occupancy")


def _fidelity_html(result: ReplayResult) -> str:
    f = result.fidelity
    if f is None:
        return ""
    lines = "<br>".join(html.escape(line.strip()) for line in f.lines())
    images = "".join(f'<p><img src="{name}" alt="{name}"></p>' for name in FIDELITY_PLOTS)
    return f"<h2>Fidelity</h2><p>{lines}</p><p><small>{html.escape(f.notes)}</small></p>{images}"


def _losses_html(result: ReplayResult) -> str:
    """Every loss count, zero or not, with what it counts (``tools.fauxmaster.replay.LOSSES``)."""
    from tools.fauxmaster.replay import LOSSES

    rows = "".join(f"<tr><td>{html.escape(name)}</td><td>{n:,}</td>"
                   f"<td style=\"text-align:left\">{html.escape(LOSSES.get(name, ''))}</td></tr>"
                   for name, n in result.losses.items())
    return f"<h2>Losses</h2><table><tr><th>what</th><th>count</th><th></th></tr>{rows}</table>"


def _page(result: ReplayResult) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(s.name)}</td><td>{s.kind}</td><td>{s.conflict_mode}</td><td>{s.commit_mode}</td>"
        f"<td>{s.busyness:.3f}</td><td>{s.conflict_fraction:.4f}</td><td>{s.attempts}</td>"
        f"<td>{s.tasks_placed}</td></tr>" for s in result.schedulers)
    w1, w2 = result.wait_to_first_attempt, result.wait_to_placed
    images = "".join(f'<p><img src="{name}" alt="{name}"></p>' for name in PLOTS)
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>omega replay</title>
<style>body{{font-family:sans-serif;margin:2em}}td,th{{padding:2px 8px;text-align:right}}</style></head><body>
<h1>Replay of {html.escape(result.trace)}</h1>
<p>{result.sim_time_s:,.0f} virtual s in {result.wall_time_s:,.1f} wall s ({result.speedup:,.0f}x);
{result.events:,} trace events; {result.jobs_submitted:,} jobs submitted, {result.jobs_unscheduled:,}
unscheduled at the end.</p>
<p><small>The cell (trace header): {html.escape(result.capacity_model)}</small></p>
<table><tr><th>scheduler</th><th>kind</th><th>conflict mode</th><th>commit mode</th><th>busyness</th>
<th>conflict fraction</th><th>attempts</th><th>tasks placed</th></tr>{rows}</table>
<p>Wait to first attempt: mean {w1.mean:.2f} s, p90 {w1.p90:.2f} s, p99 {w1.p99:.2f} s ({w1.jobs} jobs).<br>
Wait to fully placed: mean {w2.mean:.2f} s, p90 {w2.p90:.2f} s, p99 {w2.p99:.2f} s ({w2.jobs} jobs).</p>
<p>Utilization: {len(result.utilization):,} samples, every {result.utilization_interval_s:,.0f} virtual s
(the interval grows with the span so that a replay holds at most {2 * MAX_SAMPLES:,} samples).</p>
{_losses_html(result)}
{images}
{_fidelity_html(result)}
<p><a href="result.json">result.json</a></p></body></html>
"""


@contextmanager
def rich_progress(enabled: bool) -> Iterator[Callable[[float, float | None], None] | None]:
    """A ``progress(now, until)`` callback drawing a rich bar of virtual time (None if disabled)."""
    if not enabled:
        yield None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("replay"), BarColumn(), TextColumn("{task.fields[now]:,.0f} virtual s"),
               TimeElapsedColumn())
    with Progress(*columns, transient=True) as bar:
        task = bar.add_task("replay", total=None, now=0.0)

        def update(now: float, until: float | None) -> None:
            bar.update(task, completed=now, total=until, now=now)

        yield update
