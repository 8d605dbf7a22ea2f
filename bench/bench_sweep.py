"""``omega sweep --engine local`` against the same replays one after another (issue 31 item 4).

Writes one seeded synthetic trace (``--machines`` × 8 cores, ``--duration`` s of the default
workload), a sweep spec of ``--runs`` replays of it (seeds 0…N-1: identical size), then:

1. sequential: one fresh interpreter runs ``tools.sweep.run.execute`` on each run in turn (the
   sweep's own replay function, no engine): wall time;
2. ``omega sweep SPEC --engine local`` as a fresh process: wall time, and the CPU of the whole
   process tree (this process is made a child subreaper, so the pool's forkserver and workers are
   waited for here and counted in ``RUSAGE_CHILDREN``).

3. the control: two plain interpreters at once, each running half the runs as in 1: what the host
   gives two processes at the moment (other work on the cores lowers it, engine or not).

Prints the throughput ratio (sequential wall ÷ sweep wall; goal >= 1.8 on 2 cores) and the
engine's overhead: the tree's CPU less the replays' own CPU (each run's ``cpu_s``, measured in
its worker around the replay, not its files) over the replays' CPU (goal <= 5 %), and the sweep's
CPU against the sequential process's (which pays one interpreter start and import too). The host's load
average is printed beside them: other processes on the cores lower the ratio.

    .venv/bin/python bench/bench_sweep.py [--runs 4] [--machines 400] [--duration 900]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PR_SET_CHILD_SUBREAPER = 36

SEQUENTIAL = """
import json, sys, time
from tools.sweep.run import execute
from tools.sweep.spec import load_spec
spec = load_spec(sys.argv[1])
part, parts = map(int, (sys.argv[3] if len(sys.argv) > 3 else "0/1").split("/"))
start = time.perf_counter()
cpu = [execute(run, sys.argv[2])["cpu_s"] for run in spec.runs[part::parts]]
print(json.dumps({"wall_s": time.perf_counter() - start, "cpu_s": cpu}))
"""


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def reap_all() -> None:
    """Wait for every descendant handed to this subreaper (the pool's forkserver)."""
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--machines", type=int, default=400)
    parser.add_argument("--duration", type=float, default=900.0)
    parser.add_argument("--workers", type=int, default=None, help="sweep --workers (default: the cores)")
    args = parser.parse_args()

    from tools.fauxmaster.experiments.synthetic import SyntheticSpec, write_synthetic_trace

    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print("cannot become a child subreaper: the pool's CPU would be missed", file=sys.stderr)
        return 1
    python = sys.executable
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as tmp:
        tmp = Path(tmp)
        trace = tmp / "trace.omt.gz"
        write_synthetic_trace(trace, SyntheticSpec(machines=args.machines, duration_s=args.duration, seed=5))
        spec = tmp / "spec.toml"
        spec.write_text(f'[sweep]\nname = "bench"\ntraces = ["{trace}"]\nseeds = {list(range(args.runs))}\n')

        cpu0 = children_cpu()
        start = time.perf_counter()
        done = subprocess.run([python, "-c", SEQUENTIAL, str(spec), str(tmp / "seq")], check=True,
                              capture_output=True, text=True, cwd=REPO)
        seq_wall = time.perf_counter() - start
        seq_cpu = children_cpu() - cpu0
        seq = json.loads(done.stdout)

        start = time.perf_counter()  # the control: two plain interpreters, half the runs each, at once
        halves = [subprocess.Popen([python, "-c", SEQUENTIAL, str(spec), str(tmp / f"half{i}"), f"{i}/2"],
                                   stdout=subprocess.DEVNULL, cwd=REPO) for i in range(2)]
        if any(p.wait() for p in halves):
            raise RuntimeError("a half of the control failed")
        two_wall = time.perf_counter() - start

        command = [python, "-m", "tools.cli", "sweep", str(spec), "--out", str(tmp / "par"), "-o", "json"]
        if args.workers:
            command += ["--workers", str(args.workers)]
        cpu0 = children_cpu()
        start = time.perf_counter()
        done = subprocess.run(command, check=True, capture_output=True, text=True, cwd=REPO)
        par_wall = time.perf_counter() - start
        reap_all()
        tree_cpu = children_cpu() - cpu0
        report = json.loads(done.stdout)
        replay_cpu = sum(r["cpu_s"] for r in report["runs"])
        same = [r["digest"] for r in report["runs"]] == [
            json.loads((tmp / "seq" / "runs" / f"{r['id']}.json").read_text())["digest"] for r in report["runs"]]

    overhead = (tree_cpu - replay_cpu) / replay_cpu
    print(f"{args.runs} replays of {args.machines} machines x {args.duration:g} s (synthetic, seeds 0..{args.runs - 1}); "
          f"{os.cpu_count()} cores, load average before {load:.2f}")
    print(f"  sequential: {seq_wall:.2f} s wall (in-process loop {seq['wall_s']:.2f} s); process CPU {seq_cpu:.2f} s, "
          f"replays' CPU {sum(seq['cpu_s']):.2f} s")
    print(f"  sweep --engine local: {par_wall:.2f} s wall; process tree CPU {tree_cpu:.2f} s, replays' CPU "
          f"{replay_cpu:.2f} s")
    print(f"  control, two plain interpreters with half the runs each at once: {two_wall:.2f} s wall "
          f"({seq_wall / two_wall:.2f}x the sequential throughput: what this host gives two processes now)")
    print(f"  throughput ratio {seq_wall / par_wall:.2f}x (goal >= 1.8); engine overhead {100 * overhead:.1f} % of "
          f"the replays' CPU (goal <= 5 %); the sweep's CPU over the sequential process's: "
          f"{100 * (tree_cpu - seq_cpu) / seq_cpu:+.1f} %; digests equal to the sequential runs': {same}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
