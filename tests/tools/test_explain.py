"""``omega explain``: per-filter removals, the top machines' weighted contributions, the
unschedulable reason and the preemption option; on a replica of a real etcd cell."""

from __future__ import annotations

import json

import pytest

from cellstate.codec.records import encode_alloc, encode_job_record, encode_machine
from cellstate.model import Alloc, Constraint, ConstraintOp, Job, JobKind, JobRecord, Machine, MachineState, TaskState
from cellstate.replica.watched import Replica
from cellstate.resources import Resources
from cellstate.store import Put
from schedulers.chains import make_scheduler
from tools.cli import main
from tools.explain import ExplainError, explain, render

CAP = Resources(4000, 8192, 0)
ZONE_A = (Constraint("zone", ConstraintOp.EQ, ("a",)),)
ON_P = (Constraint("platform", ConstraintOp.EQ, ("p",)),)


def _cell(store, keys):
    """m0 down; m1 zone b; m2 (the only platform p) full of a priority-1 task; m3 half full; m4 empty."""
    machines = [Machine("m0", CAP, zone="a", state=MachineState.DOWN), Machine("m1", CAP, zone="b"),
                Machine("m2", CAP, zone="a", platform="p", allocated=CAP, task_count=1),
                Machine("m3", CAP, zone="a", allocated=Resources(2000, 4096, 0), task_count=1),
                Machine("m4", CAP, zone="a")]
    filler = Job("filler", JobKind.BATCH, 2, Resources(2000, 4096, 0), priority=1)
    big = Job("big", JobKind.BATCH, 1, CAP, priority=1)
    jobs = [JobRecord.new(Job("web", JobKind.SERVICE, 2, Resources(1000, 1024, 0), constraints=ZONE_A), 1.0),
            JobRecord.new(Job("huge", JobKind.SERVICE, 1, Resources(4000, 8192, 0), priority=9, constraints=ON_P), 1.0),
            JobRecord.new(Job("toolow", JobKind.BATCH, 1, Resources(4000, 8192, 0), priority=0, constraints=ON_P), 1.0),
            JobRecord.new(filler, 1.0).with_tasks([0], TaskState.PLACED),
            JobRecord.new(big, 1.0).with_tasks([0], TaskState.PLACED)]
    ops = [Put(keys.machine(m.id), encode_machine(m)) for m in machines]
    ops += [Put(keys.job(r.id), encode_job_record(r)) for r in jobs]
    ops += [Put(keys.alloc("filler", 0), encode_alloc(Alloc("filler", 0, "m3", filler.request, 1))),
            Put(keys.alloc("big", 0), encode_alloc(Alloc("big", 0, "m2", big.request, 1)))]
    store.txn((), ops)
    replica = Replica(store, keys)
    replica.sync()
    return replica


def test_filters_and_top_machines(etcd_store, cell_keys):
    view = _cell(etcd_store, cell_keys)
    sched = make_scheduler("borg", "x", 0)
    ex = explain(view, "web", None, sched.pipeline, top=5, scheduler=sched)
    assert (ex.task, ex.machines, ex.feasible) == (0, 5, 2)
    removed = {s.plugin: (s.removed, s.reasons) for s in ex.filters}
    assert removed["machine_state"] == (1, (("down", 1),))
    assert removed["resources_fit"] == (1, (("cpu", 1),))
    assert removed["constraints"] == (1, (("zone eq a", 1),))
    assert [m.machine_id for m in ex.top] == ["m3", "m4"]  # borg_hybrid: the fuller machine packs better
    for m in ex.top:
        assert set(m.contributions) == {"priority_aware", "borg_hybrid", "package_locality"}
        assert m.rank[1] == pytest.approx(m.contributions["borg_hybrid"] + m.contributions["package_locality"])
    assert ex.unschedulable is None and ex.preemption is None
    assert "removed" in render(ex) and "m3" in render(ex)


@pytest.mark.parametrize("job_id,victims", [("huge", [["big", 0]]), ("toolow", None)],
                         ids=["preemption-places-it", "nothing-lower-to-evict"])
def test_unschedulable(etcd_store, cell_keys, job_id, victims):
    view = _cell(etcd_store, cell_keys)
    sched = make_scheduler("borg", "x", 0)
    ex = explain(view, job_id, None, sched.pipeline, scheduler=sched)
    assert ex.feasible == 0 and ex.top == ()
    assert ex.unschedulable == ("no machine fits: constraints: platform eq p (2 machines), "
                                "resources_fit: cpu (2), machine_state: down (1)")
    assert (ex.preemption["evicts"] if ex.preemption else None) == victims


