"""Bad values in the cell are quarantined, never fatal, by the tools too (issue 19, item 4):
the recorder ignores and counts them (a misfiled machine value is not taken for the machine it
names), the agents leave them alone and count them, the scheduler's stats and metrics count its
view's quarantined keys, and the monitor shows a line for them."""

from __future__ import annotations

import io
import logging
import time

from rich.console import Console

from cellstate.codec.records import encode_alloc, encode_job_record, encode_machine
from cellstate.committer import StoreCommitter
from cellstate.keys import CellKeys
from cellstate.memory.store import MemoryStore
from cellstate.model import Alloc, Job, JobKind, JobRecord, Machine
from cellstate.replica.view import ReplicaView
from cellstate.replica.watched import Replica
from cellstate.resources import Resources
from cellstate.codec.stats import decode_stats, encode_stats
from omega.runtime import SchedulerProcess
from cellstate.scheduler_stats import SchedulerStats
from schedulers.chains import make_scheduler, retry_policy_for
from tools.agents.agent import Agent, AgentConfig
from tools.monitor.model import build_frame
from tools.monitor.render import render_frame
from tools.recorder import Recorder, recording_header
from tools.metrics.scheduler import SchedulerEndpoint, count_quarantine
from tools.trace.events import JobSubmit, MachineAdd
from tools.trace.format import TraceWriter, read_trace

CAP = Resources(4000, 8192, 1000)
REQ = Resources(100, 64)
GARBAGE = b"\xc1 garbage"


def bad_cell() -> tuple[MemoryStore, CellKeys, set[str]]:
    """m1..m4 and job j (task 0 placed on m1, 1 pending, 2 finished) with garbage under m3 and
    jobs/g, m2's value under m4's key and the alloc of j/1 under allocs/j/2."""
    store, keys = MemoryStore(), CellKeys("q")
    for mid in ("m1", "m2", "m3", "m4"):
        store.put(keys.machine(mid), encode_machine(Machine(mid, CAP, zone="z")))
    store.put(keys.job("j"), encode_job_record(JobRecord(Job("j", JobKind.BATCH, 3, REQ, duration_s=1.0), "apf",
                                                          submitted_at=1.0)))
    store.put(keys.alloc("j", 0), encode_alloc(Alloc("j", 0, "m1", REQ, placed_at=1.0)))
    store.put(keys.machine("m3"), GARBAGE)
    store.put(keys.machine("m4"), store.get(keys.machine("m2")).value)
    store.put(keys.job("g"), GARBAGE)
    store.put(keys.alloc("j", 2), encode_alloc(Alloc("j", 1, "m1", REQ)))
    return store, keys, {keys.machine("m3"), keys.machine("m4"), keys.job("g"), keys.alloc("j", 2)}


def test_recorder_counts_and_skips_bad_values_and_logs_each_key_once(tmp_path, caplog):
    store, keys, _ = bad_cell()
    out = tmp_path / "rec.trace"
    with caplog.at_level(logging.WARNING, "tools.recorder"):
        with TraceWriter(out, recording_header(keys, "test")) as writer:
            recorder = Recorder(store, keys, writer)
            recorder.start()
            store.put(keys.machine("m3"), GARBAGE + b"!")  # bad again: counted, not logged again
            store.put(keys.machine("m5"), store.get(keys.machine("m1")).value)  # misfiled: no machine_add of m1
            recorder.step(0.5)
            recorder.close()
    _, reader = read_trace(out)
    with reader:
        events = list(reader)
    assert sorted(e.machine.id for e in events if isinstance(e, MachineAdd)) == ["m1", "m2"]
    assert [e.job.id for e in events if isinstance(e, JobSubmit)] == ["j"]
    assert recorder.stats.bad_values == 5  # m3, m4, g, m3 again, m5 (allocs/j/2 is not a listed placement)
    logged = [r.getMessage() for r in caplog.records]
    assert sum(keys.machine("m3") in line for line in logged) == 1 and len(logged) == 4


def test_agents_leave_bad_values_alone_and_count_them():
    store, keys, bad = bad_cell()
    agent = Agent(store, keys, AgentConfig(time_scale=1000.0), clock=time.time)
    agent.start()
    for _ in range(5):
        agent.step(max_wait=0.01)
    assert set(agent.replica.quarantine) == bad
    assert agent.metrics.value("omega_agent_quarantined_keys") == 4
    assert agent.replica.job("j").record.tasks[0] in "rf"  # the good work goes on


class _Clock:
    def now(self) -> float:
        return 1.0

    def sleep(self, seconds: float) -> None:
        pass


class _Sink:
    def publish(self, stats) -> None:
        self.last = stats

    def close(self) -> None:
        pass


def test_scheduler_stats_metrics_and_monitor_count_quarantined_keys():
    store, keys, bad = bad_cell()
    view = ReplicaView(store, keys)
    process = SchedulerProcess(make_scheduler("batch", "b1", 0), view, StoreCommitter(store, keys), _Sink(),
                               retry=retry_policy_for("batch"), clock=_Clock())
    metrics = SchedulerEndpoint("b1")
    count_quarantine(process, view, metrics)
    process.work_round()
    stats = process.snapshot()
    assert stats.quarantined == len(bad) == metrics.value("omega_scheduler_quarantined_keys")
    assert decode_stats(keys.stats("b1"), encode_stats(stats)).quarantined == 4
    store.put(keys.stats("b1"), encode_stats(stats))
    replica = Replica(store, keys)
    replica.sync()
    frame = build_frame(replica, 2.0)
    assert frame.quarantined == 4 and [r.quarantined for r in frame.schedulers] == [4]
    console = Console(record=True, width=200, file=io.StringIO())
    console.print(render_frame(frame))
    assert "quarantined: 4 bad value(s) in the cell, left out of decisions; schedulers report b1 4" in \
        console.export_text()


def test_stats_without_the_quarantined_field_decode_as_zero():
    import msgpack

    raw = encode_stats(SchedulerStats("b1", "batch", quarantined=2))
    value = msgpack.unpackb(raw)
    del value["quarantined"]
    assert decode_stats("k", msgpack.packb(value)).quarantined == 0
