"""Committed placements per second of real ``omega scheduler run`` processes on a durable etcd,
beside the bare-client ceiling for the same txn shape measured in the same run.

    python bench/bench_placement.py [--machines 10000] [--jobs 1000] [--tasks 100] [--processes 1,3]
                                    [--modes resource-fit,sequence] [--max-txn-ops 1000] [--no-fsync]

Setup: one etcd with fsync ON (unless --no-fsync) and raised --max-txn-ops; a fresh cell per
run with ``--machines`` demo machines (``omega cell`` shapes). Workload: ``--jobs`` batch jobs
of ``--tasks`` tasks of 250 millicores / 512 MiB, submitted at once after every scheduler
process is serving (and its stats key is live, so the rendezvous sharing sees every peer).

Ceiling: P processes, each with its own bare etcd3 client, commit txns of ``--claims`` claims
on disjoint machines: per claim a compare ``mod_revision(machine) == seen``, a put of the
ledger and a put of an allocation (the placement commit's shape, without the job record).

Scheduler runs: for each process count (resource-fit) and each other conflict mode (at the
largest count): time from the submission to the last task placed, placements/s, conflict
fraction (conflicts / successful txns, from the final stats; resource-fit's stale retries,
failed txns whose claims all still fit, are counted apart; conflicts split by cause, machine
or job), CPU seconds per 1,000 placements of the scheduler processes and of etcd apart (from
/proc, between the submission and the last placement), and ``check`` of the cell.
Peers share the jobs by rendezvous without stealing unless ``--steal-after`` is given.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import etcd3  # noqa: E402

from bench_common import own_etcd, store_of, verdict  # noqa: E402
from cellstate.cellspec import CellSpec, init_cell  # noqa: E402
from cellstate.check import check_cell  # noqa: E402
from cellstate.codec.records import encode_alloc, encode_machine  # noqa: E402
from cellstate.etcd.store import parse_endpoint  # noqa: E402
from cellstate.keys import CellKeys  # noqa: E402
from cellstate.model import Alloc, Job, JobKind, Machine  # noqa: E402
from cellstate.resources import Resources  # noqa: E402
from cellstate.submit import submit_jobs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
REQUEST = Resources.of(250, 512)
GOAL = 5_000.0


# ------------------------------------------------------------------ bare-client ceiling


def _bare_worker(endpoint: str, worker: int, machines: int, txns: int, claims: int, barrier, out) -> None:
    """Commit ``txns`` txns of ``claims`` claims on this worker's own machines; report (start, end)."""
    host, port = parse_endpoint(endpoint)
    client = etcd3.MultiEndpointEtcd3Client(endpoints=[etcd3.Endpoint(host, port, secure=False, time_retry=0.5)],
                                            failover=True)
    keys = CellKeys(f"bare{os.getpid()}")
    machine_keys = [keys.machine(f"w{worker}m{i:05d}") for i in range(machines)]
    ledger = encode_machine(Machine("m", Resources.of(32_000, 131_072), allocated=REQUEST, task_count=1))
    alloc = encode_alloc(Alloc("job", 0, "m", REQUEST))
    seen = dict.fromkeys(machine_keys, 0)
    t = client.transactions
    barrier.wait()
    start = time.perf_counter()
    for n in range(txns):
        chosen = [machine_keys[(n * claims + i) % machines] for i in range(claims)]
        ok, responses = client.transaction(
            compare=[t.mod(m) == seen[m] for m in chosen],
            success=[op for i, m in enumerate(chosen) for op in (t.put(m, ledger), t.put(keys.alloc("job", n * claims + i),
                                                                                           alloc))],
            failure=[])
        if not ok:
            raise RuntimeError("bare txn failed its compares: the benchmark's bookkeeping is wrong")
        revision = responses[0].response_put.header.revision if responses else 0
        for m in chosen:
            seen[m] = revision
    out.put((start, time.perf_counter()))
    client.close()


