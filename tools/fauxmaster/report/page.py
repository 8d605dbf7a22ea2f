"""The HTML page of a report (``index.html`` and its PNG plots): of one replay (``write_html``, with its
``result.json``) or of several side by side (``write_report``); matplotlib is checked before any work."""

from __future__ import annotations

import html
from pathlib import Path

from tools.fauxmaster.replay import LOSSES, MAX_SAMPLES, ReplayResult, decision_model
from tools.fauxmaster.report.plots import (
    FIDELITY_PLOTS, PLOTS, draw_busyness, draw_conflicts, draw_fidelity_cdf, draw_fidelity_occupancy,
    draw_utilization, draw_wait_cdf,
)
from tools.fauxmaster.report.result import NUMBER, Run, fidelity_of, run_of, write_json
from tools.fauxmaster.report.summary import slowdown_text, summary_rows

MATPLOTLIB_MISSING = "the HTML report needs matplotlib: pip install 'omega-scheduler[report]'"


def require_matplotlib() -> None:
    """RuntimeError (``MATPLOTLIB_MISSING``) unless matplotlib can be imported: check before a long run."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise RuntimeError(MATPLOTLIB_MISSING) from None


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

    plots = list(zip(PLOTS, (draw_utilization, draw_wait_cdf, draw_busyness, draw_conflicts), (5.0, 4.0, 3.6, 4.0)))
    if any(r.data.get("fidelity") for r in runs):
        plots += list(zip(FIDELITY_PLOTS, (draw_fidelity_cdf, draw_fidelity_occupancy), (3.6, 3.6)))
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
             if isinstance(d.get("wall_time_s"), NUMBER) and isinstance(d.get("speedup"), NUMBER) else "")
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
{f"<p>{html.escape(slowdown_text(d['slowdown']).capitalize()[0] + slowdown_text(d['slowdown'])[1:])}.</p>" if d.get("slowdown") else ""}
<p>Utilization: {len(d['utilization']):,} samples{every}.</p>
"""


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
        lines = "<br>".join(html.escape(line.strip()) for line in fidelity_of(f).lines())
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