@pytest.mark.parametrize("job_id,task,message", [
    ("nope", None, "no job 'nope'"), ("web", 7, "no task 7"), ("filler", None, None),
], ids=["unknown-job", "bad-task", "placed-job-first-pending"])
def test_task_selection(etcd_store, cell_keys, job_id, task, message):
    view = _cell(etcd_store, cell_keys)
    pipeline = make_scheduler("batch", "x", 0).pipeline
    if message is None:
        assert explain(view, job_id, task, pipeline).task == 1
        return
    with pytest.raises(ExplainError, match=message):
        explain(view, job_id, task, pipeline)


def test_cli_json(etcd_server, etcd_store, cell_keys, capsys):
    _cell(etcd_store, cell_keys).close()
    argv = ["explain", "--endpoints", etcd_server.endpoints[0], "--cell", cell_keys.cell,
            "--root", cell_keys.root, "web", "1", "--json", "--kind", "borg"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["task"] == 1 and data["feasible"] == 2 and data["top"][0]["machine_id"] == "m3"
    assert main(argv[:-3] + ["--kind", "service"]) == 0
    assert "zone_spread" in capsys.readouterr().out


@pytest.mark.parametrize("job_id,kind", [("web", "service"), ("toolow", "batch")])
def test_cli_follows_the_jobs_scheduler_class(etcd_server, etcd_store, cell_keys, capsys, job_id, kind):
    """Without --kind, the chain is the one a scheduler process of the job's class runs."""
    _cell(etcd_store, cell_keys).close()
    argv = ["explain", "--endpoints", etcd_server.endpoints[0], "--cell", cell_keys.cell,
            "--root", cell_keys.root, job_id, "-o", "json"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["scheduler_class"] == kind
    assert tuple(data["chain"]) == make_scheduler(kind, "x", 0).pipeline.names()
    assert tuple(data["chain"]) != make_scheduler("borg", "x", 0).pipeline.names()


def test_cli_chain_file_table_of_the_jobs_class(etcd_server, etcd_store, cell_keys, capsys, tmp_path):
    """--chains picks the table named like the job's class, as `scheduler run --config` does."""
    _cell(etcd_store, cell_keys).close()
    chains = tmp_path / "chains.toml"
    chains.write_text('[service]\nkind = "service"\n[[service.filters]]\nname = "machine_state"\n'
                      '[[service.filters]]\nname = "resources_fit"\n[[service.scorers]]\nname = "least_loaded"\n'
                      '[borg]\nkind = "borg"\n[[borg.filters]]\nname = "machine_state"\n')
    argv = ["explain", "--endpoints", etcd_server.endpoints[0], "--cell", cell_keys.cell,
            "--root", cell_keys.root, "web", "-o", "json", "--chains", str(chains)]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["chain"] == ["machine_state", "resources_fit", "least_loaded"]


def test_cli_usage_errors(etcd_server, etcd_store, cell_keys):
    _cell(etcd_store, cell_keys).close()
    base = ["explain", "--endpoints", etcd_server.endpoints[0], "--cell", cell_keys.cell, "--root", cell_keys.root]
    for extra in (["web", "7"], ["web", "--table", "x"], ["web", "--top", "0"]):
        with pytest.raises(SystemExit) as info:
            main(base + extra)
        assert info.value.code == 2
    assert main(base + ["nope"]) == 1  # no such job: a runtime error, as for kill and job status


def test_cli_tells_which_scheduler_class_serves_the_job(etcd_server, etcd_store, cell_keys, capsys):
    from cellstate.stats_sink import LeasedStatsSink
    from cellstate.scheduler_stats import SchedulerStats

    _cell(etcd_store, cell_keys).close()
    argv = ["explain", "--endpoints", etcd_server.endpoints[0], "--cell", cell_keys.cell,
            "--root", cell_keys.root, "web", "1"]
    assert main(argv) == 0
    assert "scheduler class service: no live scheduler serves it" in capsys.readouterr().out
    sink = LeasedStatsSink(etcd_store, cell_keys, "service-7")
    try:
        sink.publish(SchedulerStats("service-7", "service"))
        assert main(argv) == 0
        assert "scheduler class service: served by service-7" in capsys.readouterr().out
        assert main(argv + ["--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert (data["scheduler_class"], data["served_by"]) == ("service", ["service-7"])
    finally:
        sink.close()
