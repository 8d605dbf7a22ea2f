"""Preemption in the Google-2011 truth, per part (issue 30, part 2's delay p90; docs/EXPERIMENTS.md,
"Calibrate, then validate").

Reads task_events parts (in order, as the importer would) and, for each task submitted after
t = 0 (time = timestamp / 1e6 - 600 s, as the importer), its own SUBMIT -> first SCHEDULE of that
attempt (the truth's delay, docs/TRACE_FORMAT.md). Per part window (a part's tasks: submitted after
the previous part's last row, up to its own last row) it prints:

- placed by preemption: the SCHEDULE follows an EVICT row on the same machine within ``--gap`` s
  (default 1) — the real cell freed room by evicting; count, share and delay p50;
- resubmits of evicted tasks: the task's previous row was its EVICT; count, share and delay p50;
- the rest's delay p50 / p90, and every placed task's p50 / p90 (nearest rank, as the fidelity);
- large batches (``--large`` tasks or more of one job submitted in one second): per-task time =
  (last SCHEDULE - first SUBMIT) / tasks, the median over those placed mostly without a preemption
  and the list of those placed mostly by one.

Nothing here is fitted: it reads the rows. A missing or malformed file is a one-line error (exit 65).
"""

from __future__ import annotations

import argparse
import bisect
import csv
import gzip
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from omega.stats import percentile  # noqa: E402
from tools.trace.google2011.schema import EVICT, SCHEDULE, SUBMIT  # noqa: E402

WINDOW_START_S = 600.0  # the importer's t = 0


class RowError(ValueError):
    """A task_events file that cannot be read (names the file and line)."""


def read_rows(paths: list[str]) -> tuple[list[tuple[float, int, int, str, int]], list[float]]:
    """Rows (t, job, task, machine, event) of ``paths`` in order, and each part's last row time."""
    rows: list[tuple[float, int, int, str, int]] = []
    ends: list[float] = []
    for path in paths:
        try:
            with gzip.open(path, "rt", newline="") if path.endswith(".gz") else open(path, newline="") as f:
                for number, row in enumerate(csv.reader(f), 1):
                    try:
                        us, job, task, event = int(row[0]), int(row[2]), int(row[3]), int(row[5])
                    except (IndexError, ValueError):
                        raise RowError(f"{path}:{number}: not a task_events row "
                                       "(timestamp, missing, job, task, machine, event, …)") from None
                    rows.append((max(0.0, us / 1e6 - WINDOW_START_S) if us else 0.0, job, task, row[4], event))
        except OSError as exc:
            raise RowError(f"{path}: {exc.strerror or exc}") from None
        except (EOFError, gzip.BadGzipFile) as exc:
            raise RowError(f"{path}: not a readable gzip file ({exc})") from None
        if rows:
            ends.append(rows[-1][0] if not ends else max(rows[-1][0], ends[-1]))
    rows.sort(key=lambda r: r[0])  # stable: the trace's order within a timestamp
    return rows, ends


def placements(rows, gap: float) -> list[tuple[float, float, int, bool, bool]]:
    """(submit t, delay, job, placed by preemption, resubmit of an evicted task) per task submitted
    after t = 0 and scheduled."""
    evictions: dict[str, list[float]] = defaultdict(list)
    for t, _job, _task, machine, event in rows:
        if event == EVICT and t > 0:
            evictions[machine].append(t)
    pending: dict[tuple[int, int], tuple[float, bool]] = {}
    last: dict[tuple[int, int], int] = {}
    out = []
    for t, job, task, machine, event in rows:
        key = (job, task)
        if event == SUBMIT:
            pending[key] = (t, last.get(key) == EVICT)
        elif event == SCHEDULE and key in pending:
            submitted, resubmit = pending.pop(key)
            if submitted > 0:
                times = evictions.get(machine, ())
                i = bisect.bisect_right(times, t)
                out.append((submitted, t - submitted, job, bool(i and t - times[i - 1] <= gap), resubmit))
        last[key] = event
    return out


def report(placed, ends: list[float], large: int) -> list[str]:
    """The per-part lines (module docstring)."""
    lines = []
    start = 0.0
    for part, end in enumerate(ends):
        xs = [p for p in placed if (start <= p[0] <= end if part == 0 else start < p[0] <= end)]
        start = end
        if not xs:
            lines.append(f"part {part}: no task submitted after t = 0 was placed")
            continue
        pre = sorted(p[1] for p in xs if p[3])
        res = sorted(p[1] for p in xs if p[4])
        rest = sorted(p[1] for p in xs if not (p[3] or p[4]))
        every = sorted(p[1] for p in xs)
        n = len(xs)
        lines.append(
            f"part {part} ({xs[0][0]:,.0f}..{end:,.0f} s): {n:,} placed; by preemption {len(pre):,} "
            f"({100 * len(pre) / n:.1f} %, p50 {percentile(pre, 50):.1f} s); resubmits of evicted tasks "
            f"{len(res):,} ({100 * len(res) / n:.1f} %, p50 {percentile(res, 50):.1f} s); the rest p50 "
            f"{percentile(rest, 50):.2f} p90 {percentile(rest, 90):.2f} s; all p50 {percentile(every, 50):.2f} "
            f"p90 {percentile(every, 90):.2f} s")
        batches: dict[tuple[int, int], list] = defaultdict(list)
        for p in xs:
            batches[(p[2], int(p[0]))].append(p)
        free, preempting = [], []
        for (job, _), ps in sorted(batches.items(), key=lambda kv: min(p[0] for p in kv[1])):
            if len(ps) < large:
                continue
            first = min(p[0] for p in ps)
            per_task_ms = (max(p[0] + p[1] for p in ps) - first) / len(ps) * 1000
            if 2 * sum(p[3] for p in ps) > len(ps):
                preempting.append(f"{job} ({len(ps):,} tasks at {first:,.0f} s, {per_task_ms:.1f} ms/task, "
                                  f"delay p50 {percentile(sorted(p[1] for p in ps), 50):.1f} s)")
            else:
                free.append(per_task_ms)
        lines.append(f"  batches of >= {large} tasks: {len(free)} placed mostly without preemption, per-task "
                     f"median {percentile(sorted(free), 50):.1f} ms; {len(preempting)} mostly by preemption"
                     + (": " + "; ".join(preempting) if preempting else ""))
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task_events", nargs="+", help="Google-2011 task_events parts, in order (.csv or .csv.gz)")
    parser.add_argument("--gap", type=float, default=1.0, help="s from an EVICT to a SCHEDULE on that machine "
                        "that counts as a placement by preemption (default 1)")
    parser.add_argument("--large", type=int, default=300, help="tasks of a large batch (default 300)")
    args = parser.parse_args()
    if not args.gap >= 0 or args.large < 1:
        parser.error("--gap must be >= 0 and --large >= 1")
    try:
        rows, ends = read_rows(args.task_events)
    except RowError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 65
    print("\n".join(report(placements(rows, args.gap), ends, args.large)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
