"""``omega experiment omega-sweep``: a tiny grid on a vendored trace through the sweep engine, its
heatmap report, the saturation rule and bad input."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tools.cli import main
from tools.fauxmaster.experiments import omega_sweep as w
from tools.fauxmaster.experiments.scaling import SATURATED_BUSYNESS, SATURATED_UNSCHEDULED

TINY = str(Path(__file__).resolve().parents[2] / "tests" / "data" / "traces" / "sweep" / "tiny-a.omt.gz")


def test_the_saturation_point_is_the_smallest_saturated_batch_t_job():
    rows = [{"batch_t_job": 4.0, "saturated": True}, {"batch_t_job": 1.0, "saturated": False},
            {"batch_t_job": 2.0, "saturated": True}]
    assert w.saturation(rows) == 2.0
    assert w.saturation(rows[1:2]) is None
    assert w.parse_setups("shared-state,monolithic", "3,1") == [("shared-state", 1), ("shared-state", 3),
                                                                ("monolithic", 1)]
    assert w.parse_floats("--batch-tjob", "2,0.5,2") == [0.5, 2.0]


def test_a_tiny_grid_runs_on_the_engine_and_draws_its_heatmaps(tmp_path, capsys):
    out = tmp_path / "sweep"
    argv = ["experiment", "omega-sweep", TINY, "--until", "60", "--batch-tjob", "0.05,3",
            "--service-tjob", "0.1", "--architectures", "shared-state,monolithic", "--batch-schedulers", "1,3",
            "--jobs", "2", "--out", str(out), "-o", "json", "--html", str(tmp_path / "html")]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["setups"] == ["shared-state x1", "shared-state x3", "monolithic x1"]
    rows = list(csv.DictReader(open(out / "runs.csv")))
    assert len(rows) == 6 and {r["status"] for r in rows} == {"done"}
    for row in rows:  # every point's verdict follows the stated rule from its own figures
        saturated = (float(row["batch_busyness"]) >= SATURATED_BUSYNESS
                     or float(row["batch_unscheduled_fraction"]) >= SATURATED_UNSCHEDULED)
        assert row["saturated"] == str(saturated)
    for name, grid in data["grids"].items():
        cells = grid["0.1"]
        assert set(cells) == {"0.05", "3.0"}
        assert cells["3.0"]["batch_busyness"] > cells["0.05"]["batch_busyness"]  # slower decisions: busier
        saturated = [float(b) for b, c in cells.items() if c["saturated"]]
        assert data["saturation"][name]["0.1"] == (min(saturated) if saturated else None)
    assert "shared-state" in data["shift"] and data["paper"]["saturation_shift"] == 3.0
    page = (tmp_path / "html" / "index.html").read_text()
    assert page.count("<table>") == 2 * len(data["grids"]) + 1 and "background:rgb(255," in page
    # the saturation points and shifts read as a table and sentences with units, not a JSON dump
    assert "<th>saturates at batch t_job</th>" in page and '{"' not in page and "<th>0.05 s</th>" in page
    assert "<li>shared-state: median " in page and "by service t_job: 0.1 s " in page


@pytest.mark.parametrize("argv, message", [
    (["omega-sweep"], "needs TRACE"),
    (["omega-sweep", TINY, "--batch-tjob", "0,1"], "--batch-tjob: expected positive numbers"),
    (["omega-sweep", TINY, "--architectures", "mesos"], "--architectures: unknown mesos"),
    (["omega-sweep", TINY, "--batch-schedulers", "x"], "--batch-schedulers"),
    (["omega-sweep", TINY, "--until", "-1"], "--until must be a finite number > 0"),
    (["omega-sweep", TINY, "--variants", "pow2"], "--variants: not for experiment omega-sweep"),
])
def test_bad_input_is_a_one_line_usage_error(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["experiment", *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_the_table_puts_a_unit_on_every_t_job():
    """The columns are batch t_job values and the saturation point is one: each says it is seconds."""
    import io

    from rich.console import Console

    from tools.cli.experiment import print_omega_sweep

    data = {"trace": "t.omt", "until_s": 60.0, "batch_t_job": [0.5, 2.0], "service_t_job": [0.1],
            "grids": {"shared-state x1": {"0.1": {"0.5": {"batch_busyness": 0.2, "saturated": False},
                                                  "2.0": {"batch_busyness": 0.95, "saturated": True}}}},
            "saturation": {"shared-state x1": {"0.1": 2.0}}, "rule": "saturated: …", "shift": {}, "failed": [],
            "paper": {"saturation_shift": 3.0}}
    out = io.StringIO()
    print_omega_sweep(data, Console(file=out, width=200))
    text = out.getvalue()
    assert "batch busyness by batch t_job" in text and "0.5 s" in text and "saturates at batch t_job" in text
    row = next(line for line in text.splitlines() if "shared-state x1" in line)
    assert "0.1 s" in row and "0.95*" in row and row.rstrip("│ ").endswith("2 s")
