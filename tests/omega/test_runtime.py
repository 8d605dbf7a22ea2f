"""SchedulerProcess in a thread against a real etcd: places a workload, publishes leased stats,
stops cleanly; its view notices freed resources; the leased stats sink."""

from __future__ import annotations

import threading
from dataclasses import replace

import anyio
import pytest

from runtime_helpers import add_machines, batch_jobs, job_records, settled, submit, wait_for
from cellstate.check import check_cell
from cellstate.codec.records import decode_machine, encode_machine
from cellstate.committer import StoreCommitter
from cellstate.replica.view import ReplicaView, frees_resources
from cellstate.resources import Resources
from cellstate.codec.stats import decode_stats
from cellstate.stats_sink import LeasedStatsSink
from cellstate.model import Machine, MachineState
from omega.attempts import AttemptOutcome
from omega.modes import CommitMode, ConflictMode
from omega.runtime import RuntimeOptions, SchedulerProcess, kv
from cellstate.scheduler_stats import SchedulerStats
from schedulers.chains import make_scheduler, retry_policy_for


def start_process(store, keys, name="batch-a", **options) -> tuple[SchedulerProcess, threading.Thread, list]:
    view = ReplicaView(store, keys)
    process = SchedulerProcess(make_scheduler("batch", name, 1), view, StoreCommitter(store, keys),
                               LeasedStatsSink(store, keys, name), retry=retry_policy_for("batch"),
                               conflict_mode=ConflictMode.RESOURCE_FIT,
                               commit_mode=CommitMode.INCREMENTAL,
                               options=RuntimeOptions(stats_interval_s=0.2, **options))
    results: list = []
    thread = threading.Thread(target=lambda: results.append(anyio.run(process.run, False)), daemon=True)
    thread.start()
    return process, thread, results


def test_process_places_workload_publishes_stats_and_stops(etcd_store, cell_keys):
    add_machines(etcd_store, cell_keys, 10)  # 40 cores
    submit(etcd_store, cell_keys, batch_jobs("j", 12, tasks=4, cpu=1000))  # 48 cores asked
    process, thread, results = start_process(etcd_store, cell_keys)
    try:
        wait_for(lambda: settled(etcd_store, cell_keys, 40), 10, "40 tasks placed, the rest with reasons")
        kv_ = wait_for(lambda: etcd_store.get(cell_keys.stats("batch-a")), 5, "the stats key")
        assert kv_.lease != 0
        live = decode_stats(kv_.key, kv_.value)
        assert (live.name, live.kind, live.conflict_mode) == ("batch-a", "batch", "resource-fit")
    finally:
        process.stop()
        thread.join(10)
    assert not thread.is_alive()
    final = results[0]
    assert isinstance(final, SchedulerStats)
    assert final.tasks_placed == 40 and final.commits >= 1 and final.conflicts == 0
    assert final.tasks_unplaced >= 8  # the 8 tasks that found no room were reported
    assert etcd_store.get(cell_keys.stats("batch-a")) is None  # lease revoked on stop
    assert check_cell(etcd_store, cell_keys).ok


def test_freed_machine_resets_backoff_and_places_deferred_job(etcd_store, cell_keys):
    add_machines(etcd_store, cell_keys, 1)
    submit(etcd_store, cell_keys, batch_jobs("big", 1, tasks=1, cpu=4000))
    submit(etcd_store, cell_keys, batch_jobs("late", 1, tasks=1, cpu=4000))
    process, thread, _ = start_process(etcd_store, cell_keys)
    try:
        wait_for(lambda: settled(etcd_store, cell_keys, 1), 10, "one job placed, the other waiting")
        wait_for(lambda: process.queue.next_ready_at() is not None, 5, "the waiting job deferred")
        process.queue.backoff_min_s = process.queue.backoff_max_s = 3600.0  # only a reset can bring it back
        process.queue.defer("late000", process.clock.now())
        process.queue.defer("big000", process.clock.now())
        kv_ = etcd_store.get(cell_keys.machine("m00"))
        grown = replace(decode_machine(kv_.key, kv_.value), capacity=Resources.of(8_000, 32_768, 200_000))
        etcd_store.put(kv_.key, encode_machine(grown))
        wait_for(lambda: settled(etcd_store, cell_keys, 2), 10, "the deferred job placed after the cell grew")
    finally:
        process.stop()
        thread.join(10)
    assert not thread.is_alive()


