"""Machines in a replay: a failed (or removed) machine added again by the trace comes back up
empty, as the agents' repair does; a machine added down counts for nothing until then."""

from __future__ import annotations

from dataclasses import replace

from fauxmaster_traces import batch, machine, write

from cellstate.codec.records import decode_job_record, decode_machine
from cellstate.model import MachineState
from tools.fauxmaster.replay import ReplayConfig, replay
from tools.trace.events import JobSubmit, MachineAdd, MachineFail, MachineRemove

ONE = [dict(name="b", kind="batch", seed=1)]


def stored(result, kind: str, ident: str):
    kv = result.store.get(result.keys.kind_prefix(kind) + ident)
    return (decode_machine if kind == "machines" else decode_job_record)(kv.key, kv.value)


def test_a_failed_machine_added_again_is_repaired_and_used(tmp_path):
    events = [MachineAdd(0.0, machine(0)), MachineAdd(0.0, machine(1)), JobSubmit(1.0, batch("a", 8)),
              MachineFail(5.0, "m0"), MachineFail(6.0, "m0"),  # the second: already down
              MachineAdd(10.0, machine(0)), MachineAdd(11.0, machine(1))]  # m0 repaired; m1 already up
    result = replay(write(tmp_path / "t.omt", events), ReplayConfig(schedulers=ONE, until=20.0, sample_every_s=4.0))
    assert stored(result, "machines", "m0").state is MachineState.UP
    assert stored(result, "jobs", "a").tasks == "a" * 8  # the 4 evicted at t = 5 placed again on m0
    by_t = {u.t: u for u in result.utilization}
    assert (by_t[8.0].machines, by_t[8.0].cpu) == (1, 1.0) and (by_t[12.0].machines, by_t[12.0].cpu) == (2, 1.0)
    counters = result.cell
    assert (counters["machines_added"], counters["machines_failed"]) == (3, 1)
    assert counters["skipped"] == {"failure of a machine already down": 1, "machine_add of a machine already up": 1}
    assert result.check["ok"], result.check["violations"]


def test_a_removed_machine_added_again_and_a_machine_added_down(tmp_path):
    events = [MachineAdd(0.0, machine(0)), MachineAdd(0.0, replace(machine(1), state=MachineState.DOWN)),
              JobSubmit(1.0, batch("a", 6)), MachineRemove(2.0, "m0"), MachineAdd(3.0, machine(0)),
              MachineAdd(4.0, machine(1))]
    result = replay(write(tmp_path / "t.omt", events), ReplayConfig(schedulers=ONE, until=10.0, sample_every_s=1.0))
    by_t = {u.t: u for u in result.utilization}
    assert by_t[1.0].machines == 1  # m1 down: not counted
    assert by_t[5.0].machines == 2 and stored(result, "jobs", "a").tasks == "a" * 6
    assert result.check["ok"], result.check["violations"]
