"""Reports of replays: JSON, and an HTML page with PNG plots (matplotlib, the ``report`` extra) of one
replay or of several side by side (``omega report A.json B.json``: the same plots, each run's curves
overlaid and labelled): utilization over time, the CDFs of job wait times (the jobs never attempted or
never placed counted, not dropped), scheduler busyness, the conflict fraction over time per scheduler,
and, for a trace with ground truth, the fidelity plots. Time axes are in the unit that fits the span
(``time_unit``). Also ``rich_progress``, a progress bar over virtual time for the command line."""

from __future__ import annotations

import html
import json
import math
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from tools.fauxmaster.replay import LOSSES, MAX_SAMPLES, ReplayResult, decision_model

PLOTS = ("utilization.png", "wait_cdf.png", "busyness.png", "conflicts.png")
FIDELITY_PLOTS = ("fidelity_delay_cdf.png", "fidelity_occupancy.png")  # a trace with ground truth only
MAX_POINTS = 1000  # per line of a plot over time
MATPLOTLIB_MISSING = "the HTML report needs matplotlib: pip install 'omega-scheduler[report]'"


class ResultError(ValueError):
    """A file that is not a replay result (one line naming the file and what is wrong)."""


@dataclass
class Run:
    """One replay in a report: its label, its result as plain data (``ReplayResult.to_dict``), and what
    only a live result has (the cell's statement, the fidelity's raw delays)."""

    label: str
    data: dict[str, Any]
    capacity_model: str = ""
    fidelity_delays: tuple[list[float], list[float]] | None = None


