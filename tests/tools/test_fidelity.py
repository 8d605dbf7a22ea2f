"""Ground truth kept by the importers (trace format version 3) and the fidelity of a replay against
it (``tools.fauxmaster.fidelity``): small excerpts written here, answers computed by hand."""

from __future__ import annotations

import gzip
import json
import math

import msgpack
import pytest

from tools.cli import main as cli_main
from tools.fauxmaster.fidelity import compute_fidelity
from tools.fauxmaster.metrics import UtilizationSample
from tools.fauxmaster.replay import ReplayConfig, replay
from tools.trace.format import TraceError, TraceHeader, TraceWriter, read_trace
from tools.trace.google2011.cell import CapacityModel
from tools.trace.google2011.importer import import_google2011
from tools.trace.swf import import_swf
from tools.trace.truth import GroundTruth, Occupancy

from fauxmaster_traces import small_cell_trace
from google_rows import S, import_rows, task_row

def google_excerpt(tmp_path):
    """Two machines (uniform: 0.5 cpu = 32,000 millicores each); every task 0.25 cpu = 16,000.
    t = 0: job 1's tasks run on m5 and m6. Then job 2 submitted at 10 s, scheduled at 12 s (delay
    2); job 3 at 20 s, never scheduled; job 4 at 25 s, scheduled at 29 s (delay 4); job 1 task 0
    finishes at 30 s; job 2 finishes at 100 s (the last row: horizon 100 s)."""
    rows = [task_row(0, 1, 0, "", 0), task_row(0, 1, 0, 5, 1), task_row(0, 1, 1, "", 0), task_row(0, 1, 1, 6, 1),
            task_row(S + 10_000_000, 2, 0, "", 0), task_row(S + 12_000_000, 2, 0, 5, 1),
            task_row(S + 20_000_000, 3, 0, "", 0),
            task_row(S + 25_000_000, 4, 0, "", 0), task_row(S + 29_000_000, 4, 0, 6, 1),
            task_row(S + 30_000_000, 1, 0, 5, 4),
            task_row(S + 100_000_000, 2, 0, 5, 4)]
    return import_rows(tmp_path, rows)


def test_google_importer_keeps_delays_and_occupancy(tmp_path):
    header, reader = read_trace(google_excerpt(tmp_path))
    with reader:
        events = list(reader)
    truth = reader.truth
    assert header.version == 3 and "SUBMIT -> first SCHEDULE" in header.ground_truth
    assert truth.unit == "task" and truth.horizon == 100.0
    assert truth.submitted == {"g2": 10.0, "g3": 20.0, "g4": 25.0}  # t = 0 submissions are not in it
    assert truth.delays == {"g2": [2.0], "g3": [None], "g4": [4.0]}
    occ = truth.occupancy
    # samples every 60 s from 0 to the horizon: t = 0: job 1's two tasks; 60 s: + g2 + g4 - job 1 task 0;
    # 100 s: - g2
    assert occ.t == [0.0, 60.0, 100.0]
    assert occ.cpu == [32_000, 48_000, 32_000] and occ.tasks == [2, 3, 2]
    assert (occ.capacity_cpu, occ.capacity_memory) == (64_000, 262_144)
    assert occ.fractions()[0] == [0.5, 0.75, 0.5]
    assert len(events) == 10  # the truth record is not an event


