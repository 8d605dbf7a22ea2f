"""Fidelity per imported part (issue 30): the importer records each part's span in the ground
truth, the fidelity section gives the figures per part window, and a later part imported alone is
said to have a lower-bound occupancy truth. Answers computed by hand."""

from __future__ import annotations

import pytest

from tools.fauxmaster.fidelity import compute_fidelity
from tools.fauxmaster.replay import replay
from tools.trace.format import TraceError, read_trace
from tools.trace.google2011.cell import CapacityModel
from tools.trace.google2011.importer import import_google2011
from tools.trace.truth import GroundTruth, Window, truth_from_record, truth_record

from google_rows import S, task_row, write_gz

M = 1_000_000


def _parts(tmp_path):
    """Part 0 ends at 50 s, part 1 at 100 s. Part 0: job 1 runs at t = 0 on m5; job 2 submitted
    at 10 s, scheduled at 12 s; job 3 at 40 s, scheduled at 55 s (in part 1). Part 1: job 4 at 60 s,
    scheduled at 61 s; job 1 task 0 finishes at 100 s."""
    p0 = [task_row(0, 1, 0, "", 0), task_row(0, 1, 0, 5, 1),
          task_row(S + 10 * M, 2, 0, "", 0), task_row(S + 12 * M, 2, 0, 6, 1),
          task_row(S + 40 * M, 3, 0, "", 0), task_row(S + 50 * M, 2, 0, 6, 4)]
    p1 = [task_row(S + 55 * M, 3, 0, 6, 1), task_row(S + 60 * M, 4, 0, "", 0), task_row(S + 61 * M, 4, 0, 6, 1),
          task_row(S + 100 * M, 1, 0, 5, 4)]
    return (write_gz(tmp_path / "part-00000-of-00500.csv.gz", p0),
            write_gz(tmp_path / "part-00001-of-00500.csv.gz", p1), write_gz(tmp_path / "je.csv.gz", []))


def _truth(path):
    _, reader = read_trace(path)
    with reader:
        list(reader)
    return reader.truth


def test_importer_records_one_window_per_part(tmp_path):
    p0, p1, je = _parts(tmp_path)
    out = tmp_path / "both.omt"
    import_google2011([p0, p1], je, out, CapacityModel("uniform"))
    truth = _truth(out)
    assert truth.windows == (Window(0, 0.0, 50.0), Window(1, 50.0, 100.0))
    assert truth.occupancy_lower_bound is False
    f = replay(str(out)).fidelity
    assert [w["part"] for w in f.windows] == [0, 1]
    # part 0's population: g2 (10 s) and g3 (40 s, scheduled in part 1 yet counted in its own part); part 1: g4
    assert [w["tasks"] for w in f.windows] == [2, 1]
    assert [w["real_scheduled"] for w in f.windows] == [2, 1]
    w0, w1 = f.windows
    assert (w0["real_delay_p50_s"], w0["real_delay_p90_s"]) == (2.0, 15.0)
    assert w0["initial_pending_fraction"] == 0.0 and w1["initial_pending_fraction"] == 0.0
    assert (w1["start_s"], w1["end_s"], w1["real_delay_p50_s"]) == (50.0, 100.0, 1.0)
    assert w1["scheduled_ratio"] == 1.0 and w1["goals"]["scheduled_ratio"] is True
    assert not f.warnings and not f.occupancy_lower_bound
    text = "\n".join(f.lines())
    assert "part 0 (0..50 s, 2 tasks)" in text and "part 1 (50..100 s, 1 tasks)" in text
    assert "WARNING" not in text and "LOWER BOUND" not in text


def test_a_later_part_alone_warns_and_bounds_its_occupancy(tmp_path):
    _, p1, je = _parts(tmp_path)
    out = tmp_path / "one.omt"
    import_google2011([p1], je, out, CapacityModel("uniform"))
    truth = _truth(out)
    assert truth.occupancy_lower_bound is True and "lower bound" in truth.notes
    assert [w.part for w in truth.windows] == [1]
    f = replay(str(out)).fidelity
    assert f.occupancy_lower_bound and len(f.warnings) == 1 and "part 1" in f.warnings[0]
    text = "\n".join(f.lines())
    assert "LOWER BOUND" in text and "WARNING: the trace opens at part 1" in text
    assert f.to_dict()["occupancy_lower_bound"] is True


