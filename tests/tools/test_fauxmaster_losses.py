"""Issue 20.6 (b): what a replay does not apply as the trace has it is counted and shown
(summary, --json, HTML report), every count zero or not."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from fauxmaster_traces import batch, machine, write

from cellstate.model import Job, JobKind
from cellstate.resources import Resources
from tools.cli import main
from tools.fauxmaster.cell import CellCounters
from tools.fauxmaster.replay import LOSSES, ReplayConfig, replay, replay_losses
from tools.trace.events import JobSubmit, MachineAdd


def service_with_duration_trace(path) -> str:
    """2 machines; a service job with a duration_s (ignored), a batch job with one (used), and a
    service job without one (nothing to ignore)."""
    events = [MachineAdd(0.0, machine(i)) for i in range(2)]
    events += [JobSubmit(1.0, Job("svc", JobKind.SERVICE, 2, Resources(500, 256), duration_s=5.0)),
               JobSubmit(1.0, batch("b", 2, duration=3.0)),
               JobSubmit(2.0, Job("svc2", JobKind.SERVICE, 1, Resources(500, 256)))]
    return write(path, events)


def test_service_durations_are_counted_as_ignored(tmp_path):
    config = ReplayConfig(schedulers=[dict(name="b", kind="batch"), dict(name="s", kind="service")], until=20.0)
    result = replay(service_with_duration_trace(tmp_path / "t.omt"), config)
    assert result.losses == {"durations_ignored": 1, "gang_refusals": 0, "jobs_refused_at_end": 0,
                             "events_skipped": 0, "initial_not_placed": 0, "gangs_pending_at_end": 0,
                             "gangs_never_fit": 0}
    assert result.to_dict(include_wall=False)["losses"] == result.losses
    assert list(result.losses) == list(LOSSES)  # every count, in the documented order


def test_refusals_and_skips_are_read_from_the_tallies_and_counters():
    """PlanTooLarge refusals (each scheduler's tally.too_large) and the jobs still held out
    (RefusedJobs) are summed over the schedulers; skipped events over their reasons."""
    schedulers = [SimpleNamespace(tally=SimpleNamespace(too_large=3), refused={"g1": None, "g2": None}),
                  SimpleNamespace(tally=SimpleNamespace(too_large=1), refused={})]
    counters = CellCounters(skipped={"kill of an unknown job": 2, "machine_add of a machine already up": 1},
                            initial_not_placed={"no room": 4}, durations_ignored=5)
    assert replay_losses(schedulers, counters, (3, 1)) == {"durations_ignored": 5, "gang_refusals": 4,
                                                           "jobs_refused_at_end": 2, "events_skipped": 3,
                                                           "initial_not_placed": 4, "gangs_pending_at_end": 3,
                                                           "gangs_never_fit": 1}


def test_cli_shows_losses_in_summary_json_and_report(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out, report = tmp_path / "r.json", tmp_path / "report"
    code = main(["replay", service_with_duration_trace(tmp_path / "t.omt"), "--schedulers", "b:batch,s:service",
                 "--until", "20", "--json", str(out), "--html", str(report)])
    assert code == 0
    assert ("losses: durations ignored 1, gang refusals 0, jobs refused at end 0, events skipped 0, "
            "initial not placed 0, gangs pending at end 0, gangs never fit 0") in capsys.readouterr().out
    assert json.loads(out.read_text())["losses"]["durations_ignored"] == 1
    page = (report / "index.html").read_text()
    assert "<h2>Losses</h2>" in page
    for name in LOSSES:
        assert f"<tr><td>{name}</td>" in page