def test_refused_gang_is_not_tried_again_when_room_frees(etcd_store, cell_keys):
    """A gang larger than one transaction is refused once (its reason written), then left out:
    freed room resets the backoff of the other jobs, not its refusal. (By a committer without
    ``gangs``: StoreCommitter's reserve such a gang in chunks, tests/omega/test_gangs.py.)"""
    add_machines(etcd_store, cell_keys, 2)
    committer = StoreCommitter(etcd_store, cell_keys)
    committer.gangs = None
    gang = replace(batch_jobs("gang", 1, tasks=committer.max_claims_per_txn + 1, cpu=10)[0], gang=True)
    submit(etcd_store, cell_keys, [gang])
    outcomes: list = []
    process = SchedulerProcess(make_scheduler("batch", "batch-a", 1), ReplicaView(etcd_store, cell_keys), committer,
                               LeasedStatsSink(etcd_store, cell_keys, "batch-a"), retry=retry_policy_for("batch"),
                               options=RuntimeOptions(stats_interval_s=0.2), observers=[lambda a: outcomes.append(a)])
    thread = threading.Thread(target=lambda: anyio.run(process.run, False), daemon=True)
    thread.start()
    try:
        wait_for(lambda: [a.outcome for a in outcomes] == [AttemptOutcome.TOO_LARGE], 10, "the gang refused")
        for round_ in range(3):  # room frees, then a job is placed: the process ran rounds since
            kv_ = etcd_store.get(cell_keys.machine("m00"))
            grown = replace(decode_machine(kv_.key, kv_.value), capacity=Resources.of(8_000 + round_, 32_768, 200_000))
            etcd_store.put(kv_.key, encode_machine(grown))
            submit(etcd_store, cell_keys, batch_jobs(f"probe{round_}-", 1, tasks=1, cpu=100))
            wait_for(lambda: settled(etcd_store, cell_keys, round_ + 1), 10, f"probe {round_} placed")
    finally:
        process.stop()
        thread.join(10)
    assert [a.job_id for a in outcomes if a.outcome is AttemptOutcome.TOO_LARGE] == ["gang000"]
    assert "gang too large for one transaction" in job_records(etcd_store, cell_keys)[0].reason


M = Machine("m", Resources.of(4000, 1000), allocated=Resources.of(2000, 500))


