"""The Omega paper's sweep (Schwarzkopf et al., EuroSys'13 §4-5) on a real trace window:
``omega experiment omega-sweep TRACE``.

Grid: batch t_job × service t_job × set-up, where a set-up is an architecture
(``architectures.ARCHITECTURES``) and a number of batch schedulers (1 or 3; monolithic has
one scheduler whatever the count, so it runs with 1 only). Each point is one fauxmaster replay
of the trace up to ``until`` virtual seconds (``runs.run_case``: shared-state as the replay
does it, ``MultiPath`` for monolithic, ``OfferBroker`` for two-level; t_task 0.005 s) and one
task of the sweep engine (``point_task``). Figures per point: the batch schedulers' mean
busyness (monolithic: its one scheduler's), the service scheduler's, the conflict fraction over
all schedulers (conflicts ÷ successful transactions, stale retries not conflicts) and the share
of batch jobs left unscheduled.

Saturation (``saturation``): for one set-up and one service t_job, the smallest batch t_job of
the grid at which the batch busyness reaches ``SATURATED_BUSYNESS`` or at least
``SATURATED_UNSCHEDULED`` of the batch jobs stay unscheduled (the rule of ``batch-scaling``).
The shift is its ratio 3 batch schedulers ÷ 1 (paper: about 3x).
"""

from __future__ import annotations

import hashlib
import html
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from tools.fauxmaster.experiments.scaling import SATURATED_BUSYNESS, SATURATED_UNSCHEDULED

ARCHITECTURES = ("monolithic", "two-level", "shared-state")
T_TASK = 0.005
PAPER = {"source": "Schwarzkopf et al., Omega: flexible, scalable schedulers for large compute clusters, "
                   "EuroSys 2013, §4-5 (Fig. 5-7, 9)",
         "finding": "scheduler busyness grows with t_job; monolithic saturates first (head-of-line blocking), "
                    "two-level's offers hurt the batch side, shared-state scales; three batch schedulers move the "
                    "saturation point about 3x",
         "saturation_shift": 3.0}


class SweepInputError(ValueError):
    """A bad value of the sweep's flags: one line naming it."""


