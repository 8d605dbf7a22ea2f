"""SWF importer: the real KTH SP2 log, hand-written bad lines, and the omega CLI."""

from __future__ import annotations

import gzip
import json
from collections import Counter

import pytest

from cellstate.model import JobKind
from cellstate.resources import Resources
from tools.cli import main
from tools.trace.events import JobSubmit, MachineAdd
from tools.trace.format import read_trace
from tools.trace.swf import SWFError, import_swf
from tools.trace.shared import traces_dir

KTH = str(traces_dir() / "swf/KTH-SP2-1996-2.1-cln.swf.gz")
# The KTH log ships with the repository (tests/data/traces); $OMEGA_TRACES may point elsewhere.
HEADER = "; Version: 2.2\n; MaxNodes: 4\n; MaxProcs: 8\n"
GOOD = "  1  10  5  100  2  -1  -1  2  200  2048  1  3  3  -1 -1 -1 -1 -1\n"


def read_all(path):
    header, events = read_trace(path)
    with events:
        return header, list(events)


@pytest.mark.parametrize("older", [None, b"an older trace"], ids=["no-file", "older-file"])
def test_bad_line_stops_the_import_and_writes_nothing(tmp_path, older):
    out = tmp_path / "x.omt"
    if older is not None:
        out.write_bytes(older)
    with pytest.raises(SWFError, match=r"x.swf: line 5: field run_s: not a number"):
        import_swf(swf(tmp_path, GOOD + GOOD.replace("100", "abc", 1)), out)
    assert sorted(p.name for p in tmp_path.iterdir()) == (["x.swf"] if older is None else ["x.omt", "x.swf"])
    assert older is None or out.read_bytes() == older


@pytest.mark.parametrize("skip_bad", [False, True])
def test_kth_log_skips_and_counts_its_one_unusable_line(tmp_path, skip_bad):
    stats = import_swf(KTH, tmp_path / "kth.omt", skip_bad=skip_bad)
    header, events = read_all(tmp_path / "kth.omt")
    jobs = [e.job for e in events if isinstance(e, JobSubmit)]
    assert stats.jobs == len(jobs) == 28_476 - 1
    assert stats.bad_lines == [] and [n for n, _ in stats.unusable] == [27_323]
    assert "line 27323: field req_procs: unknown (-1), and alloc_procs too" in stats.unusable[0][1]
    # every KTH row logs req_mem_KB as -1: memory 0 assumed, counted; the one unusable row is not counted
    assert stats.assumed == {"run_s": 0, "req_time_s": 0, "req_procs": 0, "req_mem_KB": 28_475, "wait_s": 0,
                             "user": 0}
    assert "req_mem_KB 28,475" in header.notes and "unusable rows skipped: 1" in header.notes
    assert sum(isinstance(e, MachineAdd) for e in events) == stats.machines == 100
    assert all(j.gang and j.kind is JobKind.BATCH and 1 <= j.tasks <= 100 for j in jobs)
    assert jobs[0].id == "j15" and events[100].t == 599_850 and jobs[0].duration_s == 3477
    assert "100 machines" in header.capacity_model


def swf(tmp_path, body, header=HEADER):
    path = tmp_path / "x.swf"
    path.write_text(header + body)
    return str(path)


BAD = [
    ("too-few-fields", "1 10 5\n", "line 4: expected 18 fields, got 3"),
    ("not-a-number", GOOD.replace("100", "abc", 1), "line 4: field run_s: not a number: 'abc'"),
    ("negative-run", GOOD.replace("100", "-3", 1), "line 4: field run_s: invalid value -3"),
    ("negative-run-from-req-time", GOOD.replace("100", "-1", 1).replace("200", "-5"),
     "line 4: field run_s: invalid value -5 (req_time_s for an unknown run_s)"),
    ("fractional-procs", GOOD.replace("  2  200", "  2.5  200"), "line 4: field req_procs: invalid value 2.5"),
    ("negative-submit", GOOD.replace("  10  ", "  -3  ", 1), "line 4: field submit_s: invalid value -3"),
    ("repeated-job-number", GOOD + GOOD.replace("  10  ", "  11  ", 1), "line 5: field job: job number 1 repeats "
     "line 4's"),
    ("infinite", GOOD.replace("100", "inf", 1), "line 4: field run_s: not finite"),
    ("negative-req-time", GOOD.replace("200", "-7"), "line 4: field req_time_s: invalid value -7"),
]


