"""Gangs in a replay (docs/OMEGA_CORE.md, "Gangs"): a gang as wide as the cell whose modelled
decision outlasts the gang lease's minimum is placed; one wider than the cell is counted and its
reason says it never fits; a machine failure evicts the whole gang, which is placed again; bounded
slowdown and makespan of a hand-worked schedule."""

from __future__ import annotations

import pytest

from cellstate.check import check_cell
from cellstate.codec.job import decode_job_record
from cellstate.gang_commit import GANG_LEASE_TTL
from tools.fauxmaster.replay import ReplayConfig, replay
from tools.trace.events import JobSubmit, MachineAdd, MachineFail
from tools.trace.swf import import_swf

NODES = 70  # more than one txn's 63 claims at 128 ops: the gang is reserved in chunks


def swf(tmp_path, lines: list[str], nodes: int = NODES):
    path = tmp_path / "x.swf"
    path.write_text(f"; Version: 2.2\n; MaxNodes: {nodes}\n" + "".join(lines))
    import_swf(str(path), tmp_path / "x.omt")
    return tmp_path / "x.omt"


def line(number: int, submit: float, run: float, procs: int, requested: float = -1) -> str:
    return f"{number} {submit} -1 {run} {procs} -1 -1 {procs} {requested} -1 1 1 1 -1 -1 -1 -1 -1\n"


def record(result, job_id: str):
    key = result.keys.job(job_id)
    return decode_job_record(key, result.store.get(key).value)


@pytest.mark.parametrize("kind", ["batch", "easy"])
def test_a_gang_as_wide_as_the_cell_is_placed_though_its_decision_outlasts_the_minimum_lease(tmp_path, kind):
    """70 tasks at t_task 0.1 s: a 7.1 s decision, above the 5 s minimum lease. Before, the lease
    ended during the decision, every chunk failed on the lost gang key (a conflict each) and the
    gang was never placed."""
    t_job, t_task = 0.1, 0.1
    assert t_job + t_task * NODES > GANG_LEASE_TTL
    trace = swf(tmp_path, [line(1, 0, 100, NODES), line(2, 10, 50, 1)])
    result = replay(trace, ReplayConfig(schedulers=[{"name": "s", "kind": kind, "t_job": t_job, "t_task": t_task}],
                                        until=1000.0))
    wide = record(result, "j1")
    assert wide.placed_at == pytest.approx(t_job + t_task * NODES)
    assert result.jobs_unscheduled == 0 and result.check["ok"], result.check
    assert result.schedulers[0].conflict_fraction == 0.0
    assert result.losses["gangs_pending_at_end"] == 0


def test_a_gang_wider_than_the_cell_is_counted_and_says_it_never_fits(tmp_path):
    trace = swf(tmp_path, [line(1, 0, 100, NODES + 1), line(2, 10, 50, 1)])
    result = replay(trace, ReplayConfig(schedulers=[{"name": "s", "kind": "batch"}], until=1000.0))
    assert result.losses["gangs_pending_at_end"] == 1 and result.losses["gangs_never_fit"] == 1
    reason = record(result, "j1").reason
    assert f"never fits: the cell's {NODES} up machines hold {NODES} such tasks even empty" in reason, reason
    assert record(result, "j2").placed_at is not None


def test_bounded_slowdown_and_makespan_of_a_hand_worked_easy_schedule(tmp_path):
    """4 nodes, EASY deciding in no time (tests/schedulers/test_easy.py's DELAY_RULE): j1 runs 0..100,
    j2 (4 procs, 50 s) 100..150, j3 (100 s) 150..250, j4 (30 s) 30..60. BSLD = max(1, (wait + run) /
    max(run, 10)): 1, (90 + 50) / 50 = 2.8, (130 + 100) / 100 = 2.3, 1; makespan 250 s."""
    lines = [line(1, 0, 100, 3, 100), line(2, 10, 50, 4, 50), line(3, 20, 100, 1, 100), line(4, 30, 30, 1, 50)]
    trace = swf(tmp_path, lines, nodes=4)
    result = replay(trace, ReplayConfig(schedulers=[{"name": "s", "kind": "easy", "t_job": 0.0, "t_task": 0.0}],
                                        until=1000.0))
    sd = result.slowdown
    assert sd["jobs"] == 4 and sd["never"] == 0 and sd["threshold_s"] == 10.0
    assert sd["mean"] == pytest.approx((1 + 2.8 + 2.3 + 1) / 4)
    assert sd["median"] == pytest.approx(1.0) and sd["p90"] == pytest.approx(2.8)
    assert sd["makespan_s"] == pytest.approx(250.0) and sd["jobs_ended"] == 4 and sd["jobs_not_ended"] == 0
    assert result.to_dict(include_wall=False)["slowdown"] == sd


