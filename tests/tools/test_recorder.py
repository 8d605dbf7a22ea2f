"""The recorder against a real etcd: initial state, live changes → trace events, stop, replay."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest

from cellstate.codec.records import decode_job_record, encode_job_record, encode_machine
from cellstate.model import Job, JobKind, Machine, MachineState, TaskState
from cellstate.resources import Resources
from cellstate.submit import kill_job, submit_jobs
from tools.cli import main
from tools.recorder import Recorder, record, recording_header
from tools.trace.events import JobKill, JobSubmit, MachineAdd, MachineFail, MachineRemove, TaskEnd, TaskEndStatus
from tools.trace.format import TraceWriter, read_trace

CAP = Resources(4000, 8192)


def machine(mid: str, **kw) -> Machine:
    return Machine(id=mid, capacity=CAP, zone="z1", **kw)


def job(jid: str, tasks: int = 3, **kw) -> Job:
    return Job(id=jid, kind=JobKind.BATCH, tasks=tasks, request=Resources(100, 64), **kw)


def set_tasks(store, keys, job_id: str, changes: dict[int, TaskState]) -> None:
    """Finish/fail tasks by hand: rewrite the job record's task-state string."""
    kv = store.get(keys.job(job_id))
    record = decode_job_record(kv.key, kv.value)
    for index, state in changes.items():
        record = record.with_tasks([index], state)
    store.put(kv.key, encode_job_record(record))


def events_of(path) -> list:
    header, reader = read_trace(path)
    with reader:
        return list(reader)


def without_t(events) -> list:
    return [replace(e, t=0.0) for e in events]


class Running:
    """A recorder on its own thread, stopped by ``stop()``."""

    def __init__(self, store, keys, out):
        self.stop_event = threading.Event()
        self.stats = None
        self.recorder = None
        self.error = None
        self.thread = threading.Thread(target=self._run, args=(store, keys, out))
        self.started = threading.Event()

    def _run(self, store, keys, out):
        try:
            with TraceWriter(out, recording_header(keys, "test")) as writer:
                self.recorder = recorder = Recorder(store, keys, writer)
                recorder.start()
                self.started.set()
                try:
                    self.stats = recorder.run(self.stop_event)
                finally:
                    recorder.close()
        except BaseException as exc:  # reported by stop()
            self.error = exc
            self.started.set()

    def __enter__(self):
        self.thread.start()
        assert self.started.wait(10)
        return self

    def stop(self):
        self.stop_event.set()
        self.thread.join(10)
        assert not self.thread.is_alive()
        if self.error:
            raise self.error


