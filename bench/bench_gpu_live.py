"""FGD under Omega, live: one or three ``omega scheduler run`` processes (batch, chain
``fgd`` given the pod list's target workload) on a real etcd, the openb burst submitted in wall
time with departures.

    python bench/bench_gpu_live.py [--nodes FILE] [--pods FILE] [--seed 42] [--node-limit 200]
                                   [--rate 40] [--tune 1.0] [--life-scale 0.05] [--sample 32,128]
                                   [--runs 1:resource-fit,3:resource-fit,3:sequence] [--devices fgd|best_fit]
                                   [--json-out FILE]

Starts its own single-member etcd on a free loopback port (data removed at the end); each run
is a fresh cell of the node list's machines (``--node-limit``: a seeded sample), its schedulers
started and serving before the first pod. The pods (``tools.gpufrag.timed``: the gpu-frag
arrival sequence: the GPU demand arrived at the end is ``--tune`` x the cell's GPU capacity) are submitted ``--rate`` a
second, one one-task batch job each; each is killed ``life x --life-scale`` seconds after its
submission (its departure; the openb lifetime, placed or not). After the last arrival the
bench waits until the pending queue stops shrinking (at most ``SETTLE_S``), then stops the
schedulers (SIGTERM; their ``final-stats``) and checks the cell (``omega check``: capacity per
device, device bindings, GPU models).

Per run: GPU allocated when the last pod arrived and after settling (% of capacity; the
unallocated rest), pods still pending, conflict fraction (conflicted txns / txns over all
schedulers, from their final stats), kills that failed, the check's violations.
"""

from __future__ import annotations

import argparse
import heapq
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tools.trace.shared import traces_dir  # noqa: E402

TRACES = traces_dir() / "alibaba-openb"

from cellstate.check import check_cell  # noqa: E402
from cellstate.codec.records import decode_job_record, decode_machine, encode_machine  # noqa: E402
from cellstate.devices import device_free  # noqa: E402
from cellstate.etcd.cluster import EtcdCluster  # noqa: E402
from cellstate.etcd.options import EtcdOptions  # noqa: E402
from cellstate.etcd.store import EtcdStore  # noqa: E402
from cellstate.keys import CellKeys  # noqa: E402
from cellstate.store import Put, StoreError  # noqa: E402
from cellstate.submit import kill_job, submit_jobs  # noqa: E402
from tools.gpufrag.experiment import load_inputs, workload_args  # noqa: E402
from tools.gpufrag.timed import write_burst_trace  # noqa: E402
from tools.trace.events import JobSubmit, MachineAdd  # noqa: E402
from tools.trace.format import read_trace  # noqa: E402

SETTLE_S = 20.0  # after the last arrival: wait at most this long for the pending queue to stop shrinking
READY_S = 60.0   # a scheduler must publish its stats within this long
TICK_S = 0.05    # submissions and kills due are written every tick


def chain_toml(workload: list[dict], k: int, size: int, devices: str = "fgd") -> str:
    """The batch chain: the usual filters, ``fgd`` with ``workload`` and its device choice
    ``devices``, ``k`` of ``size`` sampled."""
    shapes = ", ".join("{ " + ", ".join(f"{key} = {json.dumps(value)}" for key, value in shape.items()) + " }"
                       for shape in workload)
    filters = "".join(f'[[filters]]\nname = "{name}"\n' for name in
                      ("machine_state", "resources_fit", "constraints"))
    return (f"k = {k}\nsample_size = {size}\n{filters}[[scorers]]\nname = \"fgd\"\n"
            f"[scorers.args]\ndevices = \"{devices}\"\nworkload = [{shapes}]\n")


def load_burst(args) -> tuple[list, list[tuple[float, object]]]:
    """(machines, [(t, job)]) of the burst (``tools.gpufrag.timed.write_burst_trace``)."""
    with tempfile.TemporaryDirectory() as tmp:
        trace = str(Path(tmp) / "burst.omt")
        write_burst_trace(args.nodes, args.pods, trace, args.seed, args.tune, args.rate, args.life_scale, args.node_limit)
        _, reader = read_trace(trace)
        machines, jobs = [], []
        for event in reader:
            if isinstance(event, MachineAdd):
                machines.append(event.machine)
            elif isinstance(event, JobSubmit):
                jobs.append((event.t, event.job))
    return machines, jobs


