"""HTML pages from templates: every value escaped, rendered fragments inserted as they are, and a
report page whose labels and trace names carry markup shows them as text."""

from __future__ import annotations

import pytest

from tools.htmltemplate import EMPTY, Html, Template, escape, join

CELL = Template("<td>$text</td>")


def test_every_value_is_escaped_quotes_included():
    page = Template('<a href="$href">$text</a>').render(href='x" onclick="y', text="<b>a & b</b>")
    assert page == '<a href="x&quot; onclick=&quot;y">&lt;b&gt;a &amp; b&lt;/b&gt;</a>'
    assert CELL.render(text=1.5) == "<td>1.5</td>" and CELL.render(text="it's") == "<td>it&#x27;s</td>"


def test_rendered_fragments_go_in_as_they_are_and_only_they():
    row = Template("<tr>$cells</tr>").render(cells=join([CELL.render(text="<1>"), "<2>"]))
    assert row == "<tr><td>&lt;1&gt;</td>&lt;2&gt;</tr>" and isinstance(row, Html)
    assert escape(Html("<br>")) == "<br>" and escape("<br>") == "&lt;br&gt;"
    assert join(["a", Html("<i>b</i>")], "<br>") == "a<br><i>b</i>"
    assert CELL.each([{"text": "a"}, {"text": "<b>"}]) == "<td>a</td><td>&lt;b&gt;</td>"
    assert Template("<p>$x</p>").render(x=EMPTY) == "<p></p>"


def test_a_missing_field_or_a_stray_dollar_is_an_error_not_a_blank():
    with pytest.raises(KeyError, match="text"):
        CELL.render()
    with pytest.raises(ValueError):
        Template("<td>$</td>").render()
    assert Template("$$5 for $what").render(what="<x>") == "$5 for &lt;x&gt;"


def test_a_report_page_shows_markup_in_labels_and_traces_as_text():
    from tools.fauxmaster.report.page import _page
    from tools.fauxmaster.report.result import Run

    wait = {"mean": 1.0, "p90": 2.0, "p99": 3.0, "jobs": 1}
    data = {"trace": "<script>t</script>.omt", "sim_time_s": 10, "events": 2, "jobs_submitted": 1,
            "jobs_unscheduled": 0, "wait_to_first_attempt": wait, "wait_to_placed": wait, "utilization": [],
            "schedulers": [{"name": "b<1>", "kind": "batch", "conflict_mode": "resource-fit",
                            "commit_mode": "incremental", "busyness": 0.5, "conflict_fraction": 0.0,
                            "attempts": 1, "tasks_placed": 1}],
            "losses": {"x & y": 2}}
    one = _page([Run("one", data)], [], {"a \"b\"": "r.json?x=1&y=2"})
    assert "<h1>Replay of &lt;script&gt;t&lt;/script&gt;.omt</h1>" in one and "<script>" not in one
    assert "<td>b&lt;1&gt;</td>" in one and "<tr><td>x &amp; y</td><td>2</td>" in one
    assert '<a href="r.json?x=1&amp;y=2">a &quot;b&quot;</a>' in one
    two = _page([Run("<i>a</i>", data), Run("b", data)], [], {})
    assert "<h1>Replays compared: &lt;i&gt;a&lt;/i&gt;, b</h1>" in two and "<i>" not in two