@pytest.mark.parametrize("body, message", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_lines_name_line_and_field(tmp_path, body, message):
    path = swf(tmp_path, body)
    with pytest.raises(SWFError) as info:
        import_swf(path, tmp_path / "x.omt")
    assert message in str(info.value)
    stats = import_swf(path, tmp_path / "x.omt", skip_bad=True)
    assert len(stats.bad_lines) == 1 and message in stats.bad_lines[0][1]


UNUSABLE = [
    ("no-processors", GOOD.replace("  2  -1  -1  2", "  -1  -1  -1  -1"), "field req_procs: unknown (-1)"),
    ("no-run-time", GOOD.replace("100", "-1", 1).replace("200", "-1"), "field run_s: unknown (-1)"),
    ("no-submit-time", GOOD.replace("  10  ", "  -1  ", 1), "field submit_s: unknown (-1)"),
    # a job cancelled before it started: no processor requested nor allocated
    ("zero-processors", GOOD.replace("  2  -1  -1  2", "  0  -1  -1  -1"), "field req_procs: -1, alloc_procs 0: "
     "no processor"),
    ("zero-requested-and-allocated", GOOD.replace("  2  -1  -1  2", "  0  -1  -1  0"), "field req_procs: 0, "
     "alloc_procs 0"),
    ("cancelled-before-start", GOOD.replace("  100  2  -1", "  -1  0  -1").replace("  1  3  3", "  5  3  3"),
     "field status: 5 (cancelled) with run_s -1 and alloc_procs 0: cancelled before it started"),
]


@pytest.mark.parametrize("body, message", [u[1:] for u in UNUSABLE], ids=[u[0] for u in UNUSABLE])
def test_unusable_lines_are_skipped_and_counted_without_skip_bad(tmp_path, body, message):
    stats = import_swf(swf(tmp_path, GOOD.replace("  1  10", "  0  10") + body), tmp_path / "x.omt")
    assert stats.jobs == 1 and stats.bad_lines == []
    assert len(stats.unusable) == 1 and "line 5: " + message in stats.unusable[0][1]
    assert "unusable rows skipped: 1" in read_all(tmp_path / "x.omt")[0].notes


def test_unknown_fields_are_assumed_and_counted(tmp_path):
    # run_s, req_procs, req_mem_KB, wait_s and user all -1; req_time_s 200 and alloc_procs 2 known
    line = "  1  10  -1  -1  2  -1  -1  -1  200  -1  1  -1  3  -1 -1 -1 -1 -1\n"
    stats = import_swf(swf(tmp_path, line + GOOD.replace("  1  10", "  2  20")), tmp_path / "x.omt")
    header, events = read_all(tmp_path / "x.omt")
    job = events[-2].job
    assert (job.tasks, job.request, job.duration_s, job.owner) == (2, Resources(1000, 0), 200.0, "")
    assert stats.jobs == 2 and stats.unusable == [] and stats.bad_lines == []
    assert stats.assumed == {"run_s": 1, "req_time_s": 0, "req_procs": 1, "req_mem_KB": 1, "wait_s": 1,
                             "user": 1}
    assert ("unknown (-1) fields assumed: run_s 1, req_time_s 0, req_procs 1, req_mem_KB 1, wait_s 1, user 1; "
            "unusable rows skipped: 0; bad rows skipped: 0") in header.notes


def test_good_line_becomes_a_gang_job(tmp_path):
    stats = import_swf(swf(tmp_path, GOOD), tmp_path / "x.omt", node_memory_mib=4096)
    events = read_all(tmp_path / "x.omt")[1]
    # MaxNodes 4, MaxProcs 8: 4 machines of 2 processors; --node-memory-mib is a machine's
    assert stats.machines == 4 and stats.processors == 8 and events[0].machine.capacity == Resources(2000, 4096)
    job = events[-1].job
    assert (events[-1].t, job.id, job.tasks, job.request, job.duration_s, job.gang, job.owner) == (
        10.0, "j1", 2, Resources(1000, 2), 100.0, True, "u3")
    assert job.estimate_s == 200.0  # the requested time (field 9)


def test_unknown_requested_time_falls_back_to_the_run_time_and_is_counted(tmp_path):
    stats = import_swf(swf(tmp_path, GOOD.replace("200", "-1")), tmp_path / "x.omt")
    header, events = read_all(tmp_path / "x.omt")
    assert events[-1].job.estimate_s == events[-1].job.duration_s == 100.0
    assert stats.assumed["req_time_s"] == 1 and "req_time_s 1," in header.notes
    assert "importer revision 5" in header.notes and "estimate_s = req_time_s" in header.notes


@pytest.mark.parametrize("header, nodes, expected, processors", [
    ("; MaxProcs: 8\n", None, 8, 8), ("; MaxNodes: 4\n", 16, 16, 16), ("; Note: x\n", 3, 3, 3),
    # SMP nodes (HPC2N: MaxNodes 120, MaxProcs 240): a machine per node, MaxProcs / MaxNodes processors each
    ("; MaxNodes: 120\n; MaxProcs: 240\n", None, 120, 240), ("; MaxNodes: 4\n; MaxProcs: 8\n", 16, 16, 32),
    # nodes of different sizes: a machine per processor (jobs count processors)
    ("; MaxNodes: 3\n; MaxProcs: 8\n", None, 8, 8), ("; MaxNodes: 8\n; MaxProcs: 4\n", None, 4, 4)],
    ids=["maxprocs-fallback", "override", "override-without-header", "smp-nodes", "override-keeps-smp",
         "uneven-nodes", "fewer-procs-than-nodes"])
def test_machine_count(tmp_path, header, nodes, expected, processors):
    stats = import_swf(swf(tmp_path, GOOD, header), tmp_path / "x.omt", nodes=nodes)
    assert (stats.machines, stats.processors) == (expected, processors)
    machines = [e.machine for e in read_all(tmp_path / "x.omt")[1] if isinstance(e, MachineAdd)]
    assert sum(m.capacity.cpu for m in machines) == 1000 * processors
    assert {m.capacity.memory for m in machines} == {1024 * processors // expected}  # 1024 MiB a processor


def test_header_max_procs_is_bounded(tmp_path):
    with pytest.raises(SWFError, match="MaxProcs must be between 1 and"):
        import_swf(swf(tmp_path, GOOD, "; MaxNodes: 1\n; MaxProcs: 99999999999\n"), tmp_path / "x.omt")


# The first lines of oar-team/evalys tests/easy_mediumWL_smallPF.swf (a simulator's output): no
# header, submit times out of order, fractional times, job number 0, a wait of -0.0.
EVALYS = """0 0.0 0.0 88.51 1 -1 -1 1 149.0 -1 1 -1 -1 -1 -1 -1 -1 -1
2050 2739.599152 0.0 6.609 2 -1 -1 2 67.0 -1 1 -1 -1 -1 -1 -1 -1 -1
4100 5683.069696 0.0 151.94 4 -1 -1 4 228.0 -1 1 -1 -1 -1 -1 -1 -1 -1
10 4.709164 0.0 265.8 2 -1 -1 2 399.0 -1 1 -1 -1 -1 -1 -1 -1 -1
2060 2754.556511 -0.0 140.95 2 -1 -1 2 212.0 -1 1 -1 -1 -1 -1 -1 -1 -1
20 16.003927 0.0 279.99 1 -1 -1 1 420.0 -1 1 -1 -1 -1 -1 -1 -1 -1
"""


def test_lines_out_of_submit_order_are_submitted_in_time_order_and_counted(tmp_path, capsys):
    stats = import_swf(swf(tmp_path, EVALYS, ""), tmp_path / "x.omt", nodes=16)
    header, events = read_all(tmp_path / "x.omt")
    submits = [e for e in events if isinstance(e, JobSubmit)]
    assert [e.job.id for e in submits] == ["j0", "j10", "j20", "j2050", "j2060", "j4100"]
    assert [e.t for e in submits] == sorted(e.t for e in submits) and stats.jobs == 6
    assert stats.unsorted == 3 and stats.first_unsorted == (4, 4.709164, 5683.069696)
    assert "rows out of submit order, sorted: 3 (first: line 4, submit 4.70916 after 5683.07)" in header.notes
    assert all(isinstance(e, MachineAdd) for e in events[:16])
    assert main(["import", "swf", swf(tmp_path, EVALYS, ""), "--nodes", "16", "--out", str(tmp_path / "y.omt")]) == 0
    err = capsys.readouterr().err
    assert "x.swf: 3 job line(s) out of submit order (first: line 4, submit 4.70916 after 5683.07): imported, " \
           "submitted in time order" in err


def test_header_without_node_count_is_an_error(tmp_path):
    with pytest.raises(SWFError, match="no positive MaxNodes or MaxProcs"):
        import_swf(swf(tmp_path, GOOD, "; Version: 2.2\n"), tmp_path / "x.omt")


def test_cli_import_and_info(tmp_path, capsys):
    out = str(tmp_path / "x.omt.gz")
    assert main(["import", "swf", swf(tmp_path, GOOD + GOOD.replace("  1  10", "  2  20")), "--out", out]) == 0
    captured = capsys.readouterr()
    assert "4 machines, 2 jobs" in captured.out and "warning" not in captured.err
    assert ("unknown (-1) fields assumed: run_s 0, req_time_s 0, req_procs 0, req_mem_KB 0, wait_s 0, user 0; "
            "unusable rows skipped: 0; bad rows skipped: 0; rows out of submit order, sorted: 0") in captured.out
    assert main(["trace", "info", out]) == 0
    lines = capsys.readouterr().out.splitlines()
    counts = Counter(dict(line.split(": ") for line in lines if line.split(":")[0] in ("JobSubmit", "MachineAdd")))
    assert counts == {"JobSubmit": "2", "MachineAdd": "4"}
    assert "events: 6, time span: 0.000 .. 20.000 s (20.000 s), first job submitted at 10.000 s" in lines


def test_cli_reports_bad_input_as_data_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main(["import", "swf", swf(tmp_path, "1 2\n"), "--out", str(tmp_path / "x.omt")])
    assert info.value.code == 65  # EX_DATAERR: an input file that does not parse
    err = capsys.readouterr().err
    assert "line 4: expected 18 fields" in err and "(--skip-bad skips and counts such lines)" in err
    assert f"nothing written to {tmp_path / 'x.omt'}" in err and not (tmp_path / "x.omt").exists()


def test_cli_warns_of_assumptions_and_unusable_rows(tmp_path, capsys):
    body = GOOD.replace("2048", "-1") + GOOD.replace("  1  10  5  100  2  -1  -1  2", "  2  20  5  100  -1  -1  -1  -1")
    assert main(["import", "swf", swf(tmp_path, body), "--out", str(tmp_path / "x.omt")]) == 0
    captured = capsys.readouterr()
    assert "req_mem_KB 1," in captured.out and "unusable rows skipped: 1" in captured.out
    assert "skipped 1 unusable line(s), first: " in captured.out
    warning = [line for line in captured.err.splitlines() if line.startswith("warning: ")]
    assert len(warning) == 1 and "req_mem_KB 1x (unknown requested memory: 0 MiB" in warning[0]
    assert "1 row(s) unusable and skipped" in warning[0]


def test_cli_warns_of_jobs_wider_than_the_cell(tmp_path, capsys):
    """A job of more tasks than the cell has machines is imported (the log ran it) but counted and
    shown, not imported silently: no scheduler can place it here."""
    wide = GOOD.replace("  1  10  5  100  2  -1  -1  2", "  2  20  5  100  3  -1  -1  3")
    out = tmp_path / "x.omt"
    body = GOOD + wide + wide.replace("  2  20", "  3  30")
    assert main(["import", "swf", swf(tmp_path, body, "; MaxNodes: 4\n"), "--out", str(out),
                 "--nodes", "2", "--node-memory-mib", "1"]) == 0
    captured = capsys.readouterr()
    assert "2 machines, 3 jobs" in captured.out
    warnings = [line for line in captured.err.splitlines() if line.startswith("warning: ")]
    assert any("2 job(s) wider than the cell (more tasks than its 2 processors; first: line 3, job j2, 3 tasks)"
               in line for line in warnings), warnings
    assert any("3 job(s) whose tasks ask for more memory than a machine has (first: line 2, job j1, 2 MiB"
               in line for line in warnings), warnings
    assert main(["import", "swf", swf(tmp_path, GOOD), "--out", str(out)]) == 0
    assert "warning" not in capsys.readouterr().err


def test_gzip_is_known_by_its_bytes_and_a_byte_order_mark_or_latin1_comment_is_read(tmp_path):
    text = HEADER + "; Installation: Universit\u00e4t\n" + GOOD
    (tmp_path / "zipped.swf").write_bytes(gzip.compress(text.encode("latin-1")))  # gzip, not named .gz
    (tmp_path / "plain.swf.gz").write_bytes(text.encode("latin-1"))  # plain, named .gz
    (tmp_path / "bom.swf").write_bytes(b"\xef\xbb\xbf" + text.encode())  # a byte-order mark before the header
    for name in ("zipped.swf", "plain.swf.gz", "bom.swf"):
        stats = import_swf(str(tmp_path / name), tmp_path / "x.omt")
        assert (stats.machines, stats.jobs) == (4, 1), name


def test_a_job_line_that_is_not_text_names_the_line_and_is_not_a_line_to_skip(tmp_path, capsys):
    path = tmp_path / "x.swf"
    path.write_bytes((HEADER + GOOD).encode() + b"2 20 5 100 2 -1 -1 2 200 2048 1 \xff 3 -1 -1 -1 -1 -1\n")
    with pytest.raises(SystemExit) as info:
        main(["import", "swf", str(path), "--out", str(tmp_path / "x.omt")])
    err = capsys.readouterr().err
    assert info.value.code == 65 and "x.swf: line 5: not UTF-8 text" in err and "--skip-bad" not in err
    assert not (tmp_path / "x.omt").exists()


def test_a_job_asking_for_more_processors_than_the_cell_has_but_allocated_fewer_runs_on_those(tmp_path, capsys):
    """req_procs 16 on an 8-processor cell, alloc_procs 4: the log's machine ran it on 4, so does the
    import (counted and shown); req_procs 16 with alloc_procs 16 stays wider than the cell (warned)."""
    asked_more = GOOD.replace("  1  10  5  100  2  -1  -1  2", "  2  20  5  100  4  -1  -1  16")
    wide = GOOD.replace("  1  10  5  100  2  -1  -1  2", "  3  30  5  100  16  -1  -1  16")
    path = swf(tmp_path, GOOD + asked_more + wide)
    stats = import_swf(path, tmp_path / "x.omt")
    header, events = read_all(tmp_path / "x.omt")
    tasks = {e.job.id: e.job.tasks for e in events if isinstance(e, JobSubmit)}
    assert tasks == {"j1": 2, "j2": 4, "j3": 16}
    assert stats.narrowed == [(5, "j2", 16, 4)] and [w[1] for w in stats.wider] == ["j3"]
    assert "wider than the cell, alloc_procs taken: 1" in header.notes
    assert main(["import", "swf", path, "--out", str(tmp_path / "y.omt")]) == 0
    err = capsys.readouterr().err
    assert ("1 job(s) asked for more processors than the cell's 8 but ran on fewer: imported with their "
            "alloc_procs (first: line 5, job j2, req_procs 16, alloc_procs 4)") in err
    assert "1 job(s) wider than the cell (more tasks than its 8 processors; first: line 6, job j3" in err


# The first lines of DIR-LAB/deep-batch-scheduler data/lublin_256.swf (a generated log: Lublin's model).
LUBLIN = """; Version: 2
; Acknowledge: Uri Lublin, Hebrew University
; Information: http://www.cs.huji.ac.il/labs/parallel/workload
; MaxJobs: 10000
; MaxRecords: 10000
; MaxNodes: 256
; MaxRuntime: 162754
1    5094 -1   12072  16 -1 -1 -1 -1 -1 1 -1 -1 -1 0 -1 -1 -1
2    5170 -1       2   1 -1 -1 -1 -1 -1 1 -1 -1 -1 0 -1 -1 -1
4    7287 -1    9053 128 -1 -1 -1 -1 -1 1 -1 -1 -1 0 -1 -1 -1
"""


def test_a_log_without_any_logged_wait_has_no_ground_truth_and_says_so(tmp_path, capsys):
    path = tmp_path / "lublin.swf"
    path.write_text(LUBLIN)
    out = tmp_path / "x.omt"
    assert main(["import", "swf", str(path), "--out", str(out)]) == 0
    assert "no ground truth: no job has a logged wait (wait_s -1 on every line)" in capsys.readouterr().out
    header, events = read_trace(out)
    with events:
        assert [e.job.tasks for e in events if isinstance(e, JobSubmit)] == [16, 1, 128]
        assert events.truth is None
    assert "no ground truth: no job has a logged wait_s" in header.notes
    status = main(["replay", str(out), "--schedulers", "easy:easy", "--until", "100000", "-o", "json"])
    result = json.loads(capsys.readouterr().out)
    assert status == 0 and result.get("fidelity") is None and result["slowdown"]["jobs"] == 3


def test_partial_executions_of_a_job_are_left_out_for_its_summary_line(tmp_path):
    """SWF 2.2: a checkpointed or swapped job's parts are lines of status 2, 3 or 4 with its job number;
    its summary line (status 0, 1 or 5) is the job. A job cancelled while running (status 5, a run
    time) ran: it is kept."""
    summary = GOOD
    part = GOOD.replace("  100  ", "  60  ", 1).replace("  1  3  3", "  2  3  3")
    last = GOOD.replace("  100  ", "  40  ", 1).replace("  1  3  3", "  3  3  3")
    cancelled_running = GOOD.replace("  1  10", "  2  20").replace("  1  3  3", "  5  3  3")
    stats = import_swf(swf(tmp_path, summary + part + last + cancelled_running), tmp_path / "x.omt")
    jobs = [e.job for e in read_all(tmp_path / "x.omt")[1] if isinstance(e, JobSubmit)]
    assert [(j.id, j.duration_s) for j in jobs] == [("j1", 100.0), ("j2", 100.0)]
    assert [n for n, _ in stats.unusable] == [5, 6] and stats.bad_lines == []
    assert "field status: 2: a partial execution of job 1 (its summary line" in stats.unusable[0][1]
    assert stats.unusable_kinds == {"partial execution": 2}
    assert "unusable rows skipped: 2 (partial execution 2)" in read_all(tmp_path / "x.omt")[0].notes


@pytest.mark.parametrize("flags, message", [
    (["--nodes", "0"], "--nodes must be between 1 and 1,000,000 machines, got 0"),
    (["--node-memory-mib", "-5"], "--node-memory-mib must be between 0 and 2**53, got -5"),
    (["--node-memory-mib", str(2**70)], "--node-memory-mib must be between 0 and 2**53"),
])
def test_bad_flag_values_are_usage_errors(tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit) as info:
        main(["import", "swf", swf(tmp_path, GOOD), "--out", str(tmp_path / "x.omt"), *flags])
    assert info.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "x.omt").exists()