def test_a_truth_without_windows_is_one_window():
    """An older version 3 truth record (no windows field) reads, and its fidelity has one window."""
    truth = GroundTruth("task", 100.0, {"a": 10.0}, {"a": [1.0]})
    record = truth_record(truth)
    del record["windows"], record["occupancy_lower_bound"]
    old = truth_from_record("truth", record)
    assert old.windows == () and old.occupancy_lower_bound is False
    f = compute_fidelity(old, 100.0, {"a": 10.0}, {"a": {0: 13.0}}, {}, 10, 0)
    assert len(f.windows) == 1
    w = f.windows[0]
    assert (w["part"], w["start_s"], w["end_s"], w["tasks"]) == (0, 0.0, 100.0, 1)
    assert w["delay_p50_ratio"] == 3.0 and w["goals"]["delay_p50_ratio"] is False


def test_later_window_pending_at_its_opening():
    """Window 1 opens at 50 s: a (10 s, real at 11 s) and b (20 s, real at 30 s) were scheduled by
    the real cell by then; the replay placed a at 12 s and b only at 70 s: 1 of 2 pending. c (60 s)
    is window 1's population, placed by both; the replay placed it more than 1.05 x: no, once."""
    truth = GroundTruth("task", 100.0, {"a": 10.0, "b": 20.0, "c": 60.0}, {"a": [1.0], "b": [10.0], "c": [2.0]},
                        windows=(Window(0, 0.0, 50.0), Window(1, 50.0, 100.0)))
    placed = {"a": {0: 12.0}, "b": {0: 70.0}, "c": {0: 61.0}}
    f = compute_fidelity(truth, 100.0, {"a": 10.0, "b": 20.0, "c": 60.0}, placed, {}, 5, 0)
    w0, w1 = f.windows
    assert w0["tasks"] == 2 and w0["initial_pending_fraction"] == 0.0
    assert w1["initial_pending_fraction"] == 0.5 and w1["goals"]["initial_pending_fraction"] is False
    assert w1["delay_p50_ratio"] == 0.5 and w1["scheduled_ratio"] == 1.0


def test_bad_windows_are_refused(tmp_path):
    record = truth_record(GroundTruth("task", 100.0, {"a": 10.0}, {"a": [1.0]}))
    record["windows"] = [{"part": 0, "start": 0.0, "end": 60.0}, {"part": 1, "start": 50.0, "end": 100.0}]
    with pytest.raises(TraceError, match=r"record 1: field 'windows': window of part 1"):
        path = tmp_path / "w.omt"
        import msgpack
        header = {"format": "omega-trace", "version": 3, "source": "s", "created_at": "c", "capacity_model": "m",
                  "cell": "", "time_unit": "s", "notes": "", "ground_truth": "delays"}
        path.write_bytes(msgpack.packb(header) + msgpack.packb(record) + msgpack.packb({"type": "end", "events": 0}))
        read_trace(path)
    with pytest.raises(ValueError, match="not after the previous one's end"):
        GroundTruth("task", 1.0, {}, {}, windows=(Window(0, 0.0, 2.0), Window(1, 1.0, 3.0)))



def test_submit_latency_delays_what_the_schedulers_see(tmp_path):
    """With a 0.5 s submission latency the excerpt's g2 (submitted at 10 s, free room) is placed one
    modelled decision (0.105 s) after it reaches the schedulers: 0.605 s after its submission, and
    its wait counts from the submission. The t = 0 state is written at once."""
    from tools.fauxmaster.replay import ReplayConfig
    p0, p1, je = _parts(tmp_path)
    out = tmp_path / "both.omt"
    import_google2011([p0, p1], je, out, CapacityModel("uniform"))
    plain = replay(str(out), ReplayConfig(submit_latency_s=0.0)).fidelity  # (not the header's 0.62)
    late = replay(str(out), ReplayConfig(submit_latency_s=0.5))
    f = late.fidelity
    assert f.initial_pending_fraction == plain.initial_pending_fraction == 0.0
    assert plain.windows[0]["replay_delay_min_s"] == pytest.approx(0.105)
    assert f.windows[0]["replay_delay_min_s"] == pytest.approx(0.605)
    assert "submissions reach the schedulers 0.5 s late" in __import__(
        "tools.fauxmaster.replay", fromlist=["decision_model"]).decision_model(late.to_dict()["config"])
    with pytest.raises(ValueError, match="submit_latency_s must be a finite number >= 0"):
        ReplayConfig(submit_latency_s=-1.0)