def bare_ceiling(endpoint: str, processes: int, placements: int, claims: int, machines: int) -> float:
    """Placements/s of ``processes`` bare clients committing ``placements`` in all."""
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(processes), ctx.Queue()
    txns = placements // claims // processes
    workers = [ctx.Process(target=_bare_worker, args=(endpoint, w, machines // processes, txns, claims, barrier, out))
               for w in range(processes)]
    for w in workers:
        w.start()
    spans = [out.get(timeout=600) for _ in workers]
    for w in workers:
        w.join(30)
    seconds = max(end for _, end in spans) - min(start for start, _ in spans)
    return txns * claims * processes / seconds


# ------------------------------------------------------------------ scheduler processes


def start_scheduler(endpoint: str, cell: str, name: str, seed: int, mode: str, args) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "tools.cli", "scheduler", "run", "--kind", "batch", "--name", name,
           "--endpoints", endpoint, "--cell", cell, "--seed", str(seed), "--conflict-mode", mode,
           "--max-txn-ops", str(args.max_txn_ops), "--batch-jobs", str(args.batch_jobs)]
    if args.steal_after is not None:
        cmd += ["--steal-after", str(args.steal_after)]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    log = tempfile.NamedTemporaryFile("w+", prefix=f"omega-bench-{name}-", suffix=".log", delete=False)
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
    proc.log_path = log.name
    return proc


class PlacedCounter:
    """Counts placed tasks from a watch of the cell's allocations (a placement of a job that is
    not a gang writes its allocs without the job record: docs/CELLSTATE.md)."""

    def __init__(self, store, keys: CellKeys):
        self.placed: set[str] = set()
        self.stream = store.watch(keys.kind_prefix("allocs"), store.revision() + 1)

    def total(self, wait: float = 0.05) -> int:
        batch = self.stream.next(wait)
        while batch is not None:
            for ev in batch.events:
                if ev.value:
                    self.placed.add(ev.key)
                else:
                    self.placed.discard(ev.key)
            batch = self.stream.next(0)
        return len(self.placed)


def wait_until(predicate, timeout: float, what: str, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (/proc; 0.0 where /proc is missing)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def scheduler_run(store, endpoint: str, processes: int, mode: str, args, run_id: int, etcd_pid: int) -> dict:
    """Place the workload with ``processes`` scheduler processes; figures of the run."""
    keys = CellKeys(f"bench-place-{run_id}")
    init_cell(store, keys, CellSpec(machines=args.machines))
    names = [f"batch-{run_id}-{i}" for i in range(processes)]
    procs = [start_scheduler(endpoint, keys.cell, name, i, mode, args) for i, name in enumerate(names)]
    try:
        for proc in procs:
            line = proc.stdout.readline()
            if not line.startswith("scheduler "):
                raise RuntimeError(f"scheduler did not start: {line!r}; see {proc.log_path}")
        wait_until(lambda: all(store.get(keys.stats(n)) for n in names), 30, "every stats key")
        jobs = [Job(f"j{i:05d}", JobKind.BATCH, args.tasks, REQUEST) for i in range(args.jobs)]
        counter = PlacedCounter(store, keys)
        cpu_before = [cpu_seconds(p.pid) for p in procs], cpu_seconds(etcd_pid)
        start = time.perf_counter()
        submit_jobs(store, keys, jobs, time.time())
        total = args.jobs * args.tasks
        wait_until(lambda: counter.total() == total, 900, f"{total} tasks placed", interval=0)
        seconds = time.perf_counter() - start
        scheduler_cpu = sum(cpu_seconds(p.pid) for p in procs) - sum(cpu_before[0])
        etcd_cpu = cpu_seconds(etcd_pid) - cpu_before[1]
        counter.stream.cancel()
    finally:
        finals = [_stop(proc) for proc in procs]
    report = check_cell(store, keys)
    commits, conflicts = sum(f["commits"] for f in finals), sum(f["conflicts"] for f in finals)
    stale = sum(f.get("stale_retries", 0) for f in finals)
    job_conflicts = sum(f.get("job_conflicts", 0) for f in finals)
    return dict(processes=processes, mode=mode, seconds=seconds, rate=total / seconds, commits=commits,
                conflicts=conflicts, job_conflicts=job_conflicts, stale=stale,
                fraction=conflicts / commits if commits else 0.0,
                scheduler_cpu_ms=1000.0 * scheduler_cpu / total * 1000, etcd_cpu_ms=1000.0 * etcd_cpu / total * 1000,
                check_ok=report.ok, per_process=[f["tasks_placed"] for f in finals])


def _stop(proc: subprocess.Popen) -> dict:
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    final = [line for line in out.splitlines() if line.startswith("final-stats ")]
    return json.loads(final[-1].split(" ", 1)[1]) if final else {"commits": 0, "conflicts": 0, "tasks_placed": 0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--machines", type=int, default=10_000)
    parser.add_argument("--jobs", type=int, default=1_000)
    parser.add_argument("--tasks", type=int, default=100, help="tasks per job")
    parser.add_argument("--processes", default="1,3", help="scheduler process counts, comma-separated")
    parser.add_argument("--modes", default="resource-fit,sequence",
                        help="conflict modes; the first runs at every count, the others at the largest")
    parser.add_argument("--claims", type=int, default=100, help="claims per txn of the bare ceiling")
    parser.add_argument("--max-txn-ops", type=int, default=1_000)
    parser.add_argument("--batch-jobs", type=int, default=16)
    parser.add_argument("--steal-after", type=float, default=None,
                        help="let peers steal jobs pending this long (default: never, one owner per job)")
    parser.add_argument("--no-fsync", action="store_true", help="start etcd with --unsafe-no-fsync")
    args = parser.parse_args()
    counts = [int(c) for c in args.processes.split(",")]
    modes = args.modes.split(",")
    total = args.jobs * args.tasks
    with own_etcd(args.no_fsync) as cluster:
        store = store_of(cluster)
        endpoint = cluster.endpoints[0]
        print(f"etcd fsync={'off' if args.no_fsync else 'on'} max-txn-ops={cluster.options.max_txn_ops}; "
              f"{args.machines:,} machines; {args.jobs:,} jobs x {args.tasks} tasks = {total:,} tasks; "
              f"scheduler --max-txn-ops {args.max_txn_ops} --batch-jobs {args.batch_jobs} "
              f"--steal-after {args.steal_after}", flush=True)
        ceilings = {}
        for n in counts:
            ceilings[n] = bare_ceiling(endpoint, n, total, args.claims, args.machines)
            print(f"bare etcd3 ceiling, {n} process(es), {args.claims} claims/txn: {ceilings[n]:,.0f} placements/s",
                  flush=True)
        runs = [(n, modes[0]) for n in counts] + [(max(counts), mode) for mode in modes[1:]]
        for run_id, (n, mode) in enumerate(runs):
            r = scheduler_run(store, endpoint, n, mode, args, run_id, cluster.members[0].pid)
            print(f"{n} scheduler process(es), {mode}: {r['rate']:,.0f} placements/s ({r['seconds']:.1f} s; "
                  f"{r['rate'] / ceilings[n]:.2f} of the bare ceiling); txns {r['commits']:,} committed, "
                  f"{r['conflicts']:,} conflicts ({r['job_conflicts']:,} job-caused), {r['stale']:,} stale "
                  f"retries ({r['stale'] / max(r['commits'], 1):.2f} per committed txn), conflict fraction "
                  f"{r['fraction']:.3f}; CPU ms per 1,000 placements: schedulers {r['scheduler_cpu_ms']:,.0f}, "
                  f"etcd {r['etcd_cpu_ms']:,.0f}; per process "
                  f"{r['per_process']}; check {'ok' if r['check_ok'] else 'FAILED'}", flush=True)
            if n == max(counts) and mode == modes[0]:
                print(verdict(f"{n} scheduler processes", r["rate"], GOAL, "placements/s", True), flush=True)
        store.close()


if __name__ == "__main__":
    main()
