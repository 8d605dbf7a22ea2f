"""Google clusterdata-2011 importer: the real part 0 and hand-written rows for each rule."""

from __future__ import annotations

import re

from collections import Counter

import pytest

from cellstate.model import JobKind
from cellstate.resources import Resources
from tools.trace.events import JobKill, JobSubmit, MachineAdd, TaskEnd, TaskEndStatus, TaskPlaced
from tools.trace.format import read_trace
from tools.trace.shared import traces_dir
from tools.trace.google2011.batches import HELD_AT_OPEN
from tools.trace.google2011.cell import GOOGLE_2011_MIX, CapacityModel, CellModel
from tools.trace.google2011.importer import import_google2011
from tools.trace.google2011.schema import CPU_SCALE, MEMORY_SCALE, GoogleTraceError

from google_rows import S, task_row, write_gz

TRACES = traces_dir() / "google-2011"
TASK_EVENTS = TRACES / "task_events/part-00000-of-00500.csv.gz"
JOB_EVENTS = TRACES / "job_events/part-00000-of-00500.csv.gz"
# Part 0 ships with the repository (tests/data/traces); $OMEGA_TRACES may point elsewhere.


def read_all(path):
    header, events = read_trace(path)
    with events:
        return header, list(events)


@pytest.fixture(scope="module")
def part0(tmp_path_factory):
    """The full import of part 0 (about 6 s), read back."""
    out = tmp_path_factory.mktemp("google") / "part0.omt.gz"
    stats = import_google2011(str(TASK_EVENTS), str(JOB_EVENTS), out, CapacityModel("mix", seed=1),
                              cell_model=CellModel("plain"))
    return stats, *read_all(out)


def test_part0_counts_match_the_readme(part0):
    stats, header, events = part0
    by_type = Counter(type(e).__name__ for e in events)
    submits = [e for e in events if isinstance(e, JobSubmit)]
    assert stats.rows == 450_146
    assert by_type["MachineAdd"] == 12_492
    # 4,895 Google jobs; 5 of them only had tasks pending at the opening that no row schedules
    assert len({e.job.id.split(".")[0] for e in submits}) == 4_890
    assert sum(e.job.tasks for e in submits if e.t > 0) == 57_152  # later SUBMITs
    # SUBMIT rows at timestamp 0: 132,982 running + 11,357 pending, 11,054 of which no row schedules
    assert stats.skipped[HELD_AT_OPEN] == 11_054
    assert sum(e.job.tasks for e in submits if e.t == 0) == 144_339 - 11_054
    placed = [e for e in events if isinstance(e, TaskPlaced)]
    assert all(e.t == 0 for e in placed) and by_type["TaskPlaced"] == len(placed)
    assert 0.9 * 144_339 < len(placed) <= 144_339  # running when the window opened
    assert 5_000 < events[-1].t <= 5_611.1 - 600
    assert "64000 millicores" in header.capacity_model and "seed=1" in header.capacity_model


def test_part0_ends_refer_to_live_tasks(part0):
    _, _, events = part0
    tasks = {}
    ended = set()
    censored = set()  # batch jobs with no run time known in the window
    for e in events:
        if isinstance(e, JobSubmit):
            assert e.job.id not in tasks
            tasks[e.job.id] = e.job.tasks
            assert (e.job.kind is JobKind.SERVICE) == (e.job.priority >= 9)
            if e.job.kind is JobKind.BATCH and e.job.duration_s is None:
                censored.add(e.job.id)
            assert e.job.request.cpu >= 1 and e.job.request.memory >= 1
        elif isinstance(e, TaskEnd):
            assert e.task < tasks[e.job_id] and (e.job_id, e.task) not in ended
            ended.add((e.job_id, e.task))
            # a task that finished in the window gave its job a run time
            assert not (e.status is TaskEndStatus.FINISHED and e.job_id in censored), e
        elif isinstance(e, JobKill):
            assert e.job_id in tasks
    assert sum(isinstance(e, TaskEnd) and e.status is TaskEndStatus.FINISHED for e in events) > 40_000
    assert 5_000 < len(censored) < 30_000  # 9,063 batches in part 0 (19,541 before importer revision 4)


def test_part0_capacities_follow_the_published_mix(part0):
    _, _, events = part0
    capacities = Counter(e.machine.capacity for e in events if isinstance(e, MachineAdd))
    for (cpu, memory), share in GOOGLE_2011_MIX[:4]:
        seen = capacities[Resources(round(cpu * CPU_SCALE), round(memory * MEMORY_SCALE), 1_048_576)]
        assert abs(100 * seen / 12_492 - share) < 1.5, (cpu, memory, seen)


