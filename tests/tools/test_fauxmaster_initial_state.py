"""Replays that start from the recorded cell (task_placed at t = 0) or schedule it again."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fauxmaster_traces import batch, machine, write

from cellstate.codec.records import CodecError, decode_alloc
from tools.fauxmaster.replay import ReplayConfig, replay
from tools.fauxmaster.trace_feed import TraceFeed
from tools.trace.events import JobSubmit, MachineAdd, TaskEnd, TaskEndStatus, TaskPlaced

ONE = [dict(name="b", kind="batch", seed=1)]


def recorded_trace(path) -> str:
    """4 machines of 4 cores; at t = 0 four jobs with recorded machines (some do not fit)."""
    events = [MachineAdd(0.0, machine(i)) for i in range(4)]
    events += [JobSubmit(0.0, batch("fill", 4, duration=10.0)), JobSubmit(0.0, batch("big", 2, cpu=3000)),
               JobSubmit(0.0, replace(batch("apart", 2), different_machine=True)),
               JobSubmit(0.0, batch("lost", 1))]
    events += [TaskPlaced(0.0, "fill", i, "m0") for i in range(4)]
    events += [TaskPlaced(0.0, "big", 0, "m1"), TaskPlaced(0.0, "big", 1, "m1"),  # 2 x 3 cores > 4
               TaskPlaced(0.0, "apart", 0, "m2"), TaskPlaced(0.0, "apart", 1, "m2"),  # one per machine
               TaskPlaced(0.0, "lost", 0, "m9"), TaskPlaced(0.0, "fill", 0, "m3")]  # unknown; not pending
    events += [TaskEnd(5.0, "big", 0, TaskEndStatus.FINISHED), JobSubmit(6.0, batch("late", 1))]
    return write(path, events)


def allocs(result) -> dict[tuple[str, int], str]:
    kvs = result.store.range(result.keys.kind_prefix("allocs")).kvs
    return {(a.job_id, a.task_index): a.machine_id for a in (decode_alloc(kv.key, kv.value) for kv in kvs)}


def test_recorded_start_writes_what_fits_and_leaves_the_rest_pending(tmp_path):
    result = replay(recorded_trace(tmp_path / "r.omt"), ReplayConfig(schedulers=ONE, until=4.0))
    assert result.cell["initial_placed"] == 6
    assert result.cell["initial_not_placed"] == {
        "does not fit the machine's capacity": 1, "job's per-machine rule": 1, "machine unknown or not up": 1,
        "task not pending": 1}
    placed = allocs(result)
    assert all(placed[("fill", i)] == "m0" for i in range(4))
    assert placed[("big", 0)] == "m1" and placed[("apart", 0)] == "m2"
    # the rest was scheduled: big/1 (3 cores) not on m0 or m1, apart/1 not on m2, lost/0 somewhere
    assert placed[("big", 1)] in ("m2", "m3") and placed[("apart", 1)] != "m2" and ("lost", 0) in placed
    assert result.schedulers[0].tasks_placed == 3
    assert result.check["ok"], result.check["violations"]


def test_recorded_batch_tasks_end_after_their_duration(tmp_path):
    result = replay(recorded_trace(tmp_path / "r.omt"), ReplayConfig(schedulers=ONE, until=12.0))
    placed = allocs(result)
    assert not any(job == "fill" for job, _ in placed)  # ended at t = 10
    assert ("big", 0) not in placed  # the recorded end at t = 5
    assert result.check["ok"], result.check["violations"]


def test_scheduled_start_ignores_the_recorded_machines(tmp_path):
    trace = recorded_trace(tmp_path / "r.omt")
    result = replay(trace, ReplayConfig(schedulers=ONE, until=4.0, initial_state="scheduled"))
    assert result.cell["initial_placed"] == 0 and result.cell["initial_not_placed"] == {}
    assert result.cell["skipped"]["task_placed (initial_state=scheduled)"] == 10
    assert result.schedulers[0].tasks_placed == 9  # every pending task, by the scheduler
    assert result.check["ok"], result.check["violations"]


def test_recorded_start_replays_identically(tmp_path):
    trace = recorded_trace(tmp_path / "r.omt")
    first, second = (replay(trace, ReplayConfig(schedulers=ONE, until=12.0)) for _ in range(2))
    assert first.to_dict(include_wall=False) == second.to_dict(include_wall=False)


@pytest.mark.parametrize("config, message", [
    (dict(initial_state="guessed"), "initial_state must be one of"),
], ids=["bad-initial-state"])
def test_bad_initial_state_is_refused(config, message):
    with pytest.raises(ValueError, match=message):
        ReplayConfig(**config)
    with pytest.raises(ValueError, match=message):
        TraceFeed("unused.omt", None, None, **config)


def test_allocs_of_the_recorded_shape_pack_as_they_encode():
    """The t = 0 placer's allocs share every field object but task and machine within a job
    (pack_alloc then packs only those two): the codec's bytes, or its error, each time."""
    from cellstate.codec.records import encode_alloc
    from cellstate.codec.trusted import pack_alloc
    from cellstate.model import Alloc
    from cellstate.resources import Resources

    small, big, now = Resources(250, 512), Resources(4000, 1 << 20, 7), 0.0
    machines = ["m0", "m" * 40, "máquina-ü", "m" * 300]
    allocs = [Alloc(job, task, machines[task % 4], request, priority, "trace", now, False)
              for job, request, priority in (("j", small, 0), ("other", big, 300))
              for task in (0, 1, 127, 128, 255, 256, 65535, 65536, 1 << 33)]
    for alloc in allocs:
        raw = pack_alloc(alloc)
        assert raw == encode_alloc(alloc)
        assert decode_alloc("k", raw) is alloc
    for bad in (Alloc("j", -1, "m0", small, 0, "trace", now, False),
                Alloc("j", 2, "m/1", small, 0, "trace", now, False)):
        pack_alloc(allocs[0])
        with pytest.raises(CodecError):
            pack_alloc(bad)


