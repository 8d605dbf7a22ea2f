"""Issue 20.6 (d): utilization samples are bounded by the span (``MAX_SAMPLES``), evenly spaced, and
the interval in use is reported; a short replay samples as before."""

from __future__ import annotations

import json

import pytest
from fauxmaster_traces import batch, machine, write

from tools.cli import main
from tools.fauxmaster.replay import MAX_SAMPLES, ReplayConfig, replay
from tools.trace.events import JobSubmit, MachineAdd

ONE = [dict(name="b", kind="batch")]


def long_trace(path, span: float = 10_000.0) -> str:
    """2 machines; a short job at t = 1 and one at ``span`` (the trace's end)."""
    events = [MachineAdd(0.0, machine(i)) for i in range(2)]
    events += [JobSubmit(1.0, batch("a", 1, duration=5.0)), JobSubmit(span, batch("z", 1, duration=5.0))]
    return write(path, events)


def _spacing(result) -> set[float]:
    times = [u.t for u in result.utilization[:-1]]  # the last: the final sample at the stop
    return {b - a for a, b in zip(times, times[1:])}


def test_a_replay_to_the_trace_end_thins_its_samples(tmp_path):
    # 1 s asked over 10,000 s: 4,000 held at t = 3,999 -> every 2 s; again at 7,998 -> every 4 s
    result = replay(long_trace(tmp_path / "t.omt"), ReplayConfig(schedulers=ONE, sample_every_s=1.0))
    assert result.sim_time_s == 10_000.0 and result.utilization_interval_s == 4.0
    assert len(result.utilization) == 2_501 + 1 <= 2 * MAX_SAMPLES + 1  # 0, 4, ..., 10,000 and the final one
    assert _spacing(result) == {4.0} and result.utilization[0].t == 0.0


def test_a_replay_with_until_starts_at_the_span_interval(tmp_path):
    config = ReplayConfig(schedulers=ONE, sample_every_s=1.0, until=10_000.0)
    result = replay(long_trace(tmp_path / "t.omt"), config)
    assert result.utilization_interval_s == 10_000.0 / MAX_SAMPLES == 5.0
    assert len(result.utilization) == MAX_SAMPLES + 1 + 1 and _spacing(result) == {5.0}


def test_a_short_replay_samples_as_asked(tmp_path):
    result = replay(long_trace(tmp_path / "t.omt", span=100.0), ReplayConfig(schedulers=ONE, sample_every_s=1.0))
    assert result.utilization_interval_s == 1.0 and len(result.utilization) == 101 + 1
    assert result.to_dict(include_wall=False)["utilization_interval_s"] == 1.0


def test_the_summary_and_report_state_the_interval(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out, report = tmp_path / "r.json", tmp_path / "report"
    assert main(["replay", long_trace(tmp_path / "t.omt"), "--schedulers", "b:batch", "--sample-every", "1",
                 "--json", str(out), "--html", str(report)]) == 0
    assert "utilization: 2,502 samples, every 4 virtual s" in capsys.readouterr().out
    assert json.loads(out.read_text())["utilization_interval_s"] == 4.0
    assert "2,502 samples, every 4 virtual s" in (report / "index.html").read_text()
