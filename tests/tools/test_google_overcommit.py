"""The Google-2011 cell models (``tools.trace.google2011.cell``): ``overcommit`` (production against
physical capacity, every task against physical x (1 + reclaim), machines raised to hold the
recorded t = 0 state) and the trace's ``machine_events`` table. Small excerpts, answers by hand."""

from __future__ import annotations

import pytest

from cellstate.check import check_cell
from cellstate.resources import Resources
from tools.cli import main as cli_main
from tools.fauxmaster.replay import ReplayConfig, replay
from tools.trace.events import JobSubmit, MachineAdd, MachineRemove
from tools.trace.format import read_trace
from tools.trace.google2011.cell import (
    PROD_CPU, PROD_MEMORY, CapacityModel, CellModel, MachineEventsError, overcommit_cell, parse_reclaim,
)
from tools.trace.google2011.importer import import_google2011

from google_rows import S, task_row, write_gz

CPU, MEM = 64_000, 262_144  # 1.0 normalized


def t0_excerpt(tmp_path):
    """Uniform machines (0.5 cpu, 0.5 memory). t = 0 on machine 1: job 1 (batch, 2 tasks of 0.3
    cpu) and job 2 (production, 1 task of 0.2 cpu): 0.8 cpu on a 0.5 machine; machine 2 empty. A
    plain cell leaves one 0.3 task pending (trace order); the overcommit cell holds it all."""
    rows = [task_row(0, 1, 0, "", 0, cpu=0.3), task_row(0, 1, 0, 1, 1, cpu=0.3),
            task_row(0, 1, 1, "", 0, cpu=0.3), task_row(0, 1, 1, 1, 1, cpu=0.3),
            task_row(0, 2, 0, "", 0, priority=9, cpu=0.2), task_row(0, 2, 0, 1, 1, priority=9, cpu=0.2),
            task_row(0, 3, 0, "", 0), task_row(0, 3, 0, 2, 1),
            task_row(S + 50_000_000, 9, 0, "", 0)]
    return write_gz(tmp_path / "te.csv.gz", rows), write_gz(tmp_path / "je.csv.gz", [])


def events_of(path):
    header, reader = read_trace(path)
    with reader:
        return header, list(reader)


def test_overcommit_cell_holds_the_recorded_state_and_states_itself(tmp_path):
    te, je = t0_excerpt(tmp_path)
    plain, over = tmp_path / "plain.omt", tmp_path / "over.omt"
    import_google2011(te, je, plain, CapacityModel("uniform"), cell_model=CellModel("plain"))
    import_google2011(te, je, over, CapacityModel("uniform"))  # the default
    header, events = events_of(over)
    assert "cell model overcommit" in header.capacity_model and "reclaim cpu" in header.capacity_model
    machines = {e.machine.id: e.machine.capacity for e in events if isinstance(e, MachineAdd)}
    # t = 0 requests 0.3 + 0.3 + 0.2 + 0.25 = 1.05 cpu on 1.0 physical: reclaim cpu 0.05 (derived);
    # memory 4 x 0.125 = 0.5 on 1.0: reclaim 0 (at least 0)
    assert "reclaim cpu 0.0500 memory 0.0000" in header.capacity_model
    m1, m2 = machines["m1"], machines["m2"]
    assert m1.get(PROD_CPU) == 32_000 and m1.get(PROD_MEMORY) == 131_072  # physical: prod 0.2 fits 0.5
    assert m1.cpu == 56_000  # holds 0.8 cpu = 51,200, rounded up to 1/8 (8,000 millicores)
    assert m2.cpu == 40_000  # 0.5 x 1.05 = 33,600, rounded up to 40,000
    jobs = {e.job.id: e.job for e in events if isinstance(e, JobSubmit)}
    assert jobs["g2"].request.get(PROD_CPU) == jobs["g2"].request.cpu == 12_800  # production carries prod_*
    assert not jobs["g1"].request.extra
    # the plain cell is the one of importer revision 3: nothing added
    _, plain_events = events_of(plain)
    assert all(not e.machine.capacity.extra for e in plain_events if isinstance(e, MachineAdd))
    for path, pending in ((plain, 1), (over, 0)):
        result = replay(path, ReplayConfig(until=40.0))
        assert sum(result.cell["initial_not_placed"].values()) == pending
        assert result.check["ok"]
        assert result.fidelity.capacity_model == events_of(path)[0].capacity_model
    assert any("cell model overcommit" in line for line in replay(over, ReplayConfig(until=40.0)).fidelity.lines())