def parse_floats(flag: str, text: str) -> list[float]:
    """A comma list of positive numbers, kept in ascending order."""
    try:
        values = sorted({float(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise SweepInputError(f"{flag}: expected a comma list of numbers, got {text!r}") from None
    if not values or any(not v > 0 or v == float("inf") for v in values):
        raise SweepInputError(f"{flag}: expected positive numbers, got {text!r}")
    return values


def parse_setups(architectures: str, counts: str) -> list[tuple[str, int]]:
    """(architecture, batch schedulers) pairs; monolithic with 1 only."""
    archs = [a.strip() for a in architectures.split(",") if a.strip()]
    unknown = [a for a in archs if a not in ARCHITECTURES]
    if unknown or not archs:
        raise SweepInputError(f"--architectures: unknown {', '.join(unknown) or '(none given)'}; "
                              f"known: {', '.join(ARCHITECTURES)}")
    try:
        numbers = sorted({int(x) for x in counts.split(",") if x.strip()})
    except ValueError:
        raise SweepInputError(f"--batch-schedulers: expected a comma list of integers, got {counts!r}") from None
    if not numbers or any(n < 1 or n > 16 for n in numbers):
        raise SweepInputError(f"--batch-schedulers: 1 to 16 each, got {counts!r}")
    setups = []
    for arch in dict.fromkeys(archs):
        for n in numbers:
            if arch != "monolithic" or n == 1:
                setups.append((arch, n))
    return setups


def schedulers_of(architecture: str, batch_t_job: float, service_t_job: float, count: int, seed: int):
    """The scheduler configs (and MultiPath/OfferBroker) of one point."""
    from cellstate.model import JobKind
    from tools.fauxmaster.experiments.architectures import CodePath, MultiPath, OfferBroker
    from tools.fauxmaster.scheduler_process import SchedulerConfig

    if architecture == "monolithic":
        paths = {JobKind.BATCH: CodePath("batch", batch_t_job, T_TASK),
                 JobKind.SERVICE: CodePath("service", service_t_job, T_TASK)}
        return [SchedulerConfig("monolithic", "batch", seed=seed + 1, jobs="all")], MultiPath(paths, seed + 1), None
    configs = [SchedulerConfig(f"b{i}", "batch", seed=seed + 1 + i, t_job=batch_t_job, t_task=T_TASK)
               for i in range(count)]
    configs.append(SchedulerConfig("service", "service", seed=seed + 99, t_job=service_t_job, t_task=T_TASK))
    return configs, None, OfferBroker() if architecture == "two-level" else None


def point_task(run) -> tuple[dict[str, Any], dict[str, Any]]:
    """A sweep task: one grid point replayed (``run.settings``: architecture, batch_t_job,
    service_t_job, batch_schedulers, until); (its row, its detail)."""
    from tools.fauxmaster.experiments.runs import run_case

    s = run.settings
    configs, multipath, broker = schedulers_of(s["architecture"], s["batch_t_job"], s["service_t_job"],
                                               s["batch_schedulers"], run.seed)
    f = run_case(run.trace.path, configs, s["architecture"], multipath, broker, until=s["until"])
    batch_names = [c.name for c in configs if c.name != "service"]
    batch = f.of("batch")
    unscheduled = batch.unscheduled / batch.jobs if batch.jobs else 0.0
    busy = f.busyness(batch_names)
    summary = {"id": run.id, "trace": run.trace.name, "seed": run.seed, **s,
               "batch_busyness": round(busy, 4),
               "service_busyness": round(f.busyness(["service"]), 4) if s["architecture"] != "monolithic" else "",
               "conflict_fraction": round(f.conflict_fraction(), 5), "conflicts": f.conflicts(),
               "batch_jobs": batch.jobs, "batch_unscheduled_fraction": round(unscheduled, 4),
               "batch_wait_placed_mean_s": round(batch.wait_placed.mean, 3),
               "service_jobs": f.of("service").jobs, "invariants_ok": f.invariants_ok,
               "saturated": busy >= SATURATED_BUSYNESS or unscheduled >= SATURATED_UNSCHEDULED}
    return summary, {"schedulers": [{"name": m.name, "busyness": m.busyness, "transactions": m.transactions,
                                     "failed_transactions": m.failed_transactions} for m in f.schedulers],
                     "extra": f.extra}


def saturation(rows: list[dict[str, Any]]) -> float | None:
    """The smallest batch t_job of ``rows`` (one set-up, one service t_job) that is saturated."""
    hit = sorted(r["batch_t_job"] for r in rows if r["saturated"] in (True, "True"))
    return hit[0] if hit else None


def run_omega_sweep(trace: str, batch_tjobs: list[float], service_tjobs: list[float],
                    setups: list[tuple[str, int]], until: float, seed: int = 0, engine=None,
                    out: str | None = None, progress=None) -> dict[str, Any]:
    """Run every grid point as a sweep task on ``engine`` (default: the local pool); the report."""
    from tools.sweep.driver import run_sweep
    from tools.sweep.engines import LocalEngine
    from tools.sweep.spec import Spec, SweepRun, Trace, run_id

    if not until > 0:
        raise SweepInputError(f"--until must be > 0 seconds, got {until!r}")
    from tools.fauxmaster.experiments.runs import _check_spans_time

    _check_spans_time(trace)
    digest = hashlib.sha256(Path(trace).read_bytes()).hexdigest()
    source = Trace(Path(trace).name, str(Path(trace).resolve()), digest)
    runs = []
    for architecture, count in setups:
        for service in service_tjobs:
            for batch in batch_tjobs:
                settings = {"architecture": architecture, "batch_schedulers": count, "batch_t_job": batch,
                            "service_t_job": service, "until": until}
                runs.append(SweepRun(run_id(source, settings, seed), source, settings, seed,
                                     task="tools.fauxmaster.experiments.omega_sweep:point_task"))
    out_dir = Path(out) if out else Path(tempfile.mkdtemp(prefix="omega-sweep-"))
    sweep = run_sweep(Spec("omega-sweep", str(out_dir), [source], runs), engine or LocalEngine(), out_dir, progress)
    return summarize(trace, batch_tjobs, service_tjobs, setups, until, sweep)


def summarize(trace, batch_tjobs, service_tjobs, setups, until, sweep) -> dict[str, Any]:
    """Grids by set-up (rows: service t_job, columns: batch t_job), saturation points and shifts."""
    done = [r for r in sweep.rows if r["status"] != "failed"]
    grids, points = {}, {}
    for architecture, count in setups:
        name = f"{architecture} x{count}"
        mine = [r for r in done if r["architecture"] == architecture and int(r["batch_schedulers"]) == count]
        grid = {}
        for service in service_tjobs:
            row = [r for r in mine if float(r["service_t_job"]) == service]
            grid[str(service)] = {str(r["batch_t_job"]): {k: r[k] for k in (
                "batch_busyness", "service_busyness", "conflict_fraction", "batch_unscheduled_fraction",
                "saturated")} for r in row}
            points.setdefault(name, {})[str(service)] = saturation(row)
        grids[name] = grid
    shifts = {}
    for architecture in ARCHITECTURES:
        one, three = points.get(f"{architecture} x1"), points.get(f"{architecture} x3")
        if not one or not three:
            continue
        ratios = {}
        for service in one:
            a, b = one[service], three.get(service)
            ratios[service] = (b / a if a and b else None)
        known = [v for v in ratios.values() if v]
        shifts[architecture] = {"by_service_t_job": ratios, "median": statistics.median(known) if known else None,
                                "note": "3 ÷ 1 batch schedulers' saturating batch t_job; None: one of them did "
                                        "not saturate inside the grid"}
    failed = [{"id": r["id"], "error": r["error"]} for r in sweep.rows if r["status"] == "failed"]
    return {"trace": trace, "until_s": until, "batch_t_job": batch_tjobs, "service_t_job": service_tjobs,
            "setups": [f"{a} x{n}" for a, n in setups], "grids": grids, "saturation": points, "shift": shifts,
            "rule": f"saturated: batch busyness >= {SATURATED_BUSYNESS:g} or >= {SATURATED_UNSCHEDULED:.0%} of batch "
                    f"jobs unscheduled at the end of the window", "paper": PAPER, "failed": failed,
            "sweep": {"out": str(Path(sweep.table).parent), "ran": sweep.ran, "resumed": sweep.resumed,
                      "wall_s": round(sweep.wall_s, 1)}}


def _colour(value: float, top: float) -> str:
    """White (0) to red (``top`` and above)."""
    share = max(0.0, min(1.0, value / top)) if top > 0 else 0.0
    other = int(255 * (1 - share))
    return f"rgb(255,{other},{other})"


def write_sweep_html(data: dict[str, Any], directory) -> Path:
    """``index.html``: per set-up, heatmaps (tables of coloured cells) of batch busyness and conflict
    fraction over batch t_job × service t_job, the saturation points and shifts; ``omega-sweep.json``."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    (out / "omega-sweep.json").write_text(json.dumps(data, indent=2, default=str) + "\n")
    top_conflict = max([c["conflict_fraction"] for g in data["grids"].values() for row in g.values()
                        for c in row.values()] + [1e-9])
    sections = []
    for name, grid in data["grids"].items():
        for key, label, top in (("batch_busyness", "batch scheduler busyness", 1.0),
                                ("conflict_fraction", "conflict fraction", top_conflict)):
            head = "".join(f"<th>{b:g} s</th>" for b in data["batch_t_job"])
            rows = []
            for service in data["service_t_job"]:
                cells = grid.get(str(service), {})
                tds = []
                for b in data["batch_t_job"]:
                    cell = cells.get(str(b))
                    if cell is None:
                        tds.append("<td>—</td>")
                        continue
                    value = float(cell[key])
                    mark = " *" if key == "batch_busyness" and cell["saturated"] in (True, "True") else ""
                    tds.append(f'<td style="background:{_colour(value, top)}">{value:.3f}{mark}</td>')
                rows.append(f"<tr><th>{service:g} s</th>{''.join(tds)}</tr>")
            sections.append(f"<h3>{html.escape(name)}: {label}</h3><table><tr><th>service t_job \\ batch t_job"
                            f"</th>{head}</tr>{''.join(rows)}</table>")
    def times(x):
        return "—" if x is None else f"{x:.2f}x"

    def seconds(x):
        return "— (none saturates in the grid)" if x is None else f"{x:g} s"

    saturation = "".join(f"<tr><td>{html.escape(name)}</td><td>{float(service):g} s</td><td>{seconds(point)}</td></tr>"
                         for name, by_service in data["saturation"].items() for service, point in by_service.items())
    shifts = "".join(f"<li>{html.escape(a)}: median {times(s['median'])}; by service t_job: "
                     + html.escape(", ".join(f"{float(t):g} s {times(r)}" for t, r in s["by_service_t_job"].items()))
                     + "</li>" for a, s in data["shift"].items()) or \
        "<li>none: the grid has no architecture with both 1 and 3 batch schedulers (--batch-schedulers 1,3)</li>"
    index = out / "index.html"
    index.write_text(f"""<!doctype html>
<html><head><meta charset="utf-8"><title>omega sweep</title>
<style>body{{font-family:sans-serif;margin:2em}} table{{border-collapse:collapse;margin-bottom:1em}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}</style></head>
<body><h1>The Omega sweep: {html.escape(str(data["trace"]))} up to {data["until_s"]:g} s</h1>
<p>{html.escape(data["rule"])} (cells marked *). <a href="omega-sweep.json">omega-sweep.json</a></p>
<p>Saturation point: the smallest saturating batch t_job, by set-up and service t_job</p>
<table><tr><th>set-up</th><th>service t_job</th><th>saturates at batch t_job</th></tr>{saturation}</table>
<p>shift, 3 vs 1 batch schedulers (paper: about {PAPER["saturation_shift"]:g}x):</p><ul>{shifts}</ul>
{"".join(sections)}
</body></html>
""")
    return index
