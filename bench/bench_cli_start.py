"""How long ``omega --help`` takes: wall and CPU (user + sys) time of N runs, and what
``python -X importtime`` says it imports. Usage: python bench/bench_cli_start.py [N] [TREE ...]
(each TREE a checkout to measure, default this one; e.g. an export of an older commit)."""

from __future__ import annotations

import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HEAVY = ("ortools", "pandas", "numpy", "grpc", "etcd3", "matplotlib", "rich")


def runs(tree: str, n: int) -> tuple[list[float], list[float]]:
    env = dict(os.environ, PYTHONPATH=tree)
    wall, cpu = [], []
    for _ in range(n):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "tools.cli", "--help"], cwd=tree, env=env,
                       stdout=subprocess.DEVNULL, check=True)
        wall.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return wall, cpu


def imports(tree: str) -> tuple[int, float, list[str]]:
    """(modules imported, ms of top-level imports, heavy packages among them)."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "tools.cli", "--help"], cwd=tree,
                          env=dict(os.environ, PYTHONPATH=tree), capture_output=True, text=True, check=True)
    rows = [(int(m[1]), len(m[2]), m[3]) for m in
            (re.match(r"import time:\s+\d+ \|\s+(\d+) \|( *)(\S+)", line) for line in done.stderr.splitlines()) if m]
    loaded = {name.split(".")[0] for _, _, name in rows}
    return len(rows), sum(c for c, depth, _ in rows if depth == 1) / 1000, [h for h in HEAVY if h in loaded]


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    trees = sys.argv[2:] or [str(Path(__file__).resolve().parents[1])]
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    for tree in trees:
        wall, cpu = runs(tree, n)
        modules, ms, heavy = imports(tree)
        print(f"{tree}: wall median {statistics.median(wall):.2f} s (min {min(wall):.2f}), CPU median "
              f"{statistics.median(cpu):.2f} s (min {min(cpu):.2f}), n={n}; {modules} modules, {ms:.0f} ms of "
              f"imports; heavy: {', '.join(heavy) or 'none'}")


if __name__ == "__main__":
    main()
