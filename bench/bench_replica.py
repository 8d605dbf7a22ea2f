"""Replica benchmark: listing a big cell, and applying a backlog of watch events.

    python bench/bench_replica.py [--machines 10000] [--allocs 200000] [--changes 100000] [--no-fsync]

Loads machines, jobs (``--tasks-per-job`` tasks each, all running) and allocations into
its own etcd in big txns, then:
1. times ``Replica.sync()`` (median of ``--rounds``; goal < 3 s);
2. writes ``--changes`` changes (20 % machine ledger puts, 60 % allocation moves, 20 %
   allocation deletes, ``--change-ops`` per txn) while the replica does not pump, then
   times ``pump()`` until it has applied them all (median of ``--rounds``; goal >= 50,000
   events/s).
With ``--profile`` (or when a goal is missed) one more sync and pump run under pyinstrument.
"""

from __future__ import annotations

import argparse
import time

from bench_common import median, own_etcd, store_of, timed, verdict
from cellstate.codec.records import encode_alloc, encode_job_record, encode_machine
from cellstate.keys import CellKeys
from cellstate.model import Alloc, Job, JobKind, JobRecord, Machine
from cellstate.replica.watched import Replica
from cellstate.resources import Resources
from cellstate.store import Delete, Put

SYNC_GOAL_S = 3.0
APPLY_GOAL_EPS = 50_000
REQUEST = Resources(500, 1024, 2048)
CAPACITY = Resources(64_000, 262_144, 1_000_000)


class Cell:
    """The generated cell: which allocation sits where, so changes stay consistent."""

    def __init__(self, keys: CellKeys, machines: int, allocs: int, tasks_per_job: int):
        self.keys = keys
        self.machine_ids = [f"m{i:05d}" for i in range(machines)]
        self.tasks_per_job = tasks_per_job
        self.allocs = [(f"j{i // tasks_per_job:05d}", i % tasks_per_job) for i in range(allocs)]
        self.placement = {a: self.machine_ids[i % machines] for i, a in enumerate(self.allocs)}
        self.next_alloc = 0
        self.next_machine = 0
        self.deleted: set[tuple[str, int]] = set()

    def initial_ops(self):
        """Puts of every machine, job and allocation."""
        per_machine = {}
        for mid in self.placement.values():
            per_machine[mid] = per_machine.get(mid, 0) + 1
        for mid in self.machine_ids:
            yield Put(self.keys.machine(mid), self.machine_value(mid, per_machine.get(mid, 0)))
        for job_id in dict.fromkeys(j for j, _ in self.allocs):
            record = JobRecord(Job(job_id, JobKind.BATCH, self.tasks_per_job, REQUEST), "r" * self.tasks_per_job)
            yield Put(self.keys.job(job_id), encode_job_record(record))
        for (job_id, task), mid in self.placement.items():
            yield Put(self.keys.alloc(job_id, task), encode_alloc(Alloc(job_id, task, mid, REQUEST)))

    def machine_value(self, mid: str, tasks: int) -> bytes:
        machine = Machine(mid, CAPACITY, zone=f"z{int(mid[1:]) % 4}", rack=f"r{int(mid[1:]) % 50}",
                          allocated=REQUEST.scaled(tasks), task_count=tasks)
        return encode_machine(machine)

    def change_ops(self, count: int):
        """``count`` ops, each a change: per 10, 2 machine puts, 6 allocation moves and 2
        allocation deletes (an allocation deleted earlier is put back instead)."""
        ops = []
        for i in range(count):
            slot = i % 10
            if slot < 2:
                mid = self.machine_ids[self.next_machine % len(self.machine_ids)]
                self.next_machine += 1
                ops.append(Put(self.keys.machine(mid), self.machine_value(mid, self.next_machine % 100)))
                continue
            job_id, task = self.allocs[self.next_alloc % len(self.allocs)]
            self.next_alloc += 1
            if slot < 8 or (job_id, task) in self.deleted:  # a deleted allocation comes back
                self.deleted.discard((job_id, task))
                mid = self.machine_ids[(self.next_alloc * 7919) % len(self.machine_ids)]
                ops.append(Put(self.keys.alloc(job_id, task), encode_alloc(Alloc(job_id, task, mid, REQUEST))))
            else:
                self.deleted.add((job_id, task))
                ops.append(Delete(self.keys.alloc(job_id, task)))
        return ops