def test_a_google_import_states_its_latency_and_a_replay_applies_it_unless_told(tmp_path):
    """The importer writes the calibrated latency into the header; a replay given none takes it
    (and its config says so), one given 0 replays without; an older header without one reads as 0."""
    from tools.fauxmaster.replay import ReplayConfig
    from tools.trace.google2011.schema import SUBMIT_LATENCY_S
    p0, p1, je = _parts(tmp_path)
    out = tmp_path / "both.omt"
    import_google2011([p0, p1], je, out, CapacityModel("uniform"))
    header, reader = read_trace(out)
    reader.close()
    assert header.submit_latency_s == SUBMIT_LATENCY_S == 0.62
    default = replay(str(out))
    assert default.to_dict()["config"]["submit_latency_s"] == 0.62
    assert default.fidelity.windows[0]["replay_delay_min_s"] == pytest.approx(0.105 + 0.62)
    none = replay(str(out), ReplayConfig(submit_latency_s=0.0))
    assert none.fidelity.windows[0]["replay_delay_min_s"] == pytest.approx(0.105)
    from cellstate.codec.fields import CodecError
    from tools.trace.header import header_from_record
    old = {"format": "omega-trace", "version": 3, "source": "s", "created_at": "c", "capacity_model": "m",
           "cell": "", "time_unit": "s", "notes": "", "ground_truth": ""}
    assert header_from_record("r0", old).submit_latency_s == 0.0
    with pytest.raises(CodecError, match="submit_latency_s"):
        header_from_record("r0", {**old, "submit_latency_s": -1})


def test_a_kill_before_the_latency_passes_is_counted(tmp_path):
    """Job 2 is submitted at 10 s and killed (job_events) at 10.2 s: with a 1 s latency its record
    never reaches the store; the kill is counted, not lost, and nothing is placed for it."""
    from tools.fauxmaster.replay import ReplayConfig
    rows = [task_row(0, 1, 0, "", 0), task_row(0, 1, 0, 5, 1),
            task_row(S + 10 * M, 2, 0, "", 0), task_row(S + 10_200_000, 2, 0, "", 5),
            task_row(S + 50 * M, 1, 0, 5, 4)]
    jobs = [[S + 10_200_000, "", 2, 5, "user", 0, "j2", "j2"]]
    te = write_gz(tmp_path / "part-00000-of-00500.csv.gz", rows)
    je = write_gz(tmp_path / "je.csv.gz", jobs)
    out = tmp_path / "k.omt"
    import_google2011([te], je, out, CapacityModel("uniform"))
    result = replay(str(out), ReplayConfig(submit_latency_s=1.0))
    d = result.to_dict()
    assert result.fidelity.replay_placed == 0
    assert "kill of a job before it reached the schedulers (submit latency)" in str(d)


def test_html_report_shows_each_part(tmp_path):
    pytest.importorskip("matplotlib")
    from tools.fauxmaster.report.page import write_html

    p0, p1, je = _parts(tmp_path)
    out = tmp_path / "both.omt"
    import_google2011([p0, p1], je, out, CapacityModel("uniform"))
    page = write_html(replay(str(out)), tmp_path / "report").read_text()
    assert "part 0 (0..50 s, 2 tasks)" in page and "part 1 (50..100 s, 1 tasks)" in page


def test_a_window_past_the_replays_end_has_no_figures(tmp_path):
    """Replayed to 40 s only: part 1's window (50..100 s) has no task of the population."""
    from tools.fauxmaster.replay import ReplayConfig
    p0, p1, je = _parts(tmp_path)
    out = tmp_path / "both.omt"
    import_google2011([p0, p1], je, out, CapacityModel("uniform"))
    f = replay(str(out), ReplayConfig(until=40.0)).fidelity
    w1 = f.windows[1]
    assert w1["tasks"] == 0 and w1["scheduled_ratio"] is None and w1["real_delay_p50_s"] is None
    assert w1["initial_pending_fraction"] is None  # the replay never reached the part's opening
    assert "part 0 (0..50 s, cut at the horizon 40 s, " in "\n".join(f.lines())
    assert "part 1 (50..100 s, after the horizon 40 s, 0 tasks): t=0 pending n/a," in "\n".join(f.lines())
    cut = replay(str(out), ReplayConfig(until=60.0)).fidelity
    assert "part 1 (50..100 s, cut at the horizon 60 s, 1 tasks)" in "\n".join(cut.lines())
    assert "delay p50 n/a (replay n/a s / real n/a s)" in "\n".join(f.lines())


def test_importing_a_later_part_alone_warns(tmp_path, capsys):
    from tools.cli import main as cli_main
    _, p1, je = _parts(tmp_path)
    out = tmp_path / "one.omt"
    assert cli_main(["import", "google2011", "--task-events", p1, "--job-events", je, "--out", str(out),
                     "--capacity-model", "uniform"]) == 0
    err = capsys.readouterr().err
    assert "warning:" in err and "does not start at part 0" in err and "lower bound" in err
    p0, p1, je = _parts(tmp_path)
    assert cli_main(["import", "google2011", "--task-events", p0, p1, "--job-events", je, "--out",
                     str(tmp_path / "both.omt"), "--capacity-model", "uniform"]) == 0
    assert "does not start at part 0" not in capsys.readouterr().err
