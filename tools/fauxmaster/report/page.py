"""The HTML page of a report (``index.html`` and its PNG plots): of one replay (``write_html``, with its
``result.json``) or of several side by side (``write_report``); matplotlib is checked before any work."""

from __future__ import annotations

from pathlib import Path

from tools.fauxmaster.replay import LOSSES, MAX_SAMPLES, ReplayResult, decision_model
from tools.fauxmaster.report.plots import (
    FIDELITY_PLOTS, PLOTS, draw_busyness, draw_conflicts, draw_fidelity_cdf, draw_fidelity_occupancy,
    draw_utilization, draw_wait_cdf,
)
from tools.fauxmaster.report.result import NUMBER, Run, fidelity_of, run_of, write_json
from tools.fauxmaster.report.summary import settings_compared, slowdown_text, summary_rows
from tools.htmltemplate import EMPTY, TABLE_ROW, TD, TH, Html, Template, join

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


def write_report(runs: list[Run], directory, links: dict[str, str] | None = None,
                 preface: list[str] = ()) -> Path:
    """``index.html`` and the PNG plots of ``runs`` (one, or several side by side) in ``directory``;
    the index path. ``preface``: lines shown first, under the title (``--seeds``: the mean and 95 %
    interval of each headline figure). The plots are drawn before anything is written."""
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
    page = _page(runs, [name for name, _, _ in plots], links or {}, preface)
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


# The page's templates (tools.htmltemplate: every value is escaped, only rendered fragments are not).
PAGE = Template("""<!doctype html><html><head><meta charset="utf-8"><title>omega $kind</title>
<style>body{font-family:sans-serif;margin:2em}td,th{padding:2px 8px;text-align:right}</style></head><body>
<h1>$title</h1>
$preface
$figures
$schedulers
$losses
$images
$fidelity
$links</body></html>
""")
RUN = Template("""<p>$sim_time virtual s$speed;
$events trace events; $submitted jobs submitted, $unscheduled
unscheduled at the end.</p>
$capacity
$decision
<p>Wait to first attempt: mean $w1_mean s, p90 $w1_p90 s, p99 $w1_p99 s ($w1_jobs jobs).<br>
Wait to fully placed: mean $w2_mean s, p90 $w2_p90 s, p99 $w2_p99 s ($w2_jobs jobs).$never</p>
$slowdown
<p>Utilization: $samples samples$every.</p>
""")
NEVER = Template("<br>Of the $jobs jobs the schedulers had to place: $never_attempted never attempted, "
                 "$never_placed never fully placed ($pending still pending at the end, "
                 "$ended ended or killed before)$recorded.")
TABLE = Template("<table><tr>$heads</tr>$rows</table>")
TD_LEFT = Template('<td style="text-align:left">$text</td>')
PARAGRAPH = Template("<p>$text</p>")
SMALL = Template("<p><small>$text</small></p>")
H2 = Template("<h2>$text</h2>")
H3 = Template("<h3>$text</h3>")
IMAGE = Template('<p><img src="$name" alt="$name"></p>')
LINK = Template('<a href="$href">$text</a>')
FIDELITY_RUN = Template("$title<p>$lines</p><p><small>$notes</small></p>")


def _row(*cells: Html) -> Html:
    return TABLE_ROW.render(cells=join(cells))


def _never_text(d: dict) -> Html:
    cdf = d.get("wait_cdf")
    if not cdf:
        return EMPTY
    first, placed = cdf["to_first_attempt"], cdf["to_placed"]
    recorded = (f"; {cdf['recorded_at_t0']:,} placed whole by the recorded t = 0 state are not in it"
                if cdf.get("recorded_at_t0") else "")
    return NEVER.render(jobs=f"{cdf['jobs']:,}", never_attempted=f"{first['never']:,}",
                        never_placed=f"{placed['never']:,}", pending=f"{placed['pending_at_end']:,}",
                        ended=f"{placed['ended_unplaced']:,}", recorded=recorded)


def _run_html(run: Run) -> Html:
    """The figures of a report of one replay."""
    d = run.data
    w1, w2 = d["wait_to_first_attempt"], d["wait_to_placed"]
    speed = (f" in {d['wall_time_s']:,.1f} wall s ({d['speedup']:,.0f}x)"
             if isinstance(d.get("wall_time_s"), NUMBER) and isinstance(d.get("speedup"), NUMBER) else "")
    capacity = _capacity(run)
    interval = d.get("utilization_interval_s")
    every = (f", every {interval:,.0f} virtual s (the interval grows with the span so that a replay holds at "
             f"most {2 * MAX_SAMPLES:,} samples)") if interval else ""
    slowdown = slowdown_text(d["slowdown"]) if d.get("slowdown") else ""
    return RUN.render(
        sim_time=f"{d['sim_time_s']:,.0f}", speed=speed, events=f"{d['events']:,}",
        submitted=f"{d['jobs_submitted']:,}", unscheduled=f"{d['jobs_unscheduled']:,}",
        capacity=SMALL.render(text=f"The cell (trace header): {capacity}") if capacity else EMPTY,
        decision=SMALL.render(text=f"Decision time: {decision_model(d['config'])}") if d.get("config") else EMPTY,
        w1_mean=f"{w1['mean']:.2f}", w1_p90=f"{w1['p90']:.2f}", w1_p99=f"{w1['p99']:.2f}", w1_jobs=f"{w1['jobs']:,}",
        w2_mean=f"{w2['mean']:.2f}", w2_p90=f"{w2['p90']:.2f}", w2_p99=f"{w2['p99']:.2f}", w2_jobs=f"{w2['jobs']:,}",
        never=_never_text(d),
        slowdown=PARAGRAPH.render(text=slowdown[:1].upper() + slowdown[1:] + ".") if slowdown else EMPTY,
        samples=f"{len(d['utilization']):,}", every=every)