def wait_for(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError("condition not met in time")


def test_initial_state_then_live_changes(etcd_store, cell_keys, tmp_path):
    store, keys, out = etcd_store, cell_keys, tmp_path / "rec.omt"
    loaded = machine("m1", allocated=Resources(500, 100), task_count=1, writer="s1")
    store.put(keys.machine("m1"), encode_machine(loaded))
    store.put(keys.machine("m2"), encode_machine(machine("m2")))
    submit_jobs(store, keys, [job("old", 2), job("gone", 1)], time.time())
    set_tasks(store, keys, "old", {0: TaskState.FINISHED})
    kill_job(store, keys, "gone")

    run = Running(store, keys, out).__enter__()
    submit_jobs(store, keys, [job("j1", 3, priority=5, owner="ann")], time.time())
    set_tasks(store, keys, "j1", {0: TaskState.PLACED, 1: TaskState.PLACED})
    set_tasks(store, keys, "j1", {0: TaskState.FINISHED, 2: TaskState.FAILED})
    set_tasks(store, keys, "j1", {0: TaskState.FINISHED})  # no change to a terminal char: no event
    store.put(keys.machine("m3"), encode_machine(machine("m3")))
    store.put(keys.machine("m2"), encode_machine(machine("m2", state=MachineState.DRAINING)))
    store.put(keys.machine("m2"), encode_machine(machine("m2", state=MachineState.DOWN)))
    store.put(keys.machine("m2"), encode_machine(machine("m2", state=MachineState.DOWN, writer="x")))
    store.put(keys.machine("m2"), encode_machine(machine("m2", writer="agent")))  # repaired
    store.delete(keys.machine("m1"))
    kill_job(store, keys, "j1")
    store.put(keys.machine("m4"), b"\x93not a machine")
    wait_for(lambda: sum(run.recorder.stats.events.values()) >= 13 and run.recorder.stats.bad_values)
    run.stop()

    events = events_of(out)
    assert without_t(events) == [
        MachineAdd(0.0, machine("m1")),  # ledger zeroed for the replay
        MachineAdd(0.0, machine("m2")),
        JobSubmit(0.0, job("gone", 1)),
        JobKill(0.0, "gone"),
        JobSubmit(0.0, job("old", 2)),
        JobSubmit(0.0, job("j1", 3, priority=5, owner="ann")),
        TaskEnd(0.0, "j1", 0, TaskEndStatus.FINISHED),
        TaskEnd(0.0, "j1", 2, TaskEndStatus.FAILED),
        MachineAdd(0.0, machine("m3")),
        MachineFail(0.0, "m2"),
        MachineAdd(0.0, machine("m2")),  # the repair, ledger and writer zeroed
        MachineRemove(0.0, "m1"),
        JobKill(0.0, "j1"),
    ]
    assert all(e.t == 0.0 for e in events[:5]) and events[5].t > 0
    assert run.stats.bad_values == 1
    assert run.stats.events == {"MachineAdd": 4, "JobSubmit": 3, "JobKill": 2, "TaskEnd": 2,
                                "MachineFail": 1, "MachineRemove": 1}


@pytest.mark.parametrize("duration", [0.0, 0.3], ids=["immediately", "short"])
def test_duration_stops_with_a_complete_trace(etcd_store, cell_keys, tmp_path, duration):
    etcd_store.put(cell_keys.machine("m1"), encode_machine(machine("m1")))
    out = tmp_path / "rec.omt.gz"
    started = time.monotonic()
    stats = record(etcd_store, cell_keys, out, "test", duration=duration)
    assert duration <= time.monotonic() - started < duration + 2
    assert events_of(out) == [MachineAdd(0.0, machine("m1"))]
    assert stats.start_revision == stats.revision > 0


def test_cli_record_writes_a_trace(etcd_server, etcd_store, cell_keys, tmp_path, capsys):
    etcd_store.put(cell_keys.machine("m1"), encode_machine(machine("m1")))  # the cell exists
    submit_jobs(etcd_store, cell_keys, [job("a", 2)], time.time())
    out = tmp_path / "cli.omt"
    status = main(["record", "--out", str(out), "--duration", "0.2", "--cell", cell_keys.cell,
                   "--endpoints", etcd_server.endpoints[0]])
    assert status == 0
    assert "JobSubmit 1" in capsys.readouterr().out
    assert events_of(out) == [MachineAdd(0.0, machine("m1")), JobSubmit(0.0, job("a", 2))]


def test_relist_after_compaction_diffs_against_held_state(etcd_store, cell_keys, tmp_path):
    store, keys, out = etcd_store, cell_keys, tmp_path / "rec.omt"
    store.put(keys.machine("m1"), encode_machine(machine("m1")))
    submit_jobs(store, keys, [job("j1", 2)], time.time())
    with TraceWriter(out, recording_header(keys, "test")) as writer:
        recorder = Recorder(store, keys, writer)
        recorder.start()
        store.delete(keys.machine("m1"))
        set_tasks(store, keys, "j1", {1: TaskState.FINISHED})
        submit_jobs(store, keys, [job("j2", 1)], time.time())
        store.compact(store.put(keys.machine("m2"), encode_machine(machine("m2"))))
        recorder.close()
        recorder._stream = store.watch(keys.prefix, recorder.stats.start_revision + 1)  # now compacted away
        deadline = time.monotonic() + 5
        while not recorder.stats.relists and time.monotonic() < deadline:
            recorder.step(0.2)
        recorder.close()
    assert recorder.stats.relists == 1
    assert set(without_t(events_of(out)[2:])) == {
        MachineRemove(0.0, "m1"), TaskEnd(0.0, "j1", 1, TaskEndStatus.FINISHED),
        JobSubmit(0.0, job("j2", 1)), MachineAdd(0.0, machine("m2"))}


def test_replaying_a_recording_submits_the_same_jobs(etcd_store, cell_keys, tmp_path):
    from cellstate.codec.records import decode_job_record
    from tools.fauxmaster.replay import replay

    store, keys, out = etcd_store, cell_keys, tmp_path / "rec.omt"
    for mid in ("m1", "m2"):
        store.put(keys.machine(mid), encode_machine(machine(mid)))
    before = [job("early", 2, duration_s=5.0)]
    during = [job("b1", 3, duration_s=1.0, owner="ann"),
              Job(id="s1", kind=JobKind.SERVICE, tasks=2, request=Resources(200, 128), priority=9)]
    submit_jobs(store, keys, before, time.time())
    run = Running(store, keys, out).__enter__()
    submit_jobs(store, keys, during[:1], time.time())
    time.sleep(0.05)
    submit_jobs(store, keys, during[1:], time.time())
    wait_for(lambda: run.recorder.stats.events.get("JobSubmit", 0) == 3)
    run.stop()

    result = replay(out, {"cell": "replayed", "check": False})
    replayed = {kv.key.rsplit("/", 1)[1]: decode_job_record(kv.key, kv.value).job
                for kv in result.store.range(result.keys.kind_prefix("jobs")).kvs}
    assert replayed == {j.id: j for j in before + during}
    assert result.jobs_submitted == 3


def test_placements_at_the_listing_are_recorded_and_replayed_in_place(etcd_store, cell_keys, tmp_path):
    from cellstate.codec.records import decode_alloc, encode_alloc
    from cellstate.model import Alloc
    from tools.fauxmaster.replay import replay
    from tools.trace.events import TaskPlaced

    store, keys, out = etcd_store, cell_keys, tmp_path / "rec.omt"
    request = Resources(100, 64)  # job()'s request
    submit_jobs(store, keys, [job("j", 3)], time.time())
    set_tasks(store, keys, "j", {0: TaskState.PLACED, 2: TaskState.RUNNING})
    placed = {0: "m2", 2: "m1"}
    for mid in ("m1", "m2"):
        store.put(keys.machine(mid), encode_machine(machine(mid, allocated=request, task_count=1)))
    for task, mid in placed.items():
        store.put(keys.alloc("j", task), encode_alloc(Alloc("j", task, mid, request)))
    run = Running(store, keys, out).__enter__()
    run.stop()

    events = events_of(out)
    assert [e for e in events if isinstance(e, TaskPlaced)] == [
        TaskPlaced(0.0, "j", task, mid) for task, mid in sorted(placed.items())]
    result = replay(out, {"cell": "replayed", "until": 0.5})
    alloc_list = [decode_alloc(kv.key, kv.value) for kv in result.store.range(result.keys.kind_prefix("allocs")).kvs]
    where = {a.task_index: a.machine_id for a in alloc_list}
    assert {t: where[t] for t in placed} == placed  # the recorded tasks start where they ran