@pytest.mark.parametrize("old,new,freed", [
    (None, M, True),
    (None, replace(M, state=MachineState.DOWN), False),
    (M, replace(M, allocated=Resources.of(1000, 500)), True),
    (M, replace(M, allocated=Resources.of(3000, 500)), False),
    (M, replace(M, writer="x"), False),
    (replace(M, state=MachineState.DOWN), M, True),
    (M, replace(M, state=MachineState.DRAINING, allocated=Resources.of(0, 0)), False),
    (M, replace(M, capacity=Resources.of(4000, 2000)), True),
    (M, replace(M, allocated=Resources.of(3000, 400)), True),
    (replace(M, capacity=Resources.of(4000, 1000, gpu=2), allocated=Resources.of(2000, 500, gpu=2)),
     replace(M, capacity=Resources.of(4000, 1000, gpu=2), allocated=Resources.of(3000, 500, gpu=1)), True),
    (replace(M, capacity=Resources.of(4000, 1000, gpu=2), allocated=Resources.of(2000, 500, gpu=1)),
     replace(M, capacity=Resources.of(4000, 1000, gpu=2), allocated=Resources.of(2000, 500, gpu=2)), False),
    (replace(M, capacity=Resources.of(4000, 1000, gpu=2), allocated=Resources.of(2000, 500, gpu=1)),
     replace(M, capacity=Resources.of(4000, 1000, gpu=2), allocated=Resources.of(2000, 500)), True),
    (replace(M, capacity=Resources.of(4000, 1000, gpu=2), allocated=Resources.of(2000, 500)),
     replace(M, capacity=Resources.of(4000, 1000, gpu=2), allocated=Resources.of(2000, 500, gpu=1)), False),
    (replace(M, capacity=Resources.of(4000, 1000, gpu=2, tpu=2), allocated=Resources.of(2000, 500, gpu=1, tpu=1)),
     replace(M, capacity=Resources.of(4000, 1000, gpu=2, tpu=2), allocated=Resources.of(2000, 500, gpu=2)), True),
], ids=["new-up", "new-down", "ledger-shrank", "ledger-grew", "same-ledger", "back-up", "draining",
        "capacity-grew", "memory-shrank-cpu-grew", "gpu-shrank", "gpu-grew", "gpu-released", "gpu-claimed",
        "tpu-released-gpu-claimed"])
def test_frees_resources(old, new, freed):
    assert frees_resources(old, new) is freed


def test_sink_regrants_an_expired_lease_and_revokes_on_close(etcd_store, cell_keys):
    sink = LeasedStatsSink(etcd_store, cell_keys, "s1", ttl=5)
    sink.publish(SchedulerStats("s1", "service"))
    first = sink.lease
    etcd_store.revoke_lease(first)  # as if it had expired
    assert etcd_store.get(cell_keys.stats("s1")) is None
    sink.publish(SchedulerStats("s1", "service", attempts=3))
    kv_ = etcd_store.get(cell_keys.stats("s1"))
    assert sink.lease != first and kv_.lease == sink.lease and sink.grants == 2
    assert decode_stats(kv_.key, kv_.value).attempts == 3
    sink.close()
    assert etcd_store.get(cell_keys.stats("s1")) is None
    with pytest.raises(RuntimeError, match="closed"):
        sink.publish(SchedulerStats("s1", "service"))


@pytest.mark.parametrize("bad,message", [
    (dict(name=""), "non-empty"), (dict(name="a/b"), "non-empty"), (dict(ttl=0), "ttl"),
], ids=["empty-name", "slash", "ttl"])
def test_sink_rejects_bad_arguments(etcd_store, cell_keys, bad, message):
    with pytest.raises(ValueError, match=message):
        LeasedStatsSink(etcd_store, cell_keys, **{"name": "s", **bad})


def test_peers_are_live_stats_keys_of_the_kind(etcd_store, cell_keys):
    add_machines(etcd_store, cell_keys, 1)
    sinks = [LeasedStatsSink(etcd_store, cell_keys, n) for n in ("b1", "b2", "s1")]
    for sink, kind in zip(sinks, ("batch", "batch", "service")):
        sink.publish(SchedulerStats(sink.name, kind))
    view = ReplicaView(etcd_store, cell_keys)
    assert view.peers("batch") == ["b1", "b2"] and view.peers("service") == ["s1"]
    sinks[0].close()
    wait_for(lambda: (view.pump(0.1), view.peers("batch"))[1] == ["b2"], 5, "b1 gone from the peers")
    for sink in sinks[1:]:
        sink.close()
    view.close()


@pytest.mark.parametrize("fields,line", [
    (dict(scheduler="a", job="j"), "scheduler=a job=j"),
    (dict(machines=["m1", "m2"], winners=[]), 'machines=m1,m2 winners=""'),
    (dict(reason="no room", ms=1.23456), 'reason="no room" ms=1.235'),
], ids=["plain", "lists", "quoted-float"])
def test_log_fields(fields, line):
    assert kv(**fields) == line