def require_matplotlib() -> None:
    """RuntimeError (``MATPLOTLIB_MISSING``) unless matplotlib can be imported: check before a long run."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise RuntimeError(MATPLOTLIB_MISSING) from None


def write_json(result: ReplayResult, path) -> Path:
    """The result as JSON at ``path`` (parent directories created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(result.to_json() + "\n")
    return path


def run_of(result: ReplayResult, label: str = "") -> Run:
    """``result`` as a ``Run`` of a report."""
    f = result.fidelity
    return Run(label or Path(result.trace).name, result.to_dict(), result.capacity_model,
               (f.real_delays, f.replay_delays) if f is not None else None)


def write_html(result: ReplayResult, directory) -> Path:
    """``index.html``, ``result.json`` and the PNG plots of one replay in ``directory``; the index path."""
    require_matplotlib()
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    write_json(result, out / "result.json")
    return write_report([run_of(result)], out, links={"result.json": "result.json"})


def write_report(runs: list[Run], directory, links: dict[str, str] | None = None) -> Path:
    """``index.html`` and the PNG plots of ``runs`` (one, or several side by side) in ``directory``;
    the index path. The plots are drawn before anything is written."""
    if not runs:
        raise ValueError("a report needs at least one replay result")
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plots = list(zip(PLOTS, (_utilization, _wait_cdf, _busyness, _conflicts), (5.0, 4.0, 3.6, 4.0)))
    if any(r.data.get("fidelity") for r in runs):
        plots += list(zip(FIDELITY_PLOTS, (_fidelity_cdf, _fidelity_occupancy), (3.6, 3.6)))
    images = {}
    for name, draw, height in plots:
        fig = plt.figure(figsize=(7 if len(runs) == 1 else 8.5, height))
        try:
            draw(fig, runs)
            fig.tight_layout()
            images[name] = _png(fig)
        finally:
            plt.close(fig)
    page = _page(runs, [name for name, _, _ in plots], links or {})
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    for name, data in images.items():
        (out / name).write_bytes(data)
    index = out / "index.html"
    index.write_text(page)
    return index


def _png(fig) -> bytes:
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()


# -- reading results back ------------------------------------------------------------------------

_NUMBER = (int, float)
_REQUIRED = {"trace": str, "sim_time_s": _NUMBER, "events": int, "jobs_submitted": int, "jobs_unscheduled": int,
             "schedulers": list, "wait_to_first_attempt": dict, "wait_to_placed": dict, "utilization": list}
_SCHEDULER = {"name": str, "kind": str, "conflict_mode": str, "commit_mode": str, "busyness": _NUMBER,
              "conflict_fraction": _NUMBER, "attempts": int, "tasks_placed": int}
_WAIT = {"jobs": int, "mean": _NUMBER, "p90": _NUMBER, "p99": _NUMBER}
_SAMPLE = {"t": _NUMBER, "cpu": _NUMBER, "memory": _NUMBER, "load_cv": _NUMBER}


def load_result(path) -> dict[str, Any]:
    """The replay result in ``path`` (``omega replay --json`` output, or a ``--html`` directory's
    ``result.json``), checked enough to draw every plot; ``ResultError`` naming the file otherwise."""
    path = Path(path)
    if path.is_dir():
        path = path / "result.json"
    try:
        text = path.read_text()
    except OSError as exc:
        raise ResultError(f"{path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ResultError(f"{path}: not a replay result (not text; write one with omega replay --json)") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ResultError(f"{path}: not a replay result (not JSON: {exc})") from None
    try:
        _check_result(data)
    except ValueError as exc:
        raise ResultError(f"{path}: not a replay result ({exc}; write one with omega replay --json)") from None
    return data


def _fields(value, spec: dict, where: str) -> None:
    if not isinstance(value, dict):
        raise ValueError(f"{where} is not an object")
    missing = [k for k in spec if k not in value]
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise ValueError(f"{where} has no {', '.join(repr(k) for k in missing[:3])}{more}")
    for key, kind in spec.items():
        if isinstance(value[key], bool) or not isinstance(value[key], kind):
            raise ValueError(f"{where}'s {key!r} is not {_KIND_NAMES.get(kind, 'a number')}")


_KIND_NAMES = {str: "a string", int: "an integer", list: "a list", dict: "an object"}


def _numbers(values, where: str, allow_none: bool = False) -> None:
    if not isinstance(values, list) or not all(
            (allow_none and v is None) or (isinstance(v, _NUMBER) and not isinstance(v, bool)) for v in values):
        raise ValueError(f"{where} is not a list of numbers")


def _check_result(d) -> None:
    """ValueError saying what a replay result's plots need and ``d`` lacks."""
    if not isinstance(d, dict):
        raise ValueError("not a JSON object")
    _fields(d, _REQUIRED, "the result")
    for i, s in enumerate(d["schedulers"]):
        _fields(s, _SCHEDULER, f"scheduler {i}")
    for key in ("wait_to_first_attempt", "wait_to_placed"):
        _fields(d[key], _WAIT, key)
    for i, u in enumerate(d["utilization"]):
        _fields(u, _SAMPLE, f"utilization sample {i}")
        extra = u.get("extra", {})
        if not isinstance(extra, dict):
            raise ValueError(f"utilization sample {i}'s 'extra' is not an object")
        _numbers(list(extra.values()), f"utilization sample {i}'s 'extra'")
    for key in ("wall_time_s", "speedup", "utilization_interval_s"):
        if key in d and (isinstance(d[key], bool) or not isinstance(d[key], _NUMBER)):
            raise ValueError(f"the result's {key!r} is not a number")
    losses = d.get("losses", {})
    if not isinstance(losses, dict) or not all(isinstance(n, int) for n in losses.values()):
        raise ValueError("'losses' is not an object of counts")
    cdf = d.get("wait_cdf")
    if cdf:
        _fields(cdf, {"jobs": int, "to_first_attempt": dict, "to_placed": dict}, "wait_cdf")
        for key in ("to_first_attempt", "to_placed"):
            _fields(cdf[key], {"waits_s": list, "fractions": list, "never": int}, f"wait_cdf.{key}")
            _numbers(cdf[key]["waits_s"], f"wait_cdf.{key}.waits_s")
            _numbers(cdf[key]["fractions"], f"wait_cdf.{key}.fractions")
            if len(cdf[key]["waits_s"]) != len(cdf[key]["fractions"]):
                raise ValueError(f"wait_cdf.{key}'s waits_s and fractions differ in length")
    over_time = d.get("conflicts_over_time")
    if over_time:
        _fields(over_time, {"t": list, "schedulers": dict}, "conflicts_over_time")
        _numbers(over_time["t"], "conflicts_over_time.t")
        for name, counts in over_time["schedulers"].items():
            where = f"conflicts_over_time of {name!r}"
            _fields(counts, {"transactions": list, "failed": list, "conflicts": list}, where)
            for key in ("transactions", "failed", "conflicts"):
                _numbers(counts[key], f"{where}.{key}")
                if len(counts[key]) != len(over_time["t"]):
                    raise ValueError(f"{where}.{key} has not one count per sample time")
    fidelity = d.get("fidelity")
    if fidelity is not None:
        try:
            _fidelity_of(fidelity).lines()
            _fields(fidelity["cdf"], {"fractions": list, "real_s": list, "replay_s": list}, "fidelity.cdf")
            for key in ("fractions", "real_s", "replay_s"):
                _numbers(fidelity["cdf"][key], f"fidelity.cdf.{key}", allow_none=True)
            if fidelity["occupancy"] is not None:
                for key in ("t", "real_cpu", "replay_cpu", "real_memory", "replay_memory"):
                    _numbers(fidelity["occupancy"][key], f"fidelity.occupancy.{key}")
        except (TypeError, KeyError, IndexError, AttributeError) as exc:
            raise ValueError(f"its fidelity section does not read ({type(exc).__name__}: {exc})") from None


def _fidelity_of(d: dict):
    from tools.fauxmaster.fidelity import Fidelity

    return Fidelity(**d)


# -- plots ---------------------------------------------------------------------------------------


def time_unit(span_s: float) -> tuple[float, str]:
    """Seconds per unit of a plot's time axis and its label, from the span shown: seconds up to 3 minutes,
    minutes up to 3 hours, hours up to 3 days, days beyond (a 20-minute run is drawn in minutes)."""
    for limit, unit, label in ((180.0, 1.0, "s"), (3 * 3600.0, 60.0, "min"), (72 * 3600.0, 3600.0, "h")):
        if span_s <= limit:
            return unit, label
    return 86_400.0, "days"


def utilization_means(samples: list[dict]) -> dict[str, float]:
    """cpu, memory and each extra resource's (gpu, …) utilization averaged over ``samples`` (dicts as in
    the JSON; a sample without an extra resource counts 0 for it); empty when there are no samples."""
    if not samples:
        return {}
    names = list(dict.fromkeys(name for u in samples for name in u.get("extra", {})))
    means = {"cpu": sum(u["cpu"] for u in samples) / len(samples),
             "memory": sum(u["memory"] for u in samples) / len(samples)}
    for name in names:
        means[name] = sum(u.get("extra", {}).get(name, 0.0) for u in samples) / len(samples)
    return means


def _extra_names(runs: list[Run]) -> list[str]:
    return list(dict.fromkeys(name for r in runs for u in r.data["utilization"] for name in u.get("extra", {})))


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


def _utilization(fig, runs: list[Run]) -> None:
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
        for k, name in enumerate(_extra_names([run])):  # gpu, …: dotted, one per resource
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


def _wait_cdf(fig, runs: list[Run]) -> None:
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


def _busyness(fig, runs: list[Run]) -> None:
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


def _conflicts(fig, runs: list[Run]) -> None:
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


def _fidelity_cdf(fig, runs: list[Run]) -> None:
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


def _fidelity_occupancy(fig, runs: list[Run]) -> None:
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


# -- the page ------------------------------------------------------------------------------------


def _never_text(d: dict) -> str:
    cdf = d.get("wait_cdf")
    if not cdf:
        return ""
    first, placed = cdf["to_first_attempt"], cdf["to_placed"]
    recorded = (f"; {cdf['recorded_at_t0']:,} placed whole by the recorded t = 0 state are not in it"
                if cdf.get("recorded_at_t0") else "")
    return (f"<br>Of the {cdf['jobs']:,} jobs the schedulers had to place: {first['never']:,} never attempted, "
            f"{placed['never']:,} never fully placed ({placed['pending_at_end']:,} still pending at the end, "
            f"{placed['ended_unplaced']:,} ended or killed before){recorded}.")


def _run_html(run: Run) -> str:
    """The figures of a report of one replay."""
    d = run.data
    w1, w2 = d["wait_to_first_attempt"], d["wait_to_placed"]
    speed = (f" in {d['wall_time_s']:,.1f} wall s ({d['speedup']:,.0f}x)"
             if isinstance(d.get("wall_time_s"), _NUMBER) and isinstance(d.get("speedup"), _NUMBER) else "")
    capacity = _capacity(run)
    interval = d.get("utilization_interval_s")
    every = (f", every {interval:,.0f} virtual s (the interval grows with the span so that a replay holds at "
             f"most {2 * MAX_SAMPLES:,} samples)") if interval else ""
    return f"""<p>{d['sim_time_s']:,.0f} virtual s{speed};
{d['events']:,} trace events; {d['jobs_submitted']:,} jobs submitted, {d['jobs_unscheduled']:,}
unscheduled at the end.</p>
{f'<p><small>The cell (trace header): {html.escape(capacity)}</small></p>' if capacity else ''}
{f'<p><small>Decision time: {html.escape(decision_model(d["config"]))}</small></p>' if d.get("config") else ''}
<p>Wait to first attempt: mean {w1['mean']:.2f} s, p90 {w1['p90']:.2f} s, p99 {w1['p99']:.2f} s ({w1['jobs']} jobs).<br>
Wait to fully placed: mean {w2['mean']:.2f} s, p90 {w2['p90']:.2f} s, p99 {w2['p99']:.2f} s ({w2['jobs']} jobs).\
{_never_text(d)}</p>
<p>Utilization: {len(d['utilization']):,} samples{every}.</p>
"""


def summary_rows(runs: list[Run]) -> list[tuple[str, list[str]]]:
    """The figures of ``runs`` side by side: (what, one value per run), "n/a" where a result lacks it."""
    def fmt(value, spec=",.0f"):
        return "n/a" if value is None else format(value, spec)

    def wait(d, key):
        w = d[key]
        return f"{w['mean']:.2f} / {w['p90']:.2f} / {w['p99']:.2f}"

    def never(d, key):
        cdf = d.get("wait_cdf")
        return "n/a" if not cdf else f"{cdf[key]['never']:,} of {cdf['jobs']:,}"

    def mean(d, key):
        value = utilization_means(d["utilization"]).get(key)
        return "n/a" if value is None else fmt(value, ".3f")

    def fidelity(d, key):
        f = d.get("fidelity")
        return "n/a" if not f else fmt(f.get(key), ".3f")

    rows = [("trace", lambda d: Path(d["trace"]).name),
            ("virtual s", lambda d: fmt(d["sim_time_s"])),
            ("wall s", lambda d: fmt(d.get("wall_time_s"), ",.2f")),
            ("virtual s per wall s", lambda d: fmt(d.get("speedup"))),
            ("trace events", lambda d: fmt(d["events"])),
            ("jobs submitted", lambda d: fmt(d["jobs_submitted"])),
            ("unscheduled at the end", lambda d: fmt(d["jobs_unscheduled"])),
            ("wait to first attempt mean / p90 / p99 s", lambda d: wait(d, "wait_to_first_attempt")),
            ("wait to fully placed mean / p90 / p99 s", lambda d: wait(d, "wait_to_placed")),
            ("never attempted", lambda d: never(d, "to_first_attempt")),
            ("never fully placed", lambda d: never(d, "to_placed")),
            ("cpu utilization (mean of samples)", lambda d: mean(d, "cpu")),
            ("memory utilization (mean of samples)", lambda d: mean(d, "memory")),
            *((f"{name} utilization (mean of samples)", lambda d, name=name: mean(d, name))
              for name in _extra_names(runs)),
            ("utilization sample interval s", lambda d: fmt(d.get("utilization_interval_s") or None))]
    if any(r.data.get("fidelity") for r in runs):
        rows += [(f"fidelity {key}", lambda d, key=key: fidelity(d, key))
                 for key in ("scheduled_ratio", "delay_p50_ratio", "delay_p90_ratio", "initial_pending_fraction")]
    return [(what, [value(r.data) for r in runs]) for what, value in rows]


def _summary_html(runs: list[Run]) -> str:
    heads = "".join(f"<th>{html.escape(r.label)}</th>" for r in runs)
    rows = "".join(f"<tr><td style=\"text-align:left\">{html.escape(what)}</td>"
                   + "".join(f"<td>{html.escape(v)}</td>" for v in values) + "</tr>"
                   for what, values in summary_rows(runs))
    cells = "".join(f"<li>{html.escape(r.label)}: {html.escape(r.data['trace'])}"
                    + (f"; the cell (trace header): {html.escape(c)}" if (c := _capacity(r)) else "")
                    + (f"; decision time: {html.escape(decision_model(r.data['config']))}"
                       if r.data.get("config") else "") + "</li>"
                    for r in runs)
    return f"<table><tr><th></th>{heads}</tr>{rows}</table>\n<ul>{cells}</ul>"


def _capacity(run: Run) -> str:
    return run.capacity_model or (run.data.get("fidelity") or {}).get("capacity_model", "")


def _schedulers_html(runs: list[Run]) -> str:
    several = len(runs) > 1
    rows = "".join(
        "<tr>" + (f"<td>{html.escape(run.label)}</td>" if several else "")
        + f"<td>{html.escape(s['name'])}</td><td>{html.escape(s['kind'])}</td>"
        f"<td>{html.escape(s['conflict_mode'])}</td><td>{html.escape(s['commit_mode'])}</td>"
        f"<td>{s['busyness']:.3f}</td><td>{s['conflict_fraction']:.4f}</td><td>{s['attempts']}</td>"
        f"<td>{s['tasks_placed']}</td></tr>" for run in runs for s in run.data["schedulers"])
    return ("<table><tr>" + ("<th>run</th>" if several else "") + "<th>scheduler</th><th>kind</th>"
            "<th>conflict mode</th><th>commit mode</th><th>busyness</th><th>conflict fraction</th><th>attempts</th>"
            f"<th>tasks placed</th></tr>{rows}</table>")


def _losses_html(runs: list[Run]) -> str:
    """Every loss count, zero or not, with what it counts (``tools.fauxmaster.replay.LOSSES``); one
    column per run (a result without a count: n/a)."""
    names = list(dict.fromkeys([*LOSSES, *(n for r in runs for n in r.data.get("losses", {}))]))
    heads = "".join(f"<th>{html.escape(r.label)}</th>" for r in runs) if len(runs) > 1 else "<th>count</th>"

    def count(run: Run, name: str) -> str:
        n = run.data.get("losses", {}).get(name)
        return "n/a" if n is None else f"{n:,}"

    rows = "".join(f"<tr><td>{html.escape(name)}</td>" + "".join(f"<td>{count(r, name)}</td>" for r in runs)
                   + f"<td style=\"text-align:left\">{html.escape(LOSSES.get(name, ''))}</td></tr>"
                   for name in names)
    return f"<h2>Losses</h2><table><tr><th>what</th>{heads}<th></th></tr>{rows}</table>"


def _fidelity_html(runs: list[Run]) -> str:
    parts = []
    for run in runs:
        f = run.data.get("fidelity")
        if not f:
            continue
        lines = "<br>".join(html.escape(line.strip()) for line in _fidelity_of(f).lines())
        title = f"<h3>{html.escape(run.label)}</h3>" if len(runs) > 1 else ""
        parts.append(f"{title}<p>{lines}</p><p><small>{html.escape(f['notes'])}</small></p>")
    if not parts:
        return ""
    images = "".join(f'<p><img src="{name}" alt="{name}"></p>' for name in FIDELITY_PLOTS)
    return f"<h2>Fidelity</h2>{''.join(parts)}{images}"


def _page(runs: list[Run], plots: list[str], links: dict[str, str]) -> str:
    several = len(runs) > 1
    title = ("Replays compared: " + ", ".join(r.label for r in runs)) if several else \
        f"Replay of {runs[0].data['trace']}"
    images = "".join(f'<p><img src="{name}" alt="{name}"></p>' for name in plots if name in PLOTS)
    anchors = " ".join(f'<a href="{html.escape(href)}">{html.escape(text)}</a>' for text, href in links.items())
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>omega {'report' if several else 'replay'}</title>
<style>body{{font-family:sans-serif;margin:2em}}td,th{{padding:2px 8px;text-align:right}}</style></head><body>
<h1>{html.escape(title)}</h1>
{_summary_html(runs) if several else _run_html(runs[0])}
{_schedulers_html(runs)}
{_losses_html(runs)}
{images}
{_fidelity_html(runs)}
{f'<p>{anchors}</p>' if anchors else ''}</body></html>
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