def gpu_allocated(store, keys) -> float:
    """Allocated GPU milli / GPU capacity over the cell's machines, from their device ledgers."""
    used = total = 0
    for kv in store.range(keys.kind_prefix("machines")).kvs:
        m = decode_machine(kv.key, kv.value)
        free = device_free(m.capacity, m.allocated)
        total += 1000 * len(free)
        used += sum(1000 - f for f in free)
    return used / total if total else 0.0


def pending_tasks(store, keys) -> int:
    count = 0
    for kv in store.range(keys.kind_prefix("jobs")).kvs:
        record = decode_job_record(kv.key, kv.value)
        if not record.killed:
            count += record.tasks.count("p")
    return count


class Schedulers:
    """``n`` ``omega scheduler run`` processes on the cell, output to files in ``out``."""

    def __init__(self, n: int, mode: str, endpoints: list[str], cell: str, chain: Path, out: Path) -> None:
        self.names = [f"fgd-{i}" for i in range(n)]
        self.out = out
        self.procs = []
        for i, name in enumerate(self.names):
            cmd = [sys.executable, "-m", "tools.cli", "scheduler", "run", "--kind", "batch", "--name", name,
                   "--endpoints", ",".join(endpoints), "--cell", cell, "--conflict-mode", mode,
                   "--config", str(chain), "--seed", str(i + 1), "--progress-every", "0"]
            with open(out / f"{name}.out", "w") as stdout, open(out / f"{name}.err", "w") as stderr:
                self.procs.append(subprocess.Popen(cmd, cwd=ROOT, stdout=stdout, stderr=stderr))

    def wait_ready(self, store, keys) -> None:
        deadline = time.monotonic() + READY_S
        while not all(store.get(keys.stats(name)) for name in self.names):
            for name, p in zip(self.names, self.procs):
                if p.poll() is not None:
                    raise RuntimeError(f"scheduler {name} exited {p.returncode}: "
                                       f"{(self.out / f'{name}.err').read_text()[-500:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"schedulers not serving within {READY_S} s")
            time.sleep(0.2)

    def stop(self) -> list[dict]:
        """SIGTERM each (by its pid), wait, and the final stats each printed."""
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        finals = []
        for name, p in zip(self.names, self.procs):
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            lines = [line for line in (self.out / f"{name}.out").read_text().splitlines()
                     if line.startswith("final-stats ")]
            if p.returncode != 0 or not lines:
                raise RuntimeError(f"scheduler {name} exited {p.returncode} without final stats: "
                                   f"{(self.out / f'{name}.err').read_text()[-500:]}")
            finals.append(json.loads(lines[-1].split(" ", 1)[1]))
        return finals


def run_once(cluster, machines, jobs, n: int, mode: str, chain: Path, cell: str) -> dict:
    store = EtcdStore(cluster.endpoints, max_txn_ops=cluster.options.max_txn_ops)
    keys = CellKeys(cell)
    try:
        puts = [Put(keys.machine(m.id), encode_machine(m)) for m in machines]
        for i in range(0, len(puts), 100):
            store.txn((), puts[i:i + 100])
        with tempfile.TemporaryDirectory() as tmp:
            scheds = Schedulers(n, mode, cluster.endpoints, cell, chain, Path(tmp))
            try:
                scheds.wait_ready(store, keys)
                kills_failed, started = 0, time.monotonic()
                departures: list[tuple[float, str]] = []
                i = 0
                while i < len(jobs):
                    now = time.monotonic() - started
                    due = []
                    while i < len(jobs) and jobs[i][0] <= now:
                        t, job = jobs[i]
                        due.append(job)
                        if job.duration_s is not None:
                            heapq.heappush(departures, (t + job.duration_s, job.id))
                        i += 1
                    if due:
                        submit_jobs(store, keys, due, time.time())
                    while departures and departures[0][0] <= now:
                        _, job_id = heapq.heappop(departures)
                        try:
                            kill_job(store, keys, job_id)
                        except StoreError:
                            kills_failed += 1
                    if i < len(jobs):
                        time.sleep(TICK_S)
                at_last = gpu_allocated(store, keys)
                arrived_s = time.monotonic() - started
                pending, stalled_since, settle_end = pending_tasks(store, keys), time.monotonic(), time.monotonic() + SETTLE_S
                while pending and time.monotonic() < settle_end and time.monotonic() - stalled_since < 3.0:
                    time.sleep(0.5)
                    now_pending = pending_tasks(store, keys)
                    if now_pending < pending:
                        stalled_since = time.monotonic()
                    pending = now_pending
                settled = gpu_allocated(store, keys)
            finally:
                finals = scheds.stop()
        report = check_cell(store, keys)
    finally:
        store.close()
    txns = sum(f["txns"] for f in finals)
    conflicts = sum(f["conflicts"] for f in finals)
    return {"schedulers": n, "conflict_mode": mode, "pods": len(jobs), "arrivals_wall_s": round(arrived_s, 1),
            "unallocated_gpu_pct_at_last_arrival": round(100 * (1 - at_last), 2),
            "unallocated_gpu_pct_settled": round(100 * (1 - settled), 2), "pending_tasks_at_end": pending,
            "txns": txns, "conflict_txns": conflicts, "conflict_fraction": conflicts / txns if txns else 0.0,
            "stale_retries": sum(f.get("stale_retries", 0) for f in finals), "kills_failed": kills_failed,
            "check_ok": report.ok, "violations": len(report.violations)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default=str(TRACES / "openb_node_list_gpu_node.csv.gz"))
    ap.add_argument("--pods", default=str(TRACES / "openb_pod_list_default.csv.gz"))
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--node-limit", type=int, default=200, help="a seeded sample of this many nodes (0: all)")
    ap.add_argument("--rate", type=float, default=40.0, help="pods submitted per second")
    ap.add_argument("--tune", type=float, default=1.0, help="GPU demand arrived at the end, x the cell's capacity")
    ap.add_argument("--life-scale", type=float, default=0.05, help="departure = submission + lifetime x this (0: none)")
    ap.add_argument("--sample", default="32,128", metavar="K,SIZE", help="the batch chain's k and sample_size")
    ap.add_argument("--runs", default="1:resource-fit,3:resource-fit,3:sequence", metavar="N:MODE,...",
                    help="scheduler count and conflict mode of each run")
    ap.add_argument("--devices", default="fgd", choices=("fgd", "best_fit"),
                    help="the device a share takes: FGD's choice (default) or best fit")
    ap.add_argument("--json-out", default=None)
    args = ap.parse_args()
    try:
        runs = [(int(n), mode) for n, mode in (r.split(":") for r in args.runs.split(","))]
        k, size = (int(x) for x in args.sample.split(","))
    except ValueError:
        ap.error(f"--runs wants N:MODE[,N:MODE...] and --sample K,SIZE, got {args.runs!r} and {args.sample!r}")
    args.node_limit = args.node_limit or None
    machines, jobs = load_burst(args)
    workload = workload_args(load_inputs(args.nodes, args.pods).workload)
    print(f"{len(machines)} machines, {len(jobs)} pods (tune {args.tune:g}) at {args.rate:g}/s ({jobs[-1][0]:.0f} s), "
          f"departures at lifetime x {args.life_scale:g}, devices {args.devices}", flush=True)
    results = []
    cluster = EtcdCluster(size=1, options=EtcdOptions(unsafe_no_fsync=True)).start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            chain = Path(tmp) / "chain.toml"
            chain.write_text(chain_toml(workload, k, size, args.devices))
            for n, mode in runs:
                r = run_once(cluster, machines, jobs, n, mode, chain, f"gpu-live-{int(time.time())}-{n}-{mode}")
                results.append(r)
                print(f"  {n} x fgd, {mode:<12} unallocated GPU {r['unallocated_gpu_pct_at_last_arrival']:6.2f} % "
                      f"at last arrival, {r['unallocated_gpu_pct_settled']:6.2f} % settled  pending "
                      f"{r['pending_tasks_at_end']}  conflict fraction {r['conflict_fraction']:.3f} "
                      f"({r['conflict_txns']}/{r['txns']} txns)  kills failed {r['kills_failed']}  "
                      f"check {'ok' if r['check_ok'] else str(r['violations']) + ' violations'}  "
                      f"arrivals {r['arrivals_wall_s']} s", flush=True)
    finally:
        cluster.stop()
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"settings": vars(args), "runs": results}, indent=1))
    return 0 if all(r["check_ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
