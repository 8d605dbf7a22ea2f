"""etcd's db size under the live demo: history stays bounded (issue 19).

    python bench/bench_db_size.py [--duration 600] [--rate 40] [--interval 10]
                                  [--retention REVISIONS] [--json FILE] [-- more omega demo flags]

Runs ``omega demo --no-monitor`` (its etcd with revision-based auto-compaction keeping the
last ``--retention`` revisions; etcd 3.5 compacts every 5 minutes) and, every ``--interval``
seconds, reads the member's status (``etcdctl endpoint status -w json``): the revision, the db
file size (``dbSize``) and the part of it in use (``dbSizeInUse``; pages freed by a compaction
are reused without defrag, so the file itself does not shrink). Prints one row per sample and a
verdict: after the first compaction the db file must stay flat (grow by at most ``--slack``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ETCDCTL = Path(sys.executable).parent / "etcdctl"
MiB = 1024 * 1024


def status(endpoint: str) -> dict | None:
    """{revision, db, in_use} of the member at ``endpoint``, or None when it does not answer."""
    try:
        out = subprocess.run([str(ETCDCTL), "--endpoints", endpoint, "endpoint", "status", "-w", "json"],
                             capture_output=True, text=True, timeout=10, check=True).stdout
        st = json.loads(out)[0]["Status"]
    except (subprocess.SubprocessError, OSError, ValueError, LookupError):
        return None
    return {"revision": st["header"]["revision"], "db": st["dbSize"], "in_use": st.get("dbSizeInUse", 0)}


def wait_for_endpoint(log: Path, demo: subprocess.Popen, timeout: float = 120.0) -> str:
    """The etcd endpoint the demo prints once etcd is up."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        match = re.search(r"etcd up \([^)]*\): (\S+);", log.read_text(errors="replace"))
        if match:
            return match.group(1).split(",")[0]
        if demo.poll() is not None:
            raise SystemExit(f"demo exited with {demo.returncode}:\n{log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.2)
    raise SystemExit("demo did not print its etcd endpoint")


def verdict(samples: list[dict], slack: float) -> dict:
    """Growth of the db file after the first compaction (an in-use drop), and the figures."""
    first = next((i for i in range(1, len(samples)) if samples[i]["in_use"] < samples[i - 1]["in_use"]), None)
    result = {"samples": len(samples), "max_db_mib": max(s["db"] for s in samples) / MiB,
              "max_in_use_mib": max(s["in_use"] for s in samples) / MiB,
              "revisions": samples[-1]["revision"] - samples[0]["revision"],
              "seconds": samples[-1]["t"] - samples[0]["t"]}
    result["revisions_per_s"] = result["revisions"] / max(result["seconds"], 1e-9)
    if first is None:
        result.update(compacted=False, flat=None)
        return result
    after = samples[first:]
    growth = after[-1]["db"] - after[0]["db"]
    result.update(compacted=True, first_compaction_t=samples[first]["t"],
                  db_at_first_compaction_mib=after[0]["db"] / MiB, db_at_end_mib=after[-1]["db"] / MiB,
                  growth_after_first_compaction_mib=growth / MiB,
                  compactions_seen=sum(1 for i in range(1, len(samples))
                                       if samples[i]["in_use"] < samples[i - 1]["in_use"]),
                  flat=growth <= slack * after[0]["db"])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=600.0, help="demo seconds (default 600)")
    parser.add_argument("--rate", type=float, default=40.0, help="jobs/s (default 40)")
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between samples (default 10)")
    parser.add_argument("--retention", type=int, default=None, help="revisions etcd keeps (default: the demo's)")
    parser.add_argument("--slack", type=float, default=0.10,
                        help="allowed db growth after the first compaction, as a share (default 0.10)")
    parser.add_argument("--json", default=None, help="also write samples and verdict here")
    parser.add_argument("demo_args", nargs="*", help="more omega demo flags (after --)")
    args = parser.parse_args()

    run_dir = Path(tempfile.mkdtemp(prefix="bench-db-size-"))
    log = run_dir / "demo.out"
    command = [sys.executable, "-m", "tools.cli", "demo", "--no-monitor", "--duration", f"{args.duration:g}",
               "--rate", f"{args.rate:g}", "--run-dir", str(run_dir), *args.demo_args]
    if args.retention is not None:
        command += ["--etcd-compaction-retention", str(args.retention)]
    print(f"# {' '.join(command[1:])}\n# host: {platform.node()} {os.cpu_count()} cpus, {platform.platform()}",
          flush=True)
    with open(log, "w") as out:
        demo = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    samples: list[dict] = []
    try:
        endpoint = wait_for_endpoint(log, demo)
        start = time.monotonic()
        print(f"{'t s':>6} {'revision':>9} {'rev/s':>7} {'db MiB':>8} {'in use MiB':>10}", flush=True)
        while demo.poll() is None:
            st = status(endpoint)
            if st is not None:
                st["t"] = time.monotonic() - start
                rate = ((st["revision"] - samples[-1]["revision"]) / (st["t"] - samples[-1]["t"])
                        if samples else 0.0)
                samples.append(st)
                print(f"{st['t']:6.0f} {st['revision']:9d} {rate:7.0f} {st['db'] / MiB:8.1f} "
                      f"{st['in_use'] / MiB:10.1f}", flush=True)
            time.sleep(max(0.5, start + len(samples) * args.interval - time.monotonic()))
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGTERM)  # the demo's own group: it stops its children and etcd
        demo.wait()
    tail = log.read_text(errors="replace").splitlines()[-25:]
    print("\n".join(["# demo output (tail):"] + [f"#   {line}" for line in tail]))
    if len(samples) < 2:
        print("too few samples")
        return 1
    result = verdict(samples, args.slack)
    print("# " + json.dumps(result))
    if args.json:
        Path(args.json).write_text(json.dumps({"command": command[1:], "host": platform.node(),
                                               "cpus": os.cpu_count(), "verdict": result, "samples": samples},
                                              indent=1))
    return 0 if result.get("flat") else 1


if __name__ == "__main__":
    sys.exit(main())