@pytest.mark.parametrize("name, seed, other_seed, same", [
    ("mix", 1, 1, True), ("mix", 1, 2, False), ("uniform", 1, 2, True)], ids=["same-seed", "other-seed", "uniform"])
def test_capacity_draw_is_seeded_and_order_free(name, seed, other_seed, same):
    ids = [str(i) for i in range(200)]
    a = [CapacityModel(name, seed).capacity(i) for i in ids]
    b = [CapacityModel(name, other_seed).capacity(i) for i in reversed(ids)][::-1]
    assert (a == b) is same


def test_unknown_capacity_model_is_rejected():
    with pytest.raises(ValueError, match="unknown capacity model 'big'"):
        CapacityModel("big")


def test_rules_on_hand_written_rows(tmp_path):
    tasks = write_gz(tmp_path / "t.csv.gz", [
        task_row(0, 7, 0, 100, 0, priority=9), task_row(0, 7, 1, 100, 0, priority=9),
        task_row(0, 7, 0, 100, 1, priority=9), task_row(0, 8, 0, "", 0, cpu=0.5, different=1),
        task_row(S + 10_000_000, 8, 1, "", 0, cpu="", mem="", disk=""),  # missing requests: last known
        task_row(S + 11_000_000, 8, 0, 200, 1), task_row(S + 31_000_000, 8, 0, 200, 4),
        task_row(S + 40_000_000, 7, 1, 100, 2, priority=9),  # evicted: failed
        task_row(S + 50_000_000, 7, 1, "", 0, priority=9),  # resubmitted: a new batch
        task_row(S + 59_500_000, 7, 1, "", 5, priority=9),  # task KILL just before the job KILL
        task_row(S + 70_000_000, 9, 0, "", 5),  # end of a task never submitted: skipped
    ])
    jobs = write_gz(tmp_path / "j.csv.gz", [[S + 60_000_000, "", 7, 5, "user", 0, "n", "l"]])
    stats = import_google2011(tasks, jobs, tmp_path / "x.omt", CapacityModel("uniform"), cell_model=CellModel("plain"))
    events = read_all(tmp_path / "x.omt")[1]
    half = Resources(CPU_SCALE // 2, MEMORY_SCALE // 2, 1_048_576)
    g7 = [e.job for e in events if isinstance(e, JobSubmit) and e.job.id.startswith("g7")]
    g8 = [e.job for e in events if isinstance(e, JobSubmit) and e.job.id.startswith("g8")]
    assert [e.machine for e in events[:2]] == [MachineAdd(0.0, e.machine).machine for e in events[:2]]
    assert [(e.machine.id, e.machine.capacity) for e in events[:2]] == [("m100", half), ("m200", half)]
    assert [(j.id, j.tasks, j.kind, j.duration_s) for j in g7] == [
        ("g7", 2, JobKind.SERVICE, None), ("g7.1", 1, JobKind.SERVICE, None)]
    assert [(j.id, j.tasks, j.request.cpu, j.different_machine) for j in g8] == [
        ("g8", 1, 32_000, True), ("g8.1", 1, 32_000, False)]  # the flag is each row's own (revision 5)
    assert g8[0].duration_s == 20.0  # finished 20 s after its SCHEDULE at 11 s
    assert g8[1].duration_s is None  # never ran: no run time known, no modelled end
    assert [e for e in events if isinstance(e, (TaskEnd, JobKill))] == [
        TaskEnd(31.0, "g8", 0, TaskEndStatus.FINISHED), TaskEnd(40.0, "g7", 1, TaskEndStatus.FAILED),
        JobKill(59.5, "g7"), JobKill(59.5, "g7.1")]
    assert stats.skipped["end of a task not live in the window"] == 1
    assert stats.skipped["requests missing (used last known)"] == 1
    assert [e for e in events if isinstance(e, TaskPlaced)] == [TaskPlaced(0.0, "g7", 0, "m100")]


def test_a_task_running_through_the_window_is_still_running_when_the_replay_ends(tmp_path):
    """No run time known (running at t = 0, no FINISH): no modelled end, so the replay's last
    utilization sample, at the window's last row, still counts it (importer revision 1 ended it
    exactly there)."""
    from tools.fauxmaster.replay import ReplayConfig, replay

    tasks = write_gz(tmp_path / "t.csv.gz", [
        task_row(0, 1, 0, 10, 0), task_row(0, 1, 0, 10, 1),  # running when the window opens
        task_row(S + 50_000_000, 2, 0, "", 0),  # the window's last row, at 50 s
    ])
    import_google2011(tasks, write_gz(tmp_path / "j.csv.gz", []), tmp_path / "x.omt", CapacityModel("uniform"))
    header, events = read_all(tmp_path / "x.omt")
    assert "importer revision 6" in header.notes
    assert [e.job.duration_s for e in events if isinstance(e, JobSubmit)] == [None, None]
    result = replay(tmp_path / "x.omt", ReplayConfig(schedulers=[dict(name="b", kind="batch")]))
    assert result.sim_time_s == 50.0 and result.cell["initial_placed"] == 1
    first, last = result.utilization[0], result.utilization[-1]
    assert (first.t, last.t) == (0.0, 50.0)
    assert last.cpu == first.cpu == 0.25 / 0.5  # the task's quarter core of the half-core machine


def test_running_at_open_keeps_only_tasks_live_after_t0(tmp_path):
    """t = 0 SCHEDULE rows become task_placed after every t = 0 submit, unless the task ended
    (or was rescheduled: the last machine wins) before the window opened."""
    tasks = write_gz(tmp_path / "t.csv.gz", [
        task_row(0, 1, 0, 10, 0), task_row(0, 1, 1, 10, 0), task_row(0, 2, 0, 10, 0),
        task_row(0, 1, 0, 10, 1), task_row(0, 1, 1, 11, 1), task_row(0, 2, 0, 11, 1),
        task_row(5, 1, 1, 11, 4),  # ended before the window opened: not running at t = 0
        task_row(6, 2, 0, 11, 2), task_row(7, 2, 0, 11, 0),  # evicted and resubmitted at t = 0 (batch g2.1)…
        task_row(8, 2, 0, 12, 1),  # …and running again, elsewhere
        task_row(S + 1_000_000, 3, 0, "", 0), task_row(S + 2_000_000, 3, 0, 12, 1),
    ])
    jobs = write_gz(tmp_path / "j.csv.gz", [])
    import_google2011(tasks, jobs, tmp_path / "x.omt", CapacityModel("uniform"))
    events = read_all(tmp_path / "x.omt")[1]
    placed = [i for i, e in enumerate(events) if isinstance(e, TaskPlaced)]
    assert [events[i] for i in placed] == [TaskPlaced(0.0, "g1", 0, "m10"), TaskPlaced(0.0, "g2.1", 0, "m12")]
    last_t0_submit = max(i for i, e in enumerate(events) if isinstance(e, JobSubmit) and e.t == 0)
    assert last_t0_submit < placed[0] and placed[-1] < len(events) - 1 and events[placed[-1] + 1].t > 0


def test_limit_reads_only_the_first_rows(tmp_path):
    stats = import_google2011(str(TASK_EVENTS), str(JOB_EVENTS), tmp_path / "x.omt", limit=2_000)
    header, events = read_all(tmp_path / "x.omt")
    assert stats.rows == 2_000 and "limit=2000" in header.source
    assert sum(e.job.tasks for e in events if isinstance(e, JobSubmit)) <= 2_000


def test_malformed_row_names_the_line(tmp_path):
    tasks = write_gz(tmp_path / "t.csv.gz", [task_row(0, 1, 0, 5, 0), [0, 1, 2]])
    jobs = write_gz(tmp_path / "j.csv.gz", [])
    with pytest.raises(GoogleTraceError, match="line 2: expected 13 columns, got 3"):
        import_google2011(tasks, jobs, tmp_path / "x.omt")


def test_cli_import_google2011(tmp_path, capsys):
    from tools.cli import main

    out = str(tmp_path / "g.omt")
    assert main(["import", "google2011", "--task-events", str(TASK_EVENTS), "--job-events", str(JOB_EVENTS),
                 "--out", out, "--capacity-model", "uniform", "--seed", "3", "--limit", "1000"]) == 0
    assert f"{out}: 1000 rows" in capsys.readouterr().out
    header, events = read_all(out)
    assert "google2011-uniform" in header.capacity_model
    assert len({e.machine.capacity for e in events if isinstance(e, MachineAdd)}) == 1


def test_submissions_pending_together_form_one_batch(tmp_path):
    """Importer revision 4: a batch is the consecutive SUBMIT rows of a job with no SCHEDULE of the
    job between them (after t = 0), no other row of a task of the batch, equal priority and requests
    and no task twice; submitted at its last row. Ground truth delays stay per task from its own SUBMIT."""
    tasks = write_gz(tmp_path / "t.csv.gz", [
        # t = 0: job 1's rows interleave SUBMIT and SCHEDULE (the recorded state): one batch of 2;
        # task 2 asks for more cpu: a batch of its own (not inflated)
        task_row(0, 1, 0, "", 0), task_row(0, 1, 0, 10, 1), task_row(0, 1, 1, "", 0), task_row(0, 1, 1, 11, 1),
        task_row(0, 1, 2, "", 0, cpu=0.5), task_row(0, 1, 2, 12, 1, cpu=0.5),
        # job 2 at 10, 10.2 and 10.5 s, pending together: one batch of 3 submitted at 10.5 s
        task_row(S + 10_000_000, 2, 0, "", 0), task_row(S + 10_200_000, 2, 1, "", 0),
        task_row(S + 10_500_000, 2, 2, "", 0),
        task_row(S + 12_000_000, 2, 0, 10, 1), task_row(S + 12_000_000, 2, 1, 11, 1),
        # job 2 submits again after a SCHEDULE of it: a new batch
        task_row(S + 13_000_000, 2, 3, "", 0), task_row(S + 13_000_000, 2, 4, "", 0),
        task_row(S + 14_000_000, 2, 2, 12, 1), task_row(S + 14_000_000, 2, 3, 12, 1),
        # job 3: a task that fails before it runs and is submitted again: two batches
        task_row(S + 20_000_000, 3, 0, "", 0), task_row(S + 20_000_000, 3, 1, "", 0),
        task_row(S + 21_000_000, 3, 0, "", 3), task_row(S + 22_000_000, 3, 0, "", 0),
        # job 4: a row at another priority: its own batch
        task_row(S + 30_000_000, 4, 0, "", 0), task_row(S + 30_000_000, 4, 1, "", 0, priority=2),
        task_row(S + 50_000_000, 5, 0, "", 0),  # the window's last row
    ])
    out = tmp_path / "x.omt"
    stats = import_google2011(tasks, write_gz(tmp_path / "j.csv.gz", []), out, CapacityModel("uniform"))
    header, events = read_all(out)
    submits = {e.job.id: e for e in events if isinstance(e, JobSubmit)}
    assert {k: (e.t, e.job.tasks) for k, e in submits.items()} == {
        "g1": (0.0, 2), "g1.1": (0.0, 1), "g2": (10.5, 3), "g2.1": (13.0, 2),
        "g3": (20.0, 2), "g3.1": (22.0, 1), "g4": (30.0, 1), "g4.1": (30.0, 1), "g5": (50.0, 1)}
    assert submits["g1"].job.request.cpu == CPU_SCALE // 4 and submits["g1.1"].job.request.cpu == CPU_SCALE // 2
    assert (submits["g4"].job.priority, submits["g4.1"].job.priority) == (0, 2)
    placed = {(e.job_id, e.task): e.machine_id for e in events if isinstance(e, TaskPlaced)}
    assert placed == {("g1", 0): "m10", ("g1", 1): "m11", ("g1.1", 0): "m12"}
    # job 3 task 0 failed while pending: its end names g3's task 0
    assert [(e.job_id, e.task) for e in events if isinstance(e, TaskEnd)] == [("g3", 0)]
    grouping = {k.removeprefix("inferred grouping: "): n for k, n in stats.skipped.items()
                if k.startswith("inferred grouping: ")}
    assert grouping["SUBMIT rows"] == 14 and grouping["batches (replayed jobs)"] == 9
    assert grouping["SUBMIT rows in batches of 2+ rows"] == 9
    assert grouping["batches split: priority, request or different-machine flag differs"] == 2
    assert grouping["batch span max ms"] == 500
    assert "importer revision 6" in header.notes and "batches (replayed jobs) 9" in header.notes
    assert re.search(r"t = max\(0, \(timestamp_us - \d+\)/1e6\)", header.notes)  # the window's opening, filled in
    # the ground truth: each task's own SUBMIT -> first SCHEDULE (job 2 task 0: 10 -> 12 s)
    truth = read_trace(out)[1].truth
    assert truth.submitted["g2"] == 10.5
    assert truth.delays["g2"] == pytest.approx([2.0, 1.8, 3.5]) and truth.delays["g2.1"] == [1.0, None]


def test_revision5_a_task_running_at_open_holds_its_schedule_rows_request(tmp_path):
    """The t = 0 snapshot's SUBMIT row may carry another request than the SCHEDULE row of the same
    task; the running task holds the SCHEDULE row's (the one the truth's occupancy counts)."""
    tasks = write_gz(tmp_path / "t.csv.gz", [
        task_row(0, 7, 0, "", 0, cpu=0.125), task_row(0, 7, 0, 100, 1, cpu=0.25),  # differs: 0.25 held
        task_row(0, 7, 1, "", 0, cpu=0.25), task_row(0, 7, 1, 100, 1, cpu=0.25),  # agrees
        task_row(S + 10_000_000, 7, 2, "", 0, cpu=0.125), task_row(S + 11_000_000, 7, 2, 100, 1, cpu=0.125),
    ])
    jobs = write_gz(tmp_path / "j.csv.gz", [])
    stats = import_google2011(tasks, jobs, tmp_path / "x.omt", CapacityModel("uniform"))
    header, events = read_all(tmp_path / "x.omt")
    g7 = [(e.t, e.job.tasks, e.job.request.cpu) for e in events if isinstance(e, JobSubmit)]
    assert g7 == [(0.0, 2, CPU_SCALE // 4), (10.0, 1, CPU_SCALE // 8)]  # one t = 0 batch: same request now
    assert sum(isinstance(e, TaskPlaced) for e in events) == 2
    key = "inferred grouping: t = 0 SUBMIT rows given their t = 0 SCHEDULE row's request (it differed)"
    assert stats.skipped[key] == 1


@pytest.mark.parametrize("keep", [False, True], ids=["left-out", "kept"])
def test_revision5_tasks_pending_at_open_that_no_row_schedules_are_left_out(tmp_path, keep):
    """Pending at t = 0: task 0 is scheduled later (kept), task 1 ends later on a machine (it ran:
    kept), task 2 never shows a machine (left out, counted, unless kept); task 3 ends during t = 0
    (not live at the opening: the rule does not apply)."""
    tasks = write_gz(tmp_path / "t.csv.gz", [
        task_row(0, 7, 0, "", 0), task_row(0, 7, 1, "", 0), task_row(0, 7, 2, "", 0), task_row(0, 7, 3, "", 0),
        task_row(0, 7, 3, "", 5),
        task_row(S + 10_000_000, 7, 0, 100, 1), task_row(S + 20_000_000, 7, 1, 100, 2),
        task_row(S + 30_000_000, 7, 2, "", 5),
    ])
    jobs = write_gz(tmp_path / "j.csv.gz", [])
    stats = import_google2011(tasks, jobs, tmp_path / "x.omt", CapacityModel("uniform"),
                              keep_unscheduled_at_open=keep)
    header, events = read_all(tmp_path / "x.omt")
    submits = [e.job.tasks for e in events if isinstance(e, JobSubmit)]
    assert submits == ([4] if keep else [3])
    assert stats.skipped.get(HELD_AT_OPEN, 0) == (0 if keep else 1)
    assert ("1 tasks pending at the opening that no row schedules left out" in header.notes) is not keep
    ends = [e for e in events if isinstance(e, TaskEnd)]
    assert len(ends) == (3 if keep else 2)  # task 2's kill has nothing to end when it was left out
    if not keep:
        assert stats.skipped["end of a task left out at the opening (never scheduled)"] == 1


def test_revision5_the_different_machine_flag_is_each_rows_own(tmp_path):
    """Rows of one job with and without the flag are separate batches; each batch has its rows' flag."""
    tasks = write_gz(tmp_path / "t.csv.gz", [
        task_row(0, 9, 0, "", 0), task_row(0, 9, 0, 100, 1),  # part 0: the window opens at 600 s
        task_row(S + 10_000_000, 7, 0, "", 0, different=1), task_row(S + 10_000_000, 7, 1, "", 0, different=1),
        task_row(S + 10_000_000, 7, 2, "", 0, different=0),
        task_row(S + 20_000_000, 7, 0, 100, 1),
    ])
    jobs = write_gz(tmp_path / "j.csv.gz", [])
    import_google2011(tasks, jobs, tmp_path / "x.omt", CapacityModel("uniform"))
    _, events = read_all(tmp_path / "x.omt")
    assert [(e.job.id, e.job.tasks, e.job.different_machine) for e in events
            if isinstance(e, JobSubmit) and e.job.id.startswith("g7")] == [("g7", 2, True), ("g7.1", 1, False)]