def test_a_short_job_is_bounded_by_the_threshold(tmp_path):
    """A 2 s job waiting 18 s behind a 20 s one on 1 node: (18 + 2) / max(2, 10) = 2, not 10."""
    trace = swf(tmp_path, [line(1, 0, 20, 1), line(2, 2, 2, 1)], nodes=1)
    result = replay(trace, ReplayConfig(schedulers=[{"name": "s", "kind": "easy", "t_job": 0.0, "t_task": 0.0}],
                                        until=100.0))
    assert result.slowdown["p90"] == pytest.approx(2.0) and result.slowdown["makespan_s"] == pytest.approx(22.0)


def test_a_machine_failure_evicts_the_whole_gang_which_is_placed_again(tmp_path):
    """A gang of 3 on the 3 machines of t = 0 (one task each: a machine holds one); a fourth machine
    comes at t = 20; m0 fails at t = 50: its member and the 2 others go back to pending in the
    failure's txn (no revision of the store shows the gang partly running), and the gang is placed
    again whole on m1, m2, m3."""
    from cellstate.model import Job, JobKind
    from cellstate.resources import Resources
    from fauxmaster_traces import machine, write

    gang = Job("g", JobKind.BATCH, 3, Resources(3000, 512), duration_s=1000.0, gang=True)
    path = write(tmp_path / "fail.omt", [MachineAdd(0.0, machine(i)) for i in range(3)] + [
        JobSubmit(1.0, gang), MachineAdd(20.0, machine(3)), MachineFail(50.0, "m0")])
    result = replay(path, ReplayConfig(schedulers=[{"name": "s", "kind": "batch"}], until=200.0,
                                       store_history=True))
    assert record(result, "g").tasks == "aaa"
    for revision in range(1, result.store.revision() + 1):  # the gang is never seen partly running
        assert "partial-gang" not in check_cell(result.store, result.keys, revision).kinds(), revision
    allocs = [kv for kv in result.store.range(result.keys.job_allocs("g")).kvs]
    from cellstate.codec.records import decode_alloc
    assert sorted(decode_alloc(kv.key, kv.value).machine_id for kv in allocs) == ["m1", "m2", "m3"]
    assert result.cell["gang_members_evicted"] == 2 and result.cell["machines_failed"] == 1
    assert result.check["ok"], result.check


def test_slowdown_is_shown_by_replay_report_and_the_page(tmp_path, capsys):
    import json

    from tools.cli import main

    lines = [line(1, 0, 100, 3, 100), line(2, 10, 50, 4, 50), line(3, 20, 100, 1, 100), line(4, 30, 30, 1, 50)]
    trace = swf(tmp_path, lines, nodes=4)
    out = tmp_path / "r.json"
    assert main(["replay", str(trace), "--schedulers", "easy:easy", "--until", "1000", "--json-out", str(out)]) == 0
    assert "bounded slowdown (threshold 10 s) over 4 jobs with a run time fully placed (0 never)" in \
        capsys.readouterr().out
    assert json.loads(out.read_text())["slowdown"]["jobs"] == 4
    assert main(["report", str(out), str(out)]) == 0
    text = capsys.readouterr().out
    assert "bounded slowdown mean / median / p90" in text and "makespan s" in text
    pytest.importorskip("matplotlib")
    assert main(["report", str(out), "--html", str(tmp_path / "page")]) == 0
    assert "Bounded slowdown (threshold 10 s)" in (tmp_path / "page" / "index.html").read_text()


def test_a_preempted_member_evicts_the_whole_gang_in_a_replay(tmp_path):
    """Borg, 3 machines: a low-priority gang of 3 fills them; a production job arrives and preempts
    one member; the other two are evicted too (their usage released), and the gang waits whole: the
    final cell has no partial gang."""
    from cellstate.model import Job, JobKind
    from cellstate.resources import Resources
    from fauxmaster_traces import machine, write

    gang = Job("g", JobKind.BATCH, 3, Resources(3000, 512), duration_s=1000.0, gang=True, priority=0)
    prod = Job("prod", JobKind.SERVICE, 1, Resources(3000, 512), priority=200)
    path = write(tmp_path / "preempt.omt", [MachineAdd(0.0, machine(i)) for i in range(3)] + [
        JobSubmit(1.0, gang), JobSubmit(10.0, prod)])
    result = replay(path, ReplayConfig(schedulers=[{"name": "borg", "kind": "borg", "jobs": "all"}], until=100.0))
    assert record(result, "prod").tasks == "a"
    assert record(result, "g").tasks == "ppp"
    assert result.cell["gang_members_evicted"] == 2
    assert result.losses["gangs_pending_at_end"] == 1 and result.losses["gangs_never_fit"] == 0
    assert result.utilization[-1].cpu == pytest.approx(3000 / 12000)  # prod alone: the members' usage released
    assert result.check["ok"], result.check
