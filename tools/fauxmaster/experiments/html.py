"""``omega experiment --html DIR``: the experiments' reports as one static page (``index.html``:
per experiment its table, setup, the paper's finding and the verdict) beside ``reports.json``."""

from __future__ import annotations

import html
import json
from pathlib import Path

from tools.fauxmaster.experiments.verdicts import format_cell


def write_experiment_html(reports: list, directory) -> Path:
    """Write ``index.html`` and ``reports.json`` of ``reports`` (``ExperimentReport``) in
    ``directory`` (created); the index path."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    (out / "reports.json").write_text(json.dumps([r.to_dict() for r in reports], indent=2, default=str) + "\n")
    sections = "\n".join(_section(r) for r in reports)
    index = out / "index.html"
    index.write_text(f"""<!doctype html>
<html><head><meta charset="utf-8"><title>omega experiments</title>
<style>body{{font-family:sans-serif;margin:2em}} table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}} td:first-child,th:first-child{{text-align:left}}
.ok{{color:#070}} .no{{color:#a00}} .maybe{{color:#a60}}</style></head>
<body><h1>omega experiments</h1><p><a href="reports.json">reports.json</a></p>
{sections}
</body></html>
""")
    return index


def _section(report) -> str:
    head = "".join(f"<th>{html.escape(c.header)}</th>" for c in report.columns)
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(format_cell(row.get(c.key), c.fmt))}</td>"
                                    for c in report.columns) + "</tr>" for row in report.rows)
    verdict = report.verdict
    cls = "ok" if verdict.reproduced else "maybe" if verdict.inconclusive else "no"
    warnings = "".join(f"<p class=\"maybe\">warning: {html.escape(w)}</p>" for w in verdict.warnings)
    broken = "" if report.runs_ok else '<p class="no">cell invariants were violated in at least one run</p>'
    return (f"<h2>{html.escape(report.name)}: {html.escape(report.title)}</h2>"
            f"<table><tr>{head}</tr>{rows}</table>"
            f"<p><b>setup:</b> {html.escape(report.setup)}</p><p><b>paper:</b> {html.escape(report.paper)}</p>"
            f"<p class=\"{cls}\"><b>{html.escape(verdict.text)}</b></p>{warnings}{broken}"
            f"<p>({report.wall_s:.1f} s wall)</p>")
