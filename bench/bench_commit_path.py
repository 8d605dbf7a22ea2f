"""CPU cost of the pieces of a scheduler's placement path, per 100-claim commit and per
foreign placement taken in from the watch (no etcd: a memory store; best of repeats).

    python bench/bench_commit_path.py [--claims 100] [--repeats 30]

  build writes       StoreCommitter._writes: new ledgers, their bytes, allocs, job record
  txn request        the etcd TxnRequest protobufs of the commit (compares + puts)
  apply own commit   ReplicaView.apply_outcome of the committed txn
  watch apply        Replica applying another scheduler's commit (a ledger, an alloc and
                     1/claims of a job record per placement), from raw watch events

The script runs against the tree it lives in; to compare with an older tree, copy it there
(it adapts to the older etcd_wire API) and run both, alternating (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import etcd3.etcdrpc as rpc  # noqa: E402

from cellstate.etcd import wire as etcd_wire  # noqa: E402
from cellstate.cellspec import CellSpec, build_machines  # noqa: E402
from cellstate.codec.records import encode_alloc, encode_job_record, encode_machine  # noqa: E402
from cellstate.committer import StoreCommitter  # noqa: E402
from cellstate.keys import CellKeys  # noqa: E402
from cellstate.memory.store import MemoryStore  # noqa: E402
from cellstate.model import Alloc, Job, JobKind, JobRecord  # noqa: E402
from cellstate.replica.view import ReplicaView  # noqa: E402
from cellstate.resources import Resources  # noqa: E402
from cellstate.store import Delete, Event, EventKind, Put, WatchBatch, mod_revision_is  # noqa: E402
from cellstate.plan import Claim, Plan  # noqa: E402
from cellstate.plan_rules import new_ledgers, record_free, updated_record  # noqa: E402

KEYS = CellKeys("bench")
REQUEST = Resources.of(250, 512)


def best_us(fn, repeats: int) -> float:
    """Microseconds of the fastest of ``repeats`` calls (``fn`` may return its own seconds)."""
    fastest = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        own = fn()
        fastest = min(fastest, own if isinstance(own, float) else time.perf_counter() - start)
    return fastest * 1e6


def commit_pieces(claims: int, repeats: int) -> dict[str, float]:
    machines = build_machines(CellSpec(machines=max(claims, 10)))[:claims]
    store = MemoryStore(max_txn_ops=10 * claims + 10)
    job = JobRecord.new(Job("j", JobKind.BATCH, claims, REQUEST), 1.0)

    def reset() -> None:
        store.txn((), [Put(KEYS.machine(m.id), encode_machine(m)) for m in machines]
                  + [Put(KEYS.job("j"), encode_job_record(job))]
                  + [Delete(KEYS.alloc("j", i)) for i in range(claims)])  # the last commit's allocs

    reset()
    view = ReplicaView(store, KEYS)
    committer = StoreCommitter(store, KEYS)

    def plan_on(v) -> Plan:
        return Plan(v.job("j"), tuple(Claim(i, m.id, REQUEST) for i, m in enumerate(machines)),
                    {m.id: v.machine(m.id) for m in machines}, "batch-1", now=1.7e9)

    plan = plan_on(view)
    ledgers, record = new_ledgers(plan), updated_record(plan)
    free = record_free(plan, record)
    _, keys, _, alloc_keys = committer.txn_compares(plan, ledgers, free)

    def writes():  # what StoreCommitter.commit builds between its compares and the txn
        return committer._writes(plan, ledgers, keys, alloc_keys, None if free else record)

    ops = [Put(k, v) for k, v in writes()[1].items()]
    compares = [mod_revision_is(KEYS.machine(m.id), 1) for m in machines]

    def request() -> None:
        if hasattr(etcd_wire, "add_request_ops"):
            txn = rpc.TxnRequest()
            etcd_wire.add_compares(txn.compare, compares)
            etcd_wire.add_request_ops(txn.success, ops)
        else:  # the API before in-place request building
            success, _ = etcd_wire.request_ops(ops)
            rpc.TxnRequest(compare=[etcd_wire.compare_message(c) for c in compares], success=success)

    def apply_own() -> float:
        fresh = ReplicaView(store, KEYS)
        outcome = committer.commit(plan_on(fresh))
        start = time.perf_counter()
        fresh.apply_outcome(outcome)
        seconds = time.perf_counter() - start
        fresh.close()
        reset()
        return seconds

    figures = {"build writes": best_us(writes, repeats),
               "txn request": best_us(request, repeats),
               "apply own commit": best_us(apply_own, max(3, repeats // 3))}
    view.close()
    return figures


def watch_apply(claims: int, batches: int = 100) -> float:
    """Microseconds per foreign placement applied from watch events."""
    machines = build_machines(CellSpec(machines=10_000))
    listing = WatchBatch(1, tuple(Event(EventKind.PUT, KEYS.machine(m.id), encode_machine(m), 1, 1, 1)
                                  for m in machines))
    foreign = []
    for b in range(batches):
        rev, events = b + 2, []
        for i in range(claims):
            m = machines[(b * claims + i * 37) % len(machines)]
            ledger = replace(m, allocated=REQUEST.scaled(b + 1), task_count=b + 1, writer="batch-2")
            alloc = Alloc(f"j{b}", i, m.id, REQUEST, 0, "batch-2", 1.7e9 + b)
            events += [Event(EventKind.PUT, KEYS.machine(m.id), encode_machine(ledger), rev, 1, 2),
                       Event(EventKind.PUT, KEYS.alloc(f"j{b}", i), encode_alloc(alloc), rev, rev, 1)]
        record = replace(JobRecord.new(Job(f"j{b}", JobKind.BATCH, claims, REQUEST), 1.0), tasks="a" * claims)
        events.append(Event(EventKind.PUT, KEYS.job(f"j{b}"), encode_job_record(record), rev, rev, 1))
        foreign.append(WatchBatch(rev, tuple(events)))
    fastest = float("inf")
    for _ in range(5):
        view = ReplicaView(MemoryStore(), KEYS)
        view.replica._apply_batch(listing)
        start = time.perf_counter()
        for batch in foreign:
            view.replica._apply_batch(batch)
        fastest = min(fastest, time.perf_counter() - start)
        view.close()
    return fastest / (batches * claims) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--claims", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    figures = commit_pieces(args.claims, args.repeats)
    root = Path(__file__).resolve().parents[1]
    print(f"tree {root}; per {args.claims}-claim commit: " + "; ".join(f"{k} {v:,.0f} µs" for k, v in figures.items()))
    print(f"watch apply: {watch_apply(args.claims):.1f} µs per foreign placement")


if __name__ == "__main__":
    main()