def test_production_is_held_to_physical_capacity_and_the_committer_agrees(tmp_path):
    """One machine (0.5 cpu physical), reclaim 1.0 (given): schedulable 1.0 cpu. After t = 0:
    production job 1 (0.4 cpu) is placed; production job 2 (0.3 cpu) would make production 0.7 >
    0.5 physical: pending; batch job 3 (0.4) runs in the reclaimed share (0.8 <= 1.0)."""
    rows = [task_row(0, 7, 0, "", 0, cpu=0.01), task_row(0, 7, 0, 1, 1, cpu=0.01),
            task_row(S + 10_000_000, 1, 0, "", 0, priority=9, cpu=0.4),
            task_row(S + 20_000_000, 2, 0, "", 0, priority=10, cpu=0.3),
            task_row(S + 30_000_000, 3, 0, "", 0, priority=0, cpu=0.4),
            task_row(S + 100_000_000, 9, 0, "", 0)]
    te, je = write_gz(tmp_path / "te.csv.gz", rows), write_gz(tmp_path / "je.csv.gz", [])
    out = tmp_path / "o.omt"
    import_google2011(te, je, out, CapacityModel("uniform"), cell_model=CellModel("overcommit", 1.0))
    header, events = events_of(out)
    assert "reclaim cpu 1.0000 memory 1.0000 (given (--reclaim))" in header.capacity_model
    machine = next(e.machine for e in events if isinstance(e, MachineAdd))
    assert (machine.capacity.cpu, machine.capacity.get(PROD_CPU)) == (64_000, 32_000)
    result = replay(out, ReplayConfig(until=90.0))
    allocs = {kv.key.rsplit("/", 2)[-2] for kv in result.store.range(result.keys.kind_prefix("allocs")).kvs}
    assert {"g1", "g3", "g7"} <= allocs and "g2" not in allocs
    assert check_cell(result.store, result.keys).ok


def test_overcommit_cell_rule_by_hand():
    physical = {"1": Resources(32_000, 131_072, 1000), "2": Resources(32_000, 131_072, 1000)}
    placed = [("1", Resources(40_000, 10, 600), True), ("1", Resources(20_000, 10, 600), False)]
    oc = overcommit_cell(physical, placed, None, CPU, MEM)
    # production 40,000 > 32,000: physical raised to the 1/32 grid (2,000): 40,000
    assert oc.physical["1"] == (40_000, 131_072) and oc.physical["2"] == (32_000, 131_072)
    assert oc.raised_physical == 1
    # reclaim cpu = 60,000 / 72,000 - 1 < 0: 0; schedulable holds 60,000 -> 64,000 (1/8 grid); disk 1,200
    assert oc.reclaim == (0.0, 0.0)
    assert oc.schedulable["1"] == (64_000, 131_072, 1_209) and oc.schedulable["2"] == (32_000, 131_072, 1000)
    assert oc.capacity("1") == Resources.of(64_000, 131_072, 1_209, prod_cpu=40_000, prod_memory=131_072)
    assert oc.later(32_000, 131_072, 1000).get(PROD_CPU) == 32_000


def test_cell_model_and_reclaim_are_checked():
    assert parse_reclaim("auto") is None and parse_reclaim("0.25") == 0.25
    for bad in ("x", "-1", "nan", "inf"):
        with pytest.raises(ValueError):
            parse_reclaim(bad)
    with pytest.raises(ValueError):
        CellModel("plain", 0.5)
    with pytest.raises(ValueError):
        CellModel("borg")


MACHINE_EVENTS = [  # timestamp, machine, type (0 ADD, 1 REMOVE, 2 UPDATE), platform, cpus, memory
    [0, 1, 0, "p", 0.5, 0.25],
    [0, 2, 0, "p", 1.0, 1.0],
    [0, 4, 0, "p", "", ""],  # blank capacities: drawn from the capacity model
    [S + 100_000_000, 3, 0, "p", 0.25, 0.25],  # added at 100 s
    [S + 200_000_000, 2, 1, "p", "", ""],  # removed at 200 s
    [S + 250_000_000, 1, 2, "p", 0.5, 0.5],  # an UPDATE after t = 0: counted, not applied
]