def test_fidelity_of_hand_built_replay_data():
    """Population (horizon 100): a0 real 1 s / replay 2 s; a1 real 3 s / replay never; a2 real never /
    replay 20 s; b0 real 2 / replay 1; b1 real 10 / replay 8; b2 real 60 s after a submit at 50 (after
    the horizon: never) / replay never. c is submitted after the horizon: not in the population."""
    truth = GroundTruth("task", 150.0, {"a": 10.0, "b": 50.0, "c": 120.0},
                        {"a": [1.0, 3.0, None], "b": [2.0, 10.0, 60.0], "c": [1.0]},
                        Occupancy([0.0, 50.0, 100.0], [100, 200, 300], [10, 10, 10], [1, 2, 3], 1000, 100))
    placed = {"a": {0: 12.0, 2: 30.0}, "b": {0: 51.0, 1: 58.0}}
    samples = [UtilizationSample(0.0, 0.4, 0.1, 0.0, 2), UtilizationSample(60.0, 0.6, 0.2, 0.0, 2)]
    f = compute_fidelity(truth, 100.0, {"a": 10.0, "b": 50.0}, placed, {}, initial_placed=99, initial_not_placed=1,
                         samples=samples)
    assert (f.tasks, f.real_scheduled, f.replay_placed) == (6, 4, 4)
    assert (f.both_placed, f.real_only, f.replay_only, f.neither) == (3, 1, 1, 1)
    assert f.scheduled_ratio == 1.0
    # both placed: real [1, 2, 10], replay [1, 2, 8]; nearest rank p50 = 2nd, p90 = 3rd
    assert (f.real_delay["p50"], f.real_delay["p90"]) == (2.0, 10.0)
    assert (f.replay_delay["p50"], f.replay_delay["p90"]) == (2.0, 8.0)
    assert f.delay_p50_ratio == 1.0 and f.delay_p90_ratio == pytest.approx(0.8)
    assert f.initial_pending_fraction == 0.01
    assert f.goals == {"initial_pending_fraction": True, "scheduled_ratio": True, "delay_p50_ratio": True,
                       "delay_p90_ratio": True}
    # the never-placed are in the CDFs (+inf), counted, not dropped
    assert f.real_delays == [1.0, 2.0, 3.0, 10.0, math.inf, math.inf]
    assert f.replay_delays == [1.0, 2.0, 8.0, 20.0, math.inf, math.inf]
    assert f.cdf["real_s"][9] == 3.0 and f.cdf["real_s"][-1] is None  # at 1/2 and at 1 of the population
    o = f.occupancy
    assert o["real_cpu"] == [0.1, 0.2, 0.3] and o["replay_cpu"] == [0.4, 0.4, 0.6]
    assert o["replay_cpu_mean"] == pytest.approx(1.4 / 3)
    json.dumps(f.to_dict(), allow_nan=False)  # plain JSON: no inf


def test_fidelity_per_job_and_missed_goals():
    truth = GroundTruth("job", 1000.0, {"j1": 0.0, "j2": 5.0, "j3": 7.0}, {"j1": [100.0], "j2": [0.0], "j3": [50.0]})
    placed = {"j1": 300.0, "j2": 5.0}  # j3 never
    f = compute_fidelity(truth, 2000.0, {"j1": 0.0, "j2": 5.0, "j3": 7.0}, None, placed, 0, 0)
    assert (f.tasks, f.real_scheduled, f.replay_placed, f.real_only) == (3, 3, 2, 1)
    assert f.scheduled_ratio == pytest.approx(2 / 3)
    # both placed: real [0, 100], replay [0, 300]: p50 0 vs 0 (ratio 1), p90 100 vs 300
    assert f.delay_p50_ratio == 1.0 and f.delay_p90_ratio == 3.0
    assert f.initial_pending_fraction is None
    assert f.goals == {"initial_pending_fraction": None, "scheduled_ratio": False, "delay_p50_ratio": True,
                       "delay_p90_ratio": False}
    assert f.occupancy is None


