"""``omega experiment --html DIR``: the experiments' reports as one static page (``index.html``:
per experiment its table, setup, the paper's finding and the verdict) beside ``reports.json``."""

from __future__ import annotations

import json
from pathlib import Path

from tools.fauxmaster.experiments.verdicts import format_cell
from tools.htmltemplate import EMPTY, TABLE_ROW, TD, TH, Html, Template, join


# The page's templates (tools.htmltemplate: every value is escaped, only rendered fragments are not).
PAGE = Template("""<!doctype html>
<html><head><meta charset="utf-8"><title>omega experiments</title>
<style>body{font-family:sans-serif;margin:2em} table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right} td:first-child,th:first-child{text-align:left}
.ok{color:#070} .no{color:#a00} .maybe{color:#a60}</style></head>
<body><h1>omega experiments</h1><p><a href="reports.json">reports.json</a></p>
$sections
</body></html>
""")
SECTION = Template("<h2>$name: $title</h2><table><tr>$head</tr>$rows</table>"
                   "<p><b>setup:</b> $setup</p><p><b>paper:</b> $paper</p>"
                   '<p class="$verdict_class"><b>$verdict</b></p>$warnings$broken<p>($wall s wall)</p>')
WARNING = Template('<p class="maybe">warning: $text</p>')
BROKEN = Template('<p class="no">cell invariants were violated in at least one run</p>').render()


def write_experiment_html(reports: list, directory) -> Path:
    """Write ``index.html`` and ``reports.json`` of ``reports`` (``ExperimentReport``) in
    ``directory`` (created); the index path."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    (out / "reports.json").write_text(json.dumps([r.to_dict() for r in reports], indent=2, default=str) + "\n")
    index = out / "index.html"
    index.write_text(PAGE.render(sections=join((_section(r) for r in reports), "\n")))
    return index


def _section(report) -> Html:
    verdict = report.verdict
    return SECTION.render(
        name=report.name, title=report.title,
        head=join(TH.render(text=c.header) for c in report.columns),
        rows=join(TABLE_ROW.render(cells=join(TD.render(text=format_cell(row.get(c.key), c.fmt))
                                              for c in report.columns))
                  for row in report.rows),
        setup=report.setup, paper=report.paper,
        verdict_class="ok" if verdict.reproduced else "maybe" if verdict.inconclusive else "no",
        verdict=verdict.text, warnings=join(WARNING.render(text=w) for w in verdict.warnings),
        broken=EMPTY if report.runs_ok else BROKEN, wall=f"{report.wall_s:.1f}")