def test_machine_events_give_capacities_additions_and_removals(tmp_path):
    rows = [task_row(0, 1, 0, "", 0), task_row(0, 1, 0, 1, 1), task_row(0, 5, 0, "", 0), task_row(0, 5, 0, 5, 1),
            task_row(S + 300_000_000, 9, 0, "", 0)]
    te, je = write_gz(tmp_path / "te.csv.gz", rows), write_gz(tmp_path / "je.csv.gz", [])
    me = write_gz(tmp_path / "me.csv.gz", MACHINE_EVENTS)
    out = tmp_path / "m.omt"
    stats = import_google2011(te, je, out, CapacityModel("uniform"), cell_model=CellModel("plain"), machine_events=me)
    header, events = events_of(out)
    assert "machine_events=" in header.capacity_model and "cell model plain" in header.capacity_model
    adds = [(e.t, e.machine.id, e.machine.capacity.cpu, e.machine.capacity.memory)
            for e in events if isinstance(e, MachineAdd)]
    assert adds == [(0.0, "m1", 32_000, 65_536), (0.0, "m2", 64_000, 262_144), (0.0, "m4", 32_000, 131_072),
                    (0.0, "m5", 32_000, 131_072), (100.0, "m3", 16_000, 65_536)]
    assert [(e.t, e.machine_id) for e in events if isinstance(e, MachineRemove)] == [(200.0, "m2")]
    assert stats.skipped["machine_events capacity blank (drawn from the capacity model)"] == 1
    assert stats.skipped["machine not up in machine_events at t = 0"] == 1  # m5
    assert stats.skipped["machine_events UPDATE rows after t = 0 (not applied: no capacity-change event)"] == 1
    result = replay(out, ReplayConfig())
    assert result.cell["machines_added"] == 5 and result.cell["machines_failed"] == 1 and result.check["ok"]
    # with the overcommit model, the machine added later gets the reclaimable share too
    over = tmp_path / "mo.omt"
    import_google2011(te, je, over, CapacityModel("uniform"), cell_model=CellModel("overcommit", 0.5),
                      machine_events=me)
    late = [e.machine.capacity for e in events_of(over)[1] if isinstance(e, MachineAdd) and e.t > 0]
    assert late == [Resources.of(24_000, 98_304, 1_048_576, prod_cpu=16_000, prod_memory=65_536)]


def test_bad_machine_events_is_one_line_and_nothing_written(tmp_path, capsys):
    te, je = t0_excerpt(tmp_path)
    bad = write_gz(tmp_path / "me.csv.gz", [[0, 1, 0, "p", 0.5, 0.25], [0, 2, 7, "p", 0.5, 0.5]])
    out = tmp_path / "x.omt"
    with pytest.raises(MachineEventsError, match="line 2"):
        import_google2011(te, je, out, machine_events=bad)
    assert not out.exists()
    with pytest.raises(SystemExit) as exit_:
        cli_main(["import", "google2011", "--task-events", te, "--job-events", je, "--out", str(out),
                  "--machine-events", bad])
    err = capsys.readouterr().err
    assert exit_.value.code == 65 and "line 2" in err and len(err.strip().splitlines()) == 1 and not out.exists()


def test_cli_states_the_cell_model(tmp_path, capsys):
    te, je = t0_excerpt(tmp_path)
    out = tmp_path / "c.omt"
    assert cli_main(["import", "google2011", "--task-events", te, "--job-events", je, "--out", str(out),
                     "--capacity-model", "uniform", "--cell-model", "overcommit", "--reclaim", "0.5"]) == 0
    assert "cell model overcommit, reclaim 0.5" in capsys.readouterr().out
    assert "reclaim cpu 0.5000" in events_of(out)[0].capacity_model
    for args in (["--reclaim", "lots", "--cell-model", "overcommit"], ["--reclaim", "0.5", "--cell-model", "plain"]):
        with pytest.raises(SystemExit) as exit_:
            cli_main(["import", "google2011", "--task-events", te, "--job-events", je,
                      "--out", str(tmp_path / "d.omt"), *args])
        assert exit_.value.code == 2 and not (tmp_path / "d.omt").exists()
    capsys.readouterr()
    assert cli_main(["import", "google2011", "--task-events", te, "--job-events", je, "--out",
                     str(tmp_path / "default.omt")]) == 0
    assert "cell model overcommit, reclaim auto" in capsys.readouterr().out  # the default
    assert cli_main(["replay", str(out), "--until", "10", "--html", str(tmp_path / "page")]) == 0
    text = capsys.readouterr().out
    assert "cell (trace header): cell model overcommit" in text
    assert text.count("cell model overcommit") == 1, text  # the fidelity section does not repeat it
    page = (tmp_path / "page" / "index.html").read_text()
    assert page.count("cell model overcommit") == 1 and "Fidelity" in page
