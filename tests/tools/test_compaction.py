"""``omega experiment compaction``: the snapshot of a trace at an instant, the variants, the binary
search against a brute-force count of every cell size, the sweep-engine run with 2 seeds, and
one-line errors for bad input."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from cellstate.model import Job, JobKind, Machine
from cellstate.resources import Resources
from tools.cli import main
from tools.fauxmaster.experiments import compaction as c
from tools.fauxmaster.experiments.snapshot import EmptySnapshot
from tools.trace.events import JobKill, JobSubmit, MachineAdd, MachineFail, TaskEnd, TaskEndStatus
from tools.trace.format import TraceHeader, TraceWriter
from pathlib import Path

TINY = str(Path(__file__).resolve().parents[2] / "tests" / "data" / "traces" / "sweep" / "tiny-a.omt.gz")


def _machine(name: str, cpu: int = 4000, memory: int = 8192) -> Machine:
    return Machine(name, Resources(cpu, memory, 100))


def _job(name: str, tasks: int, cpu: int = 1000, memory: int = 1024, priority: int = 0) -> Job:
    return Job(name, JobKind.BATCH, tasks, Resources(cpu, memory), priority=priority)


def _trace(path, events) -> str:
    header = TraceHeader(source="test", created_at="1970-01-01T00:00:00+00:00", capacity_model="test")
    with TraceWriter(str(path), header) as writer:
        for event in events:
            writer.write(event)
    return str(path)


def test_the_snapshot_holds_what_is_in_the_cell_at_the_instant(tmp_path):
    path = _trace(tmp_path / "t.omt", [
        MachineAdd(0.0, _machine("m1")), MachineAdd(0.0, _machine("m2")), MachineAdd(0.0, _machine("m3")),
        JobSubmit(0.0, _job("a", 3)), JobSubmit(0.0, _job("k", 2)),
        TaskEnd(5.0, "a", 1, TaskEndStatus.FINISHED), JobKill(6.0, "k"), MachineFail(7.0, "m3"),
        JobSubmit(10.0, _job("b", 4)), JobSubmit(20.0, _job("late", 1))])
    snap = c.take_snapshot(path, at=10.0)
    assert sorted(m.id for m in snap.machines) == ["m1", "m2"]
    assert {j.id: j.tasks for j in snap.jobs} == {"a": 2, "b": 4}
    assert snap.counts["tasks_present"] == 6 and snap.counts["machines_not_up"] == 0
    assert c.take_snapshot(path).at == 10.0  # the middle of 0..20
    c.write_snapshot(snap, tmp_path / "s.omt.gz", "t.omt")
    machines, jobs = c.read_snapshot(tmp_path / "s.omt.gz")
    assert [m.id for m in machines] == [m.id for m in snap.machines] and jobs == snap.jobs
    with pytest.raises(c.CompactionError, match="outside the trace's span"):
        c.take_snapshot(path, at=21.0)
    with pytest.raises(EmptySnapshot, match="nothing to compact"):
        c.take_snapshot(path, at=6.5, sample=1e-9)


def test_variants_split_by_priority_and_round_requests_up_to_powers_of_two():
    assert [c.pow2_up(x, 500) for x in (0, 1, 500, 501, 1000, 1001, 3000)] == [0, 500, 500, 1000, 1000, 2000, 4000]
    prod, other = _job("p", 1, priority=9), _job("o", 1, priority=8)
    assert [(name, [j.id for j in g]) for name, g in c.variant_groups("segregated", [prod, other])] == [
        ("prod", ["p"]), ("non-prod", ["o"])]
    request = Resources.of(cpu=700, memory=1500, disk=3, prod_cpu=700, prod_memory=1500)
    rounded = c.pow2_request(request)
    assert (rounded.cpu, rounded.memory, rounded.disk) == (1000, 2048, 3)
    assert (rounded.get("prod_cpu"), rounded.get("prod_memory")) == (1000, 2048)
    assert c.parse_variants("pow2,baseline,pow2") == ["baseline", "pow2"]
    with pytest.raises(c.CompactionError, match="unknown bogus"):
        c.parse_variants("bogus")


def test_clones_extend_the_order_and_the_search_grows_the_cell_when_the_whole_one_does_not_fit():
    order = [_machine(f"m{i}") for i in range(4)]
    cell = c.cell_of(order, 9)
    assert [m.id for m in cell] == ["m0", "m1", "m2", "m3", "m0~c1", "m1~c1", "m2~c1", "m3~c1", "m0~c2"]
    jobs = [_job("a", 100, cpu=1, memory=1)]
    for need in (1, 3, 4, 6, 16):  # pending(n) = tasks short of `need` machines: fits from n = need
        found = c.compact(order, jobs, threshold=0.0, pending=lambda n, need=need: 100 * max(0, need - n))
        assert found.machines == need
    assert c.compact(order, jobs, 0.0, pending=lambda n: 1).machines is None  # never fits, up to 4x
    huge = [_job("h", 2, cpu=10_000)]
    assert c.compact(order, huge, pending=lambda n: 0).unfittable == 2


def test_the_binary_search_finds_the_brute_force_smallest_cell():
    snap = c.take_snapshot(TINY, sample=0.2)
    order = c.machine_order(snap.machines, 3)
    allowed = int(c.THRESHOLD * snap.tasks)
    brute = {n: c.pending_on(c.cell_of(order, n), snap.jobs, 3)[0] for n in range(1, len(order) + 1)}
    # the smallest n from which every larger cell fits (the search assumes fitting is monotone)
    smallest = min(n for n in brute if all(brute[m] <= allowed for m in brute if m >= n))
    found = c.compact(order, snap.jobs, seed=3)
    assert found.machines == smallest
    assert found.invariants_ok and found.unfittable == 0
    assert all(brute[n] == left for n, left in found.probes if n in brute)
    assert len(found.probes) < len(brute)  # it searched, it did not count every size
    assert brute[smallest - 1] > allowed and brute[smallest] <= allowed
    bound = c.lower_bound(order, snap.jobs, allowed)
    assert all(brute[n] > allowed for n in range(1, bound + 1))  # the bound only skips cells that do not fit
    # the whole search from 0 on the same counts (a workload of tiny requests has no bound)
    tiny = [_job("tiny", snap.tasks, cpu=1, memory=1)]
    assert c.lower_bound(order, tiny, allowed) == 0
    assert c.compact(order, tiny, pending=lambda n: brute[n]).machines == smallest


def test_the_experiment_runs_its_searches_on_the_sweep_engine(tmp_path, capsys):
    out = tmp_path / "sweep"
    argv = ["experiment", "compaction", TINY, "--seeds", "0-1", "--sample", "0.3", "--jobs", "2",
            "--out", str(out), "-o", "json", "--html", str(tmp_path / "html")]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data["variants"]) == {"baseline", "segregated", "pow2"}
    for figures in data["variants"].values():
        assert [s["seed"] for s in figures["seeds"]] == [0, 1]
        pcts = [s["machines_pct"] for s in figures["seeds"]]
        assert figures["p90_machines_pct"] == round(float(np.percentile(pcts, 90)), 2)
        assert 0 < figures["median_machines_pct"] <= 100 * c.MAX_GROWTH
    assert data["paper"]["segregated_overhead_pct"] == [20, 30] and data["failed"] == []
    base = data["variants"]["baseline"]["p90_machines_pct"]
    assert data["overheads"]["pow2"]["p90_machines_pct"] == round(
        100 * (data["variants"]["pow2"]["p90_machines_pct"] / base - 1), 1)
    rows = list(csv.DictReader(open(out / "runs.csv")))
    assert len(rows) == 6 and {r["status"] for r in rows} == {"done"}
    assert (tmp_path / "html" / "index.html").is_file()
    for path in (out / "runs").glob("*.json"):  # a segregated size is its two sub-cells' sum
        run = json.loads(path.read_text())
        groups = run["detail"]["groups"]
        assert run["summary"]["machines"] == sum(g["machines"] for g in groups.values())
        if run["summary"]["variant"] == "segregated":
            assert set(groups) == {"prod", "non-prod"}
    assert main(argv) == 0  # a second run resumes every search from the folder
    again = json.loads(capsys.readouterr().out)
    assert again["sweep"]["resumed"] == 6
    for name, figures in again["variants"].items():
        assert figures["p90_machines_pct"] == data["variants"][name]["p90_machines_pct"]
        assert [s["machines"] for s in figures["seeds"]] == [s["machines"] for s in data["variants"][name]["seeds"]]
        assert {s["status"] for s in figures["seeds"]} == {"resumed"}


@pytest.mark.parametrize("argv, code, message", [
    (["compaction"], 2, "needs TRACE"),
    (["compaction", TINY, "--variants", "baseline,bogus"], 2, "--variants: unknown bogus"),
    (["compaction", TINY, "--seeds", "x"], 2, "--seeds"),
    (["compaction", TINY, "--sample", "0"], 2, "--sample must be in (0, 1]"),
    (["compaction", TINY, "--at", "1e9"], 2, "outside the trace's span"),
    (["compaction", "/nonexistent/t.omt"], 2, "/nonexistent/t.omt"),
    (["compaction", TINY, "--quick"], 2, "--quick: not for experiment compaction"),
    (["architectures", "--variants", "pow2"], 2, "--variants: for experiment compaction or omega-sweep only"),
])
def test_bad_input_is_one_line_and_its_exit_status(argv, code, message, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["experiment", *argv])
    assert exc.value.code == code
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_a_file_that_is_not_a_trace_is_invalid_input(tmp_path, capsys):
    bad = tmp_path / "bad.omt"
    bad.write_text("not a trace\n")
    with pytest.raises(SystemExit) as exc:
        main(["experiment", "compaction", str(bad)])
    assert exc.value.code == 65
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
