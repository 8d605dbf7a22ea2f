"""Wall time and results of the FGD paper's experiment: six policies x ten seeds on an openb
node list and pod list, through ``omega experiment gpu-frag`` (one process per core).

    python bench/bench_gpu_frag.py [--nodes FILE] [--pods FILE] [--seeds 42-51] [--jobs N]
        [--tie-break shuffled|name|random]

Prints the wall time of the whole experiment, the median single-run time per policy, and per
policy the median unallocated GPU % at 100 % arrived beside the artifact's published median
(default pod list only). Goal (issue 29): six policies x ten seeds on the default list in
<= 10 minutes on a 2-core host; each median within 1.0 point of the artifact's.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools.trace.shared import traces_dir  # noqa: E402

TRACES = traces_dir() / "alibaba-openb"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default=str(TRACES / "openb_node_list_gpu_node.csv.gz"))
    ap.add_argument("--pods", default=str(TRACES / "openb_pod_list_default.csv.gz"))
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--jobs", type=int, default=0)
    ap.add_argument("--tie-break", default="shuffled", choices=("shuffled", "name", "random"))
    args = ap.parse_args()
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "tools.cli", "experiment", "gpu-frag", "--nodes", args.nodes,
                          "--pods", args.pods, "--seeds", args.seeds, "--jobs", str(args.jobs),
                          "--tie-break", args.tie_break, "-o", "json"],
                         check=True, capture_output=True, text=True)
    wall = time.perf_counter() - started
    doc = json.loads(out.stdout)
    print(f"{Path(args.pods).name} on {Path(args.nodes).name}, seeds {args.seeds}, tie-break {args.tie_break}: "
          f"{wall:.1f} s wall for {len(doc['policies'])} policies")
    print(f"{'policy':<14}{'unalloc %':>10}{'artifact':>10}{'diff':>8}{'run s':>8}")
    for name, p in doc["policies"].items():
        ours, pub = p["unallocated_gpu_pct_at"]["100"], p["published_unallocated_gpu_pct_at_100"]
        diff = "" if pub is None else f"{ours - pub:+.2f}"
        print(f"{name:<14}{ours:>10.2f}{'' if pub is None else f'{pub:.2f}':>10}{diff:>8}{p['run_wall_s_median']:>8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