def test_replay_of_the_excerpt_reports_fidelity(tmp_path, capsys):
    trace = google_excerpt(tmp_path)
    result = replay(trace, ReplayConfig(submit_latency_s=0.0))  # the model's own delays (not the header's 0.62)
    f = result.fidelity
    assert f.horizon_s == 100.0 and f.tasks == 3
    assert (f.real_scheduled, f.replay_placed, f.replay_only) == (2, 3, 1)  # the replay also places g3
    assert f.scheduled_ratio == 1.5 and f.initial_pending_fraction == 0.0
    assert f.real_delay["p50"] == 2.0 and f.real_delay["p90"] == 4.0
    # g2 placed after one modelled decision (0.1 s per job + 0.005 s per task); g3 fills the cell, so
    # g4 (submitted at 25 s) waits for job 1's task 0 to end at 30 s
    assert f.replay_delay["p50"] == pytest.approx(0.105) and f.replay_delay["p90"] == pytest.approx(5.105)
    assert f.delay_p90_ratio == pytest.approx(5.105 / 4.0)
    assert f.occupancy["real_cpu"] == [0.5, 0.75, 0.5]
    assert result.to_dict()["fidelity"]["scheduled_ratio"] == 1.5
    out = tmp_path / "r.json"
    assert cli_main(["replay", str(trace), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "scheduled_ratio 1.500" in printed and "initial_pending_fraction 0.0000 (goal met)" in printed
    assert json.loads(out.read_text())["fidelity"]["tasks"] == 3


def test_html_report_has_the_fidelity_plots(tmp_path):
    pytest.importorskip("matplotlib")
    from tools.fauxmaster.report.page import write_html

    index = write_html(replay(google_excerpt(tmp_path)), tmp_path / "report")
    assert "<h2>Fidelity</h2>" in index.read_text()
    assert (tmp_path / "report" / "fidelity_delay_cdf.png").stat().st_size > 0
    assert (tmp_path / "report" / "fidelity_occupancy.png").stat().st_size > 0


def test_a_trace_without_ground_truth_replays_as_before(tmp_path):
    result = replay(small_cell_trace(tmp_path / "t.omt", jobs=3))
    assert result.fidelity is None and "fidelity" not in result.to_dict()


def test_version_2_file_without_truth_still_reads(tmp_path):
    header = {"format": "omega-trace", "version": 2, "source": "s", "created_at": "c", "capacity_model": "m",
              "cell": "", "time_unit": "s", "notes": ""}
    path = tmp_path / "v2.omt"
    path.write_bytes(msgpack.packb(header) + msgpack.packb({"type": "end", "events": 0}))
    h, reader = read_trace(path)
    with reader:
        assert list(reader) == [] and reader.truth is None and h.version == 2 and h.ground_truth == ""


def test_header_announcing_truth_needs_the_record(tmp_path):
    path = tmp_path / "x.omt"
    header = {"format": "omega-trace", "version": 3, "source": "s", "created_at": "c", "capacity_model": "m",
              "cell": "", "time_unit": "s", "notes": "", "ground_truth": "delays"}
    path.write_bytes(msgpack.packb(header) + msgpack.packb({"type": "end", "events": 0}))
    with pytest.raises(TraceError, match="record 1: field 'type': expected 'truth'"):
        read_trace(path)
    with pytest.raises(TraceError, match="announces ground truth but none was given"):
        TraceWriter(tmp_path / "y.omt", TraceHeader("s", "c", "m", ground_truth="delays"))
    bad = GroundTruth("task", 1.0, {"a": 0.5}, {"a": [-1.0]})
    with pytest.raises(TraceError, match=r"record 1: field 'delays.a'"):
        TraceWriter(tmp_path / "z.omt", TraceHeader("s", "c", "m"), truth=bad)


def test_swf_importer_keeps_logged_waits(tmp_path):
    lines = ["; MaxNodes: 4",
             "1 0 10 100 2 -1 -1 2 -1 -1 1 1 1 -1 1 -1 -1 -1",
             "2 5 -1 50 1 -1 -1 1 -1 -1 1 1 1 -1 1 -1 -1 -1",  # wait unknown: left out
             "3 7 0 20 4 -1 -1 4 -1 -1 1 1 1 -1 1 -1 -1 -1"]
    log = tmp_path / "x.swf"
    log.write_text("\n".join(lines) + "\n")
    out = tmp_path / "x.omt"
    import_swf(str(log), out)
    _, reader = read_trace(out)
    with reader:
        truth = reader.truth
    assert truth.unit == "job" and truth.delays == {"j1": [10.0], "j3": [0.0]}
    assert truth.submitted == {"j1": 0.0, "j3": 7.0} and truth.horizon == 10.0
    assert "1 job(s) with an unknown wait" in truth.notes
    f = replay(out, {"until": 100.0}).fidelity  # a replay stops at the last submission unless told
    assert f.unit == "job" and f.horizon_s == 10.0 and f.tasks == 2 and f.real_scheduled == 2


def test_bad_inputs_and_outputs_fail_before_the_replay(tmp_path, capsys):
    """A truncated trace (gzip or plain) or an unwritable --json/--html path: one line naming the
    file, exit 65 (a truncated trace: invalid input) or 2 (a missing file, an unwritable path),
    nothing replayed (no summary printed)."""
    trace = google_excerpt(tmp_path)
    data = trace.read_bytes()
    cut = tmp_path / "cut.omt"
    cut.write_bytes(data[:-3])
    compressed = gzip.compress(data)
    cut_gz = tmp_path / "cut.omt.gz"
    cut_gz.write_bytes(compressed[:len(compressed) // 2])
    whole_gz = tmp_path / "whole.omt.gz"
    whole_gz.write_bytes(compressed)
    (tmp_path / "dir").mkdir()
    cases = [([str(cut)], "cut.omt: truncated (it does not end with an end record)", 65),
             ([str(cut_gz)], "cut.omt.gz: truncated (compressed stream ends early)", 65),
             ([str(tmp_path / "missing.omt")], "missing.omt: No such file or directory", 2),
             ([str(trace), "--json", str(tmp_path / "dir")], "--json-out " + str(tmp_path / "dir") + ": is a directory", 2),
             ([str(trace), "--html", str(trace)], ": exists and is not a directory", 2),
             ([str(trace), "--json", str(trace / "x.json")], "is not a directory", 2),
             # a non-finite number would run for ever (nan, inf) or poison every figure: refused
             ([str(trace), "--until", "nan"], "until must be a finite number > 0", 2),
             ([str(trace), "--until", "inf"], "until must be a finite number > 0", 2),
             ([str(trace), "--sample-every", "nan"], "sample_every_s and time_scale must be finite", 2),
             ([str(trace), "--time-scale", "inf"], "sample_every_s and time_scale must be finite", 2),
             ([str(trace), "--t-job", "nan"], "t_job and t_task must be finite numbers >= 0", 2)]
    for argv, message, status in cases:
        with pytest.raises(SystemExit) as info:
            cli_main(["replay", *argv])
        assert info.value.code == status
        captured = capsys.readouterr()
        assert message in captured.err and len(captured.err.strip().splitlines()) == 1, captured.err
        assert "virtual s in" not in captured.out
    assert cli_main(["replay", str(whole_gz), "--json", str(tmp_path / "new" / "r.json")]) == 0


def test_job_events_rows_of_another_shape_are_counted(tmp_path):
    task_events, job_events = tmp_path / "te.csv.gz", tmp_path / "je.csv.gz"
    with gzip.open(task_events, "wt") as f:
        f.write(",".join(map(str, task_row(S + 1_000_000, 1, 0, "", 0))) + "\n")
    with gzip.open(job_events, "wt") as f:
        f.write("1,,1,5,u,0\n")  # 6 columns: dropped
        f.write(f"{S + 2_000_000},,1,5,u,0,n,l\n")  # a kill, 8 columns
    stats = import_google2011(str(task_events), str(job_events), tmp_path / "g.omt", CapacityModel("uniform"))
    assert stats.skipped["job_events rows dropped (not 8 columns)"] == 1