def test_recorded_ledgers_with_extra_resources_and_interleaved_jobs(tmp_path):
    """Ledgers are capacity minus the room left: with extra resources (a gpu) and a job's
    placements split into several runs, they equal the written allocs summed per machine."""
    from cellstate.codec.records import decode_machine
    from cellstate.model import Job, JobKind, Machine
    from cellstate.resources import Resources

    gpu_machine = Machine("g0", Resources.of(8000, 8192, 10_000, gpu=1))
    gpu_job = Job("gpu", JobKind.SERVICE, 3, Resources.of(1000, 512, 0, gpu=1), max_per_machine=2)
    events = [MachineAdd(0.0, machine(0)), MachineAdd(0.0, gpu_machine),
              JobSubmit(0.0, batch("a", 3, cpu=1000)), JobSubmit(0.0, gpu_job)]
    events += [TaskPlaced(0.0, "a", 0, "g0"), TaskPlaced(0.0, "gpu", 0, "g0"), TaskPlaced(0.0, "a", 1, "g0"),
               TaskPlaced(0.0, "gpu", 1, "g0"),  # no gpu left on g0
               TaskPlaced(0.0, "gpu", 2, "m0"), TaskPlaced(0.0, "a", 2, "m0")]  # m0 has no gpu
    result = replay(write(tmp_path / "x.omt", events), ReplayConfig(schedulers=ONE, until=0.5))
    assert result.check["ok"], result.check["violations"]
    placed = allocs(result)
    assert placed == {("a", 0): "g0", ("gpu", 0): "g0", ("a", 1): "g0", ("a", 2): "m0"}
    assert result.cell["initial_not_placed"] == {"does not fit the machine's capacity": 2}
    ledgers = {kv.key.rsplit("/", 1)[1]: decode_machine(kv.key, kv.value)
               for kv in result.store.range(result.keys.kind_prefix("machines")).kvs}
    assert ledgers["g0"].allocated == Resources.of(3000, 1536, 0, gpu=1) and ledgers["g0"].task_count == 3
    assert ledgers["m0"].allocated == Resources.of(1000, 512, 0) and ledgers["m0"].task_count == 1
    assert ledgers["g0"].writer == ledgers["m0"].writer == "trace"


def test_recorded_max_per_machine_refuses_beyond_the_limit(tmp_path):
    """A job's ``max_per_machine`` holds across its runs of placements: the third task on m0 stays
    pending, one on another machine is written."""
    capped = replace(batch("capped", 4), max_per_machine=2)
    events = [MachineAdd(0.0, machine(i)) for i in range(2)] + [JobSubmit(0.0, capped), JobSubmit(0.0, batch("x", 1))]
    events += [TaskPlaced(0.0, "capped", 0, "m0"), TaskPlaced(0.0, "capped", 1, "m0"), TaskPlaced(0.0, "x", 0, "m1"),
               TaskPlaced(0.0, "capped", 2, "m0"), TaskPlaced(0.0, "capped", 3, "m1")]
    result = replay(write(tmp_path / "c.omt", events), ReplayConfig(schedulers=ONE, until=0.05))
    assert result.cell["initial_placed"] == 4
    assert result.cell["initial_not_placed"] == {"job's per-machine rule": 1}
    placed = allocs(result)
    assert [placed[("capped", i)] for i in (0, 1, 3)] == ["m0", "m0", "m1"] and placed[("x", 0)] == "m1"
