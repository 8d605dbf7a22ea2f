"""Bytes a placement commit writes per placed task, for a small and a huge job, on etcd's default
limits (issue 19.2), and whether the huge job is fully placed without reaching etcd's quota.

    python bench/bench_job_bytes.py [--big 1000000] [--small 100] [--machines 2000]

Setup: one etcd (fsync on) with etcd's default limits (128 ops per txn, 1.5 MiB per request) and
the project's stated quota; a cell of ``--machines`` demo machines. Each job (1 millicore, 1 MiB
per task) is placed by the real batch scheduler, ``OptimisticPlacer`` and ``StoreCommitter`` in
this process (incremental commits of up to 63 claims per txn). The store is wrapped to count the
key and value bytes of every put of every committed txn. Printed per job: txns, bytes written per
placed task, the job record's bytes per txn, and etcd's db size (``etcdctl endpoint status``)
against the quota at the end. Goal: the huge job's bytes per placed task within 2x of the small
job's, and the huge job fully placed.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_common import verdict  # noqa: E402
from cellstate.cellspec import CellSpec, init_cell  # noqa: E402
from cellstate.committer import StoreCommitter  # noqa: E402
from cellstate.etcd.cluster import EtcdCluster  # noqa: E402
from cellstate.etcd.options import EtcdOptions  # noqa: E402
from cellstate.etcd.store import EtcdStore  # noqa: E402
from cellstate.keys import CellKeys  # noqa: E402
from cellstate.model import Job, JobKind  # noqa: E402
from cellstate.replica.view import ReplicaView  # noqa: E402
from cellstate.resources import Resources  # noqa: E402
from cellstate.store import Put  # noqa: E402
from cellstate.submit import submit_jobs  # noqa: E402
from omega.modes import CommitMode, ConflictMode  # noqa: E402
from omega.occ import OptimisticPlacer  # noqa: E402
from omega.protocols import Decision  # noqa: E402
from omega.retry import RetryPolicy  # noqa: E402
from schedulers.batch import BatchScheduler  # noqa: E402

ETCD_MAX_TXN_OPS = 128
ETCD_MAX_REQUEST_BYTES = 1_572_864
ETCDCTL = Path(sys.executable).parent / "etcdctl"


class CountingStore:
    """A store whose committed txns' put bytes (key + value) are counted, by key kind."""

    def __init__(self, store, keys: CellKeys):
        self._store, self._prefix = store, keys.prefix
        self.bytes: dict[str, int] = {}
        self.txns = 0

    def __getattr__(self, name):
        return getattr(self._store, name)

    def txn(self, compares, success, failure=()):
        result = self._store.txn(compares, success, failure)
        if result.succeeded:
            self.txns += 1
            for op in success:
                if isinstance(op, Put):
                    kind = op.key[len(self._prefix):].split("/", 1)[0]
                    self.bytes[kind] = self.bytes.get(kind, 0) + len(op.key.encode()) + len(op.value)
        return result


class Clock:
    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def db_size(endpoint: str) -> int:
    out = subprocess.run([str(ETCDCTL), "--endpoints", endpoint, "endpoint", "status", "-w", "json"],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    return json.loads(out)[0]["Status"]["dbSize"]


def place(store, keys: CellKeys, tasks: int, machines: int) -> dict:
    init_cell(store, keys, CellSpec(machines=machines))
    job = Job(f"job-{tasks}", JobKind.BATCH, tasks, Resources.of(1, 1))
    submit_jobs(store, keys, [job], time.time())
    counting = CountingStore(store, keys)
    view = ReplicaView(store, keys)
    placer = OptimisticPlacer("bench", StoreCommitter(counting, keys), ConflictMode.RESOURCE_FIT,
                              CommitMode.INCREMENTAL, RetryPolicy(max_attempts=4), Clock(),
                              refresh=lambda: view.pump(0.0))
    scheduler = BatchScheduler("bench", random.Random(1))

    def decide(entry, todo, v) -> Decision:
        decision = scheduler.decide(entry, todo, v)
        return Decision(list(decision.claims), dict(decision.unplaced))
    start = time.perf_counter()
    placed = 0
    try:
        while True:
            view.pump(0.0)
            result = placer.place(job.id, view, decide)
            placed += len(result.placed)
            if not result.pending or not result.placed:
                break
        view.pump(0.5)
        record = view.job(job.id).record
    finally:
        view.close()
    seconds = time.perf_counter() - start
    total = sum(counting.bytes.values())
    return dict(tasks=tasks, placed=record.tasks.count("a"), txns=counting.txns, seconds=seconds,
                bytes_per_task=total / max(placed, 1), record_bytes_per_txn=counting.bytes.get("jobs", 0)
                / max(counting.txns, 1), bytes=counting.bytes)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--big", type=int, default=1_000_000, help="tasks of the huge job")
    parser.add_argument("--small", type=int, default=100, help="tasks of the small job")
    parser.add_argument("--machines", type=int, default=2_000)
    args = parser.parse_args()
    options = EtcdOptions(max_txn_ops=ETCD_MAX_TXN_OPS, max_request_bytes=ETCD_MAX_REQUEST_BYTES)
    with EtcdCluster(1, options=options) as cluster:
        store = EtcdStore(cluster.endpoints, max_txn_ops=ETCD_MAX_TXN_OPS, max_request_bytes=ETCD_MAX_REQUEST_BYTES,
                          timeout=60.0)
        print(f"etcd limits: {ETCD_MAX_TXN_OPS} ops, {ETCD_MAX_REQUEST_BYTES:,} bytes per request; quota "
              f"{options.quota_backend_bytes:,} bytes; {args.machines:,} machines", flush=True)
        runs = {}
        for name, tasks in (("small", args.small), ("big", args.big)):
            r = runs[name] = place(store, CellKeys(f"bytes-{name}"), tasks, args.machines)
            print(f"{name} job, {tasks:,} tasks: {r['placed']:,} placed in {r['txns']:,} txns ({r['seconds']:.1f} s); "
                  f"{r['bytes_per_task']:.1f} bytes written per placed task (job record "
                  f"{r['record_bytes_per_txn']:.0f} bytes per txn); by kind {r['bytes']}", flush=True)
        size = db_size(cluster.endpoints[0])
        print(f"etcd db size at the end: {size:,} bytes ({size / options.quota_backend_bytes:.1%} of the quota)")
        store.close()
    ratio = runs["big"]["bytes_per_task"] / runs["small"]["bytes_per_task"]
    print(verdict("bytes per placed task, big / small", ratio, 2.0, "x", False))
    print(f"big job fully placed: {'yes' if runs['big']['placed'] == args.big else 'NO'}")
    return 0 if runs["big"]["placed"] == args.big and ratio <= 2.0 else 1


if __name__ == "__main__":
    sys.exit(main())