def _summary_html(runs: list[Run]) -> Html:
    """Several runs: the settings that differ first, the figures side by side, then what every run
    shares, stated once (the cell paragraph is not repeated per run)."""
    differ, shared = settings_compared(runs)
    labels = [TH.render(text=""), *(TH.render(text=r.label) for r in runs)]
    if differ:
        opening = TABLE.render(heads=join(labels), rows=join(
            _row(TD_LEFT.render(text=name), *(TD_LEFT.render(text=v) for v in values)) for name, values in differ))
    else:
        opening = PARAGRAPH.render(text="None: every run has the same settings (listed below the figures).")
    rows = [_row(TD_LEFT.render(text=what), *(TD.render(text=v) for v in values))
            for what, values in summary_rows(runs)]
    models = {decision_model(r.data["config"]) for r in runs if r.data.get("config")}
    common = [f"{name}: {value}" for name, value in shared]
    if len(models) == 1 and all(r.data.get("config") for r in runs):
        common.insert(min(2, len(common)), f"decision time: {models.pop()}")
    return join([H2.render(text="Settings that differ"), opening, TABLE.render(heads=join(labels), rows=join(rows)),
                 SMALL.render(text="Shared by every run: " + "; ".join(common)) if common else EMPTY], "\n")


def _capacity(run: Run) -> str:
    return run.capacity_model or (run.data.get("fidelity") or {}).get("capacity_model", "")


def _schedulers_html(runs: list[Run]) -> Html:
    several = len(runs) > 1
    heads = (["run"] if several else []) + ["scheduler", "kind", "conflict mode", "commit mode", "busyness",
                                           "conflict fraction", "attempts", "tasks placed"]
    rows = [_row(*(TD.render(text=v) for v in ([run.label] if several else []) + [
                s["name"], s["kind"], s["conflict_mode"], s["commit_mode"], f"{s['busyness']:.3f}",
                f"{s['conflict_fraction']:.4f}", f"{s['attempts']:,}", f"{s['tasks_placed']:,}"]))
            for run in runs for s in run.data["schedulers"]]
    return TABLE.render(heads=join(TH.render(text=h) for h in heads), rows=join(rows))


def _losses_html(runs: list[Run]) -> Html:
    """Every loss count, zero or not, with what it counts (``tools.fauxmaster.replay.LOSSES``); one
    column per run (a result without a count: n/a)."""
    names = list(dict.fromkeys([*LOSSES, *(n for r in runs for n in r.data.get("losses", {}))]))
    heads = [r.label for r in runs] if len(runs) > 1 else ["count"]

    def count(run: Run, name: str) -> str:
        n = run.data.get("losses", {}).get(name)
        return "n/a" if n is None else f"{n:,}"

    rows = [_row(TD.render(text=name), *(TD.render(text=count(r, name)) for r in runs),
                 TD_LEFT.render(text=LOSSES.get(name, ""))) for name in names]
    return join([H2.render(text="Losses"),
                 TABLE.render(heads=join(TH.render(text=h) for h in ["what", *heads, ""]), rows=join(rows))])


def _fidelity_html(runs: list[Run]) -> Html:
    """Each run's fidelity lines (without the cell paragraph: the figures above show it) and the plots."""
    parts = []
    for run in runs:
        f = run.data.get("fidelity")
        if not f:
            continue
        parts.append(FIDELITY_RUN.render(
            title=H3.render(text=run.label) if len(runs) > 1 else EMPTY,
            lines=join((line.strip() for line in fidelity_of(f).lines(cell=False)), "<br>"), notes=f["notes"]))
    if not parts:
        return EMPTY
    return join([H2.render(text="Fidelity"), *parts, *(IMAGE.render(name=name) for name in FIDELITY_PLOTS)])


def _page(runs: list[Run], plots: list[str], links: dict[str, str], preface: list[str] = ()) -> Html:
    several = len(runs) > 1
    title = ("Replays compared: " + ", ".join(r.label for r in runs)) if several else \
        f"Replay of {runs[0].data['trace']}"
    anchors = join((LINK.render(href=href, text=text) for text, href in links.items()), " ")
    return PAGE.render(
        kind="report" if several else "replay", title=title,
        preface=PARAGRAPH.render(text=join((line.strip() for line in preface), "<br>")) if preface else EMPTY,
        figures=_summary_html(runs) if several else _run_html(runs[0]),
        schedulers=_schedulers_html(runs), losses=_losses_html(runs),
        images=join(IMAGE.render(name=name) for name in plots if name in PLOTS),
        fidelity=_fidelity_html(runs), links=PARAGRAPH.render(text=anchors) if anchors else EMPTY)
