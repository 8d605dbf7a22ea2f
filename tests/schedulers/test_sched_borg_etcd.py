"""Preemption against a real etcd: the optimistic loop commits the Borg scheduler's claims
with their evictions in one txn; two placers racing in threads keep the cell's invariants."""

from __future__ import annotations

import threading
import time

from borglib import ReplicaPlacementView, omega_decide

from cellstate.check import check_cell
from cellstate.codec.records import encode_job_record, encode_machine
from cellstate.committer import StoreCommitter
from cellstate.model import Job, JobKind, JobRecord, Machine
from cellstate.resources import Resources
from cellstate.store import Put
from omega.modes import CommitMode, ConflictMode
from omega.occ import OptimisticPlacer
from omega.retry import RetryPolicy
from schedulers.chains import make_scheduler

MACHINES = 6
CPU = 4000


class WallClock:
    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def _seed(store, keys, jobs) -> None:
    ops = [Put(keys.machine(f"m{i}"), encode_machine(Machine(f"m{i}", Resources(CPU, 16384, 0), zone="z", rack=f"r{i}")))
           for i in range(MACHINES)]
    ops += [Put(keys.job(j.id), encode_job_record(JobRecord.new(j, 1.0))) for j in jobs]
    store.txn((), ops)


def _placer(store, keys, name, mode=ConflictMode.SEQUENCE):
    return OptimisticPlacer(name, StoreCommitter(store, keys), mode, CommitMode.INCREMENTAL,
                            RetryPolicy(max_attempts=20, base_wait_s=0.001, max_wait_s=0.02, seed=hash(name) % 100),
                            WallClock())


def _fill_with_low_priority(store, keys) -> None:
    low = Job("low", JobKind.BATCH, MACHINES * 4, Resources(1000, 100), priority=0)
    highs = [Job(f"{who}{n}", JobKind.SERVICE, 2, Resources(2000, 100), priority=9)
             for who in ("a", "b") for n in range(3)]
    _seed(store, keys, [low, *highs])
    view = ReplicaPlacementView(store, keys)
    result = _placer(store, keys, "filler").place("low", view, omega_decide(make_scheduler("borg", "filler", 0)))
    assert len(result.placed) == MACHINES * 4


def test_preemption_commit_sends_victims_back_to_pending(etcd_store, cell_keys):
    _fill_with_low_priority(etcd_store, cell_keys)
    view = ReplicaPlacementView(etcd_store, cell_keys)
    result = _placer(etcd_store, cell_keys, "s").place("a0", view, omega_decide(make_scheduler("borg", "s", 1)))
    assert len(result.placed) == 2 and all(len(c.evicts) == 2 for c in result.placed)
    report = check_cell(etcd_store, cell_keys)
    assert report.ok, report.violations
    fresh = ReplicaPlacementView(etcd_store, cell_keys)
    assert fresh.job("low").record.tasks.count("p") == 4
    assert sum(1 for _ in fresh.allocs_of("low")) == MACHINES * 4 - 4


def test_two_racing_preempting_placers_keep_invariants(etcd_store, cell_keys):
    _fill_with_low_priority(etcd_store, cell_keys)
    barrier = threading.Barrier(2)
    results, errors = {}, []

    def run(who: str, seed: int, mode: ConflictMode) -> None:
        try:
            view = ReplicaPlacementView(etcd_store, cell_keys)
            decide = omega_decide(make_scheduler("borg", who, seed))
            placer = _placer(etcd_store, cell_keys, who, mode)
            barrier.wait()
            for n in range(3):
                view.replica.pump()
                results[f"{who}{n}"] = placer.place(f"{who}{n}", view, decide)
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=("a", 1, ConflictMode.SEQUENCE)),
               threading.Thread(target=run, args=("b", 1, ConflictMode.RESOURCE_FIT))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    report = check_cell(etcd_store, cell_keys)
    assert report.ok, report.violations
    cell = ReplicaPlacementView(etcd_store, cell_keys)
    high_live = sum(cell.job(j).record.tasks.count("a") for j in results)
    low_live = cell.job("low").record.tasks.count("a")
    assert high_live == sum(len(r.placed) for r in results.values()) == 12  # the whole cell is worth 12
    assert low_live == 0 and sum(1 for _ in cell.allocs_of("low")) == 0
    used = sum(e.machine.allocated.cpu for e in cell.machines())
    assert used == high_live * 2000 <= MACHINES * CPU
