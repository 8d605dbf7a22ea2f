"""Placement-commit txns through ``EtcdStore.txn`` versus the bare etcd3 client.

    python bench/bench_store_txn.py [--machines 1000] [--placements 1000] [--claims 1,10,100] [--no-fsync]

The txn shape is the placement commit's: per claimed machine one compare
``mod_revision(machine) == seen``, one put of its ledger and one put of an allocation;
N claims (distinct machines) per txn. For each N, rounds alternate between the store and
the bare client (``MultiEndpointEtcd3Client.transaction`` with ``transactions.mod``
compares); a round commits ``--placements`` placements. Each txn must succeed (the
benchmark is the only writer, so a seen revision is the revision of its last commit).
Prints the median of ``--rounds`` rounds: txns/s, placements/s, and store/bare (goal >= 0.9).
"""

from __future__ import annotations

import argparse
import time

import etcd3

from bench_common import median, own_etcd, store_of
from cellstate.codec.records import encode_alloc, encode_machine
from cellstate.etcd.store import parse_endpoint
from cellstate.keys import CellKeys
from cellstate.model import Alloc, Machine
from cellstate.resources import Resources
from cellstate.store import Put, mod_revision_is

RATIO_GOAL = 0.9
REQUEST = Resources(500, 1024, 2048)


class Ledgers:
    """The machines' keys, their seen mod_revisions and the bytes the commits write."""

    def __init__(self, keys: CellKeys, machines: int):
        self.keys = keys
        self.machine_keys = [keys.machine(f"m{i:05d}") for i in range(machines)]
        self.seen = dict.fromkeys(self.machine_keys, 0)
        self.value = encode_machine(Machine("m00000", Resources(64_000, 262_144, 1_000_000),
                                            allocated=REQUEST, task_count=1))
        self.alloc_value = encode_alloc(Alloc("job", 0, "m00000", REQUEST))
        self.next_machine = 0
        self.next_task = 0

    def claims(self, n: int) -> list[tuple[str, str]]:
        """(machine key, alloc key) of ``n`` distinct machines, round robin."""
        out = []
        for _ in range(n):
            out.append((self.machine_keys[self.next_machine % len(self.machine_keys)],
                        self.keys.alloc("job", self.next_task)))
            self.next_machine += 1
            self.next_task += 1
        return out

    def committed(self, claims, revision: int) -> None:
        for machine_key, _ in claims:
            self.seen[machine_key] = revision


def store_txn(store, ledgers: Ledgers, claims) -> int:
    compares = [mod_revision_is(m, ledgers.seen[m]) for m, _ in claims]
    success = [op for m, a in claims for op in (Put(m, ledgers.value), Put(a, ledgers.alloc_value))]
    result = store.txn(compares, success)
    if not result.succeeded:
        raise RuntimeError("store txn failed its compares: the benchmark's bookkeeping is wrong")
    return result.revision


class BareCommitter:
    """The same txn through the bare client; the revision is counted (one writer: +1 per txn)."""

    def __init__(self, client, revision: int):
        self.client = client
        self.revision = revision

    def txn(self, ledgers: Ledgers, claims) -> int:
        t = self.client.transactions
        compares = [t.mod(m) == ledgers.seen[m] for m, _ in claims]
        success = [op for m, a in claims for op in (t.put(m, ledgers.value), t.put(a, ledgers.alloc_value))]
        succeeded, _ = self.client.transaction(compare=compares, success=success, failure=[])
        if not succeeded:
            raise RuntimeError("bare txn failed its compares: the benchmark's bookkeeping is wrong")
        self.revision += 1
        return self.revision


def run_round(commit, ledgers: Ledgers, placements: int, n: int) -> tuple[float, int]:
    """(seconds, txns) to commit ``placements`` placements in txns of ``n`` claims."""
    txns = max(1, placements // n)
    batches = [ledgers.claims(n) for _ in range(txns)]
    start = time.perf_counter()
    for claims in batches:
        ledgers.committed(claims, commit(claims))
    return time.perf_counter() - start, txns


def bench_claims(store, bare: BareCommitter, ledgers: Ledgers, n: int, args) -> dict[str, list[float]]:
    """Alternating rounds; txns/s per round for 'store' and 'bare'."""
    rates: dict[str, list[float]] = {"store": [], "bare": []}
    for _ in range(args.rounds):
        for name in ("store", "bare"):
            if name == "store":
                seconds, txns = run_round(lambda c: store_txn(store, ledgers, c), ledgers, args.placements, n)
                bare.revision = store.revision()
            else:
                seconds, txns = run_round(lambda c: bare.txn(ledgers, c), ledgers, args.placements, n)
            rates[name].append(txns / seconds)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--machines", type=int, default=1_000)
    parser.add_argument("--placements", type=int, default=1_000, help="placements per round")
    parser.add_argument("--claims", default="1,10,100", help="claims per txn, comma-separated")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-fsync", action="store_true", help="start etcd with --unsafe-no-fsync")
    args = parser.parse_args()
    claim_counts = [int(c) for c in args.claims.split(",")]
    if max(claim_counts) > args.machines:
        parser.error("--machines must be at least the largest --claims (claims use distinct machines)")
    keys = CellKeys("bench-txn")
    ledgers = Ledgers(keys, args.machines)
    with own_etcd(args.no_fsync) as cluster:
        store = store_of(cluster)
        host, port = parse_endpoint(cluster.endpoints[0])
        client = etcd3.MultiEndpointEtcd3Client(
            endpoints=[etcd3.Endpoint(host, port, secure=False, time_retry=0.5)], failover=True)
        bare = BareCommitter(client, store.revision())
        print(f"etcd fsync={'off' if args.no_fsync else 'on'}; {args.machines:,} machines; "
              f"{args.placements:,} placements per round; median of {args.rounds} alternating rounds")
        for n in claim_counts:
            rates = bench_claims(store, bare, ledgers, n, args)
            store_rate, bare_rate = median(rates["store"]), median(rates["bare"])
            ratio = store_rate / bare_rate
            print(f"N={n:>3} claims/txn: EtcdStore {store_rate:,.0f} txns/s ({store_rate * n:,.0f} placements/s); "
                  f"bare etcd3 {bare_rate:,.0f} txns/s ({bare_rate * n:,.0f} placements/s); "
                  f"store/bare {ratio:.2f} (goal >= {RATIO_GOAL}, {'meets' if ratio >= RATIO_GOAL else 'MISSES'} it)")
        client.close()
        store.close()


if __name__ == "__main__":
    main()