def load(store, ops, per_txn: int) -> int:
    """Write ``ops`` in txns of ``per_txn``; the last revision."""
    batch, revision = [], 0
    for op in ops:
        batch.append(op)
        if len(batch) == per_txn:
            revision = store.txn((), batch).revision
            batch = []
    if batch:
        revision = store.txn((), batch).revision
    return revision


def write_changes(store, cell: Cell, changes: int, per_txn: int) -> int:
    revision = 0
    for start in range(0, changes, per_txn):
        revision = store.txn((), cell.change_ops(min(per_txn, changes - start))).revision
    return revision


def pump_until(replica: Replica, revision: int) -> int:
    applied = 0
    while replica.revision < revision:
        applied += replica.pump(1.0)
    return applied


def measure_apply(store, cell: Cell, args) -> tuple[float, int]:
    """(seconds, events) for one synced replica to apply ``args.changes`` unpumped changes."""
    replica = Replica(store, cell.keys)
    replica.sync()
    last = write_changes(store, cell, args.changes, args.change_ops)
    time.sleep(0.5)  # let the watch stream receive the tail; pump is what is timed
    start = time.perf_counter()
    applied = pump_until(replica, last)
    seconds = time.perf_counter() - start
    replica.close()
    return seconds, applied


def profile(store, cell: Cell, args) -> None:
    from pyinstrument import Profiler

    replica = Replica(store, cell.keys)
    with Profiler() as profiler:
        replica.sync()
    print(profiler.output_text(unicode=False, color=False, show_all=False))
    last = write_changes(store, cell, args.changes, args.change_ops)
    time.sleep(0.5)
    with Profiler() as profiler:
        pump_until(replica, last)
    print(profiler.output_text(unicode=False, color=False, show_all=False))
    replica.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--machines", type=int, default=10_000)
    parser.add_argument("--allocs", type=int, default=200_000)
    parser.add_argument("--tasks-per-job", type=int, default=100)
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--load-ops", type=int, default=5_000, help="puts per txn while loading")
    parser.add_argument("--change-ops", type=int, default=1_000, help="ops per txn of the change backlog")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-fsync", action="store_true", help="start etcd with --unsafe-no-fsync")
    parser.add_argument("--profile", action="store_true", help="profile one sync and one pump")
    args = parser.parse_args()
    cell = Cell(CellKeys("bench"), args.machines, args.allocs, args.tasks_per_job)
    with own_etcd(args.no_fsync) as cluster:
        store = store_of(cluster)
        load_s = timed(lambda: load(store, cell.initial_ops(), args.load_ops))
        keys = len(store.range(cell.keys.prefix).kvs)
        print(f"etcd fsync={'off' if args.no_fsync else 'on'}; loaded {keys:,} keys "
              f"({args.machines:,} machines, {args.allocs:,} allocs) in {load_s:.1f}s")
        syncs = []
        for _ in range(args.rounds):
            replica = Replica(store, cell.keys)
            syncs.append(timed(replica.sync))
            replica.close()
            del replica  # measure each listing on the same heap, not beside the previous copy
        print("sync seconds: " + ", ".join(f"{s:.2f}" for s in syncs))
        runs = [measure_apply(store, cell, args) for _ in range(args.rounds)]
        rates = [events / seconds for seconds, events in runs]
        print("pump: " + ", ".join(f"{e:,} events in {s:.2f}s" for s, e in runs))
        print(verdict("Replica.sync() median", median(syncs), SYNC_GOAL_S, "s", higher_is_better=False))
        print(verdict("pump apply rate median", median(rates), APPLY_GOAL_EPS, "events/s", higher_is_better=True))
        if args.profile or median(syncs) >= SYNC_GOAL_S or median(rates) < APPLY_GOAL_EPS:
            profile(store, cell, args)
        store.close()


if __name__ == "__main__":
    main()
