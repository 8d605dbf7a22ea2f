"""FGD under Omega: the gpu-frag workload as a timed replay with one or three batch schedulers
scoring by FGD (the ``fgd`` scorer), per-device (resource-fit) or per-machine (sequence)
conflict detection, with or without departures.

    python bench/bench_gpu_omega.py [--nodes FILE] [--pods FILE] [--seed 42] [--rate 20]
                                    [--life-scale 0,0.1] [--store memory|etcd] [--node-limit N]
                                    [--full-scan] [--devices fgd|best_fit] [--runs N:MODE,...]

With ``--store etcd`` the replays commit to the etcd at $OMEGA_ENDPOINTS (else 127.0.0.1:2379),
each in a fresh cell.

The workload (``tools.gpufrag.timed``): the experiment's arrival sequence at tune 1.0 (demand =
the cell's GPU capacity), ``--rate`` pods per virtual second, each pod running its own lifetime
in the list x life scale (0: no departures, as the paper). Per configuration: the GPU allocated
when the last pod arrives (% of capacity) and the unallocated rest, pods never placed, the
conflict fraction (conflicted txns / txns, all schedulers), the replay's invariant check.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tools.trace.shared import traces_dir  # noqa: E402

TRACES = traces_dir() / "alibaba-openb"

from tools.gpufrag.experiment import load_inputs, workload_args  # noqa: E402
from tools.gpufrag.timed import write_burst_trace  # noqa: E402

FILTERS = [{"name": "machine_state"}, {"name": "resources_fit"}, {"name": "constraints"}]


def schedulers(n: int, mode: str, workload: list[dict], full_scan: int = 0, sample: tuple[int, int] = (0, 0),
               devices: str = "fgd") -> str:
    chain = {"filters": FILTERS, "scorers": [{"name": "fgd", "args": {"workload": workload, "devices": devices}}]}
    if sample[0]:
        chain.update(k=sample[0], sample_size=sample[1])
    if full_scan:  # every scheduler scores every machine: they all want the same best one
        chain.update(k=full_scan, sample_size=full_scan, sample_rounds=1)
    return json.dumps([{"name": f"fgd{i}", "kind": "batch", "jobs": "all", "conflict_mode": mode,
                        "options": chain} for i in range(n)])


def run(trace: str, spec: str, store: str, arrivals_end: float, cell: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        spec_file = Path(tmp) / "s.json"
        spec_file.write_text(spec)
        cmd = [sys.executable, "-m", "tools.cli", "replay", trace, "--schedulers", f"@{spec_file}",
               "--sample-every", "1", "--json-out", str(out), "--store", store, "--until", str(arrivals_end + 600),
               *(("--cell", cell) if store == "etcd" else ())]
        started = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True)
        wall = time.perf_counter() - started
        doc = json.loads(out.read_text())
    samples = [u for u in doc["utilization"] if u["t"] <= arrivals_end]
    at_end = samples[-1]["extra"].get("gpu", 0.0) if samples else 0.0
    txns = sum(s["transactions"] for s in doc["schedulers"])
    conflicts = sum(s["conflict_transactions"] for s in doc["schedulers"])
    return {"allocated_gpu_pct_at_last_arrival": 100 * at_end, "unallocated_gpu_pct": 100 * (1 - at_end),
            "jobs_unscheduled": doc["jobs_unscheduled"], "conflict_fraction": conflicts / txns if txns else 0.0,
            "txns": txns, "conflict_txns": conflicts, "check_ok": doc["check"]["ok"], "wall_s": round(wall, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default=str(TRACES / "openb_node_list_gpu_node.csv.gz"))
    ap.add_argument("--pods", default=str(TRACES / "openb_pod_list_default.csv.gz"))
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--life-scale", default="0,0.1")
    ap.add_argument("--store", default="memory", choices=("memory", "etcd"))
    ap.add_argument("--node-limit", type=int, default=None, help="a seeded sample of this many nodes")
    ap.add_argument("--sample", default="32,128", metavar="K,SIZE",
                    help="batch scheduler's k and sample_size (default 32,128; 0,0: its defaults)")
    ap.add_argument("--full-scan", action="store_true",
                    help="each scheduler scores every machine (maximal contention) instead of sampling")
    ap.add_argument("--devices", default="fgd", choices=("fgd", "best_fit"),
                    help="the device a share takes: FGD's choice (default) or best fit")
    ap.add_argument("--runs", default="1:resource-fit,3:resource-fit,3:sequence", metavar="N:MODE,...",
                    help="scheduler count and conflict mode of each replay")
    args = ap.parse_args()
    workload = workload_args(load_inputs(args.nodes, args.pods).workload)
    for life in (float(x) for x in args.life_scale.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            trace = str(Path(tmp) / "burst.omt")
            info = write_burst_trace(args.nodes, args.pods, trace, args.seed, 1.0, args.rate, life, args.node_limit)
            print(f"life scale {life}: {info['pods']} pods over {info['arrival_window_s']:.0f} virtual s")
            for n, mode in ((int(n), mode) for n, mode in (r.split(":") for r in args.runs.split(","))):
                scan = (args.node_limit or 100_000) if args.full_scan else 0
                cell = f"gpu-omega-{int(time.time())}-{n}-{mode}-{life:g}".replace(".", "_")
                k, size = (int(x) for x in args.sample.split(","))
                r = run(trace, schedulers(n, mode, workload, scan, (k, size), args.devices), args.store, info["arrival_window_s"], cell)
                print(f"  {n} x fgd, {mode:<12} unallocated GPU {r['unallocated_gpu_pct']:6.2f} %  "
                      f"never placed {r['jobs_unscheduled']:5d}  conflict fraction {r['conflict_fraction']:.3f} "
                      f"({r['conflict_txns']}/{r['txns']} txns)  check {'ok' if r['check_ok'] else 'VIOLATIONS'}  "
                      f"{r['wall_s']} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
