"""Every job's start: an EASY replay against the independent reference (bench/swf_easy_reference.py).

``python bench/easy_agreement.py [LOG] [--until S]`` imports the SWF log (default: the vendored KTH
SP2 log), replays it with one ``easy`` scheduler deciding in no time (t_job = t_task = 0, 256 ops
per txn, so a 100-processor job is one txn), reads each job's start (its record's ``placed_at``)
and prints how many differ from the reference's (more than 1e-6 s, or started by one only).
``--starts FILE`` keeps the replay's starts (written after a replay, read instead of one when it
exists), to compare them with another version of the reference.
"""

from __future__ import annotations

import argparse
import json
import importlib.util
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cellstate.codec.job import decode_job_record  # noqa: E402
from tools.fauxmaster.replay import ReplayConfig, replay  # noqa: E402
from tools.trace.swf import import_swf  # noqa: E402


def reference():
    """The reference module, loaded from its file (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location("swf_easy_reference", ROOT / "bench" / "swf_easy_reference.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def replay_starts(log: str, until: float | None) -> tuple[dict[str, float], int]:
    """The replay's start of each placed job, and the jobs it submitted."""
    out = Path(tempfile.mkdtemp(prefix="omega-easy-agree-")) / "log.omt"
    import_swf(log, out, skip_bad=True)
    result = replay(out, ReplayConfig(schedulers=[{"name": "easy", "kind": "easy", "t_job": 0.0, "t_task": 0.0}],
                                      until=until, check=False, max_txn_ops=256, sample_every_s=3600.0))
    starts = {}
    for kv in result.store.range(result.keys.kind_prefix("jobs")).kvs:
        record = decode_job_record(kv.key, kv.value)
        if record.placed_at is not None:
            starts[record.job.id] = record.placed_at
    return starts, result.jobs_submitted


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("log", nargs="?", default=str(ROOT / "tests/data/traces/swf/KTH-SP2-1996-2.1-cln.swf.gz"))
    parser.add_argument("--until", type=float, default=None, help="virtual seconds to replay (default: all)")
    parser.add_argument("--starts", default=None, help="a JSON file of the replay's starts: read it when it "
                        "exists (no replay), else write it after the replay")
    args = parser.parse_args()
    ref = reference()
    jobs, nodes = ref.read_swf(args.log)
    expected = ref.easy_starts(jobs, nodes)
    started = time.perf_counter()
    if args.starts and Path(args.starts).exists():
        saved = json.loads(Path(args.starts).read_text())
        starts, submitted = saved["starts"], saved["submitted"]
    else:
        starts, submitted = replay_starts(args.log, args.until)
        if args.starts:
            Path(args.starts).write_text(json.dumps({"starts": starts, "submitted": submitted}))
    wall = time.perf_counter() - started
    ids = [j.id for j in jobs if args.until is None or j.submit <= args.until]
    ids = [i for i in ids if i in starts or (i in expected and (args.until is None or expected[i] <= args.until))]
    differ = [i for i in ids if i not in starts or i not in expected or abs(starts[i] - expected[i]) > 1e-6]
    print(f"{args.log}: {nodes} processors, {len(ids):,} starts compared (replay submitted {submitted:,} jobs, "
          f"{wall:.1f} s wall): {len(differ):,} differ from the reference")
    for i in differ[:5]:
        print(f"  {i}: replay {starts.get(i)}, reference {expected.get(i)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
