"""DRF queue order benchmark: what ``DrfOrder`` costs a scheduling round on a big cell.

    python bench/bench_drf.py [--machines 10000] [--allocs 100000] [--owners 100] [--pending 10000]

Builds the cell in a MemoryStore (machines, running jobs of 5 tasks with their allocations
spread over the machines, ``--pending`` one-task pending jobs) and a real ``ReplicaView``,
then times (median of ``--rounds``):
1. the first usage scan (every machine and allocation);
2. a refresh when nothing changed (one revision compare per machine);
3. a refresh after ``--changed`` machines took a new allocation (a round's commits);
4. ``select`` of 16 jobs (lazy progressive filling) and a full DRF ordering of the pending
   jobs, beside ``fair_order`` of the same jobs.
"""

from __future__ import annotations

import argparse
import statistics
import time

from cellstate.codec.records import encode_alloc, encode_job_record, encode_machine
from cellstate.keys import CellKeys
from cellstate.memory.store import MemoryStore
from cellstate.model import Alloc, Job, JobKind, JobRecord, Machine
from cellstate.replica.view import ReplicaView
from cellstate.resources import Resources
from cellstate.store import Put
from omega.drf import DrfOrder
from omega.queue import JobQueue, fair_order

CAPACITY = Resources(64_000, 262_144, 1_000_000)
TASKS = 5


def build(args) -> tuple[MemoryStore, CellKeys, dict[str, int]]:
    """The cell; how many allocations each machine holds."""
    store, keys = MemoryStore(max_txn_ops=1_000_000, max_request_bytes=1 << 34, history=False), CellKeys("drf")
    machines = [f"m{i:05d}" for i in range(args.machines)]
    ops, count = [], {m: 0 for m in machines}
    for j in range(args.allocs // TASKS):
        owner = f"u{j % args.owners:03d}"
        request = Resources(250 * (1 + j % 4), 512 * (1 + j % 3), 1024)
        job = Job(f"r{j:06d}", JobKind.BATCH, TASKS, request, owner=owner)
        ops.append(Put(keys.job(job.id), encode_job_record(JobRecord(job, "r" * TASKS))))
        for task in range(TASKS):
            mid = machines[(j * TASKS + task) % len(machines)]
            count[mid] += 1
            ops.append(Put(keys.alloc(job.id, task), encode_alloc(Alloc(job.id, task, mid, request))))
    for i in range(args.pending):
        job = Job(f"p{i:06d}", JobKind.BATCH, 1, Resources(500, 1024), owner=f"u{i % args.owners:03d}")
        ops.append(Put(keys.job(job.id), encode_job_record(JobRecord.new(job, float(i)))))
    for mid in machines:  # ledgers are not what DRF reads; capacity and revision are
        ops.append(Put(keys.machine(mid), encode_machine(Machine(mid, CAPACITY, task_count=count[mid]))))
    store.txn((), ops)
    return store, keys, count


def touch(store: MemoryStore, keys: CellKeys, view: ReplicaView, changed: int, round_: int, count) -> None:
    """``changed`` machines each take one more allocation of a new job (as commits would)."""
    ops = []
    for k in range(changed):
        mid = f"m{(round_ * changed + k) % len(count):05d}"
        job = Job(f"n{round_:04d}-{k:04d}", JobKind.BATCH, 1, Resources(500, 1024), owner=f"u{k % 7:03d}")
        count[mid] += 1
        ops += [Put(keys.job(job.id), encode_job_record(JobRecord(job, "a"))),
                Put(keys.alloc(job.id, 0), encode_alloc(Alloc(job.id, 0, mid, job.request))),
                Put(keys.machine(mid), encode_machine(Machine(mid, CAPACITY, task_count=count[mid])))]
    store.txn((), ops)
    view.pump()


def ms(samples: list[float]) -> str:
    return f"{1000 * statistics.median(samples):8.2f} ms (median of {len(samples)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--machines", type=int, default=10_000)
    parser.add_argument("--allocs", type=int, default=100_000)
    parser.add_argument("--owners", type=int, default=100)
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--changed", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    started = time.perf_counter()
    store, keys, count = build(args)
    view = ReplicaView(store, keys)
    print(f"cell: {args.machines} machines, {sum(1 for _ in view.allocs())} allocs, {args.owners} owners, "
          f"{len(view.pending_jobs())} pending jobs (built in {time.perf_counter() - started:.1f} s)")
    cold, warm, after, select16, full, fair = [], [], [], [], [], []
    pending = view.pending_jobs()
    for round_ in range(args.rounds):
        order = DrfOrder(view)
        cold.append(_timed(lambda: order.usage.refresh(view)))
        warm.append(_timed(lambda: order.usage.refresh(view)))
        touch(store, keys, view, args.changed, round_, count)
        after.append(_timed(lambda: order.usage.refresh(view)))
        queue = JobQueue("bench", order=order)
        select16.append(_timed(lambda: queue.select(pending, [], 0.0, 16)))
        full.append(_timed(lambda: list(order.arrange(pending))))
        fair.append(_timed(lambda: fair_order(pending)))
    print(f"first usage scan (all machines and allocs): {ms(cold)}")
    print(f"refresh, nothing changed:                  {ms(warm)}")
    print(f"refresh after {args.changed} machines changed:        {ms(after)}")
    print(f"select 16 of {len(pending)} pending (drf, warm):     {ms(select16)}")
    print(f"full drf ordering of {len(pending)} pending:        {ms(full)}")
    print(f"fair_order of the same jobs:               {ms(fair)}")


def _timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
