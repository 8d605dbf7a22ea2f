"""An independent EASY simulation of an SWF log (processor counts only), to cross-check the replay.

Not omega code: a plain event loop over the log's jobs on ``nodes`` processors (the papers'
model: Lifka 1995; Mu'alem & Feitelson 2001). Jobs are queued by submission; at each instant
(after every end and submission at that time) the queue's front starts while it fits, the first
that does not is the head, reserved at the shadow time (running jobs' start + requested time,
or now when past; the extra processors count every job ending by then, all of those ending at the
shadow time itself), and later jobs that fit start if they end by the shadow time or fit in the
extra processors. A job runs its logged run time; the requested time -1 falls back to it, as the
importer does. ``python bench/swf_easy_reference.py LOG [NODES]`` prints the wait percentiles
beside the logged ones (NODES default: the header's MaxNodes, else MaxProcs), and what the log's
own schedule says of its waiting jobs (``log_queue``).
"""

from __future__ import annotations

import bisect
import gzip
import heapq
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class RefJob:
    id: str
    submit: float
    run: float
    procs: int
    requested: float
    logged_wait: float | None


def read_swf(path: str) -> tuple[list[RefJob], int | None]:
    """The usable jobs of an SWF log (as ``omega import swf`` keeps them) and its node count."""
    jobs, nodes = [], None
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        for line in f:
            if line.startswith(";"):
                for name in ("MaxNodes", "MaxProcs"):
                    if line[1:].strip().startswith(name + ":") and nodes is None:
                        nodes = int(line.split(":", 1)[1])
                continue
            if not line.strip():
                continue
            v = [float(x) for x in line.split()]
            procs = v[7] if v[7] != -1 else v[4]
            run = v[3] if v[3] != -1 else v[8]
            if v[1] == -1 or procs == -1 or run == -1:
                continue
            jobs.append(RefJob(f"j{int(v[0])}", v[1], run, int(procs), v[8] if v[8] != -1 else run,
                               v[2] if v[2] >= 0 else None))
    return jobs, nodes


def easy_starts(jobs: list[RefJob], nodes: int) -> dict[str, float]:
    """Each job's start under EASY on ``nodes`` processors (a job wider than that never starts:
    it heads the queue with no reservation, so every later job that fits starts)."""
    free, queue, starts = nodes, [], {}
    running: dict[str, tuple[float, int]] = {}  # id -> (start + requested, procs)
    events = [(job.submit, 1, n) for n, job in enumerate(jobs)]  # (time, 0 end / 1 submit, index)
    heapq.heapify(events)

    def start(n: int, now: float) -> None:
        nonlocal free
        job = jobs[n]
        free -= job.procs
        starts[job.id] = now
        running[job.id] = (now + job.requested, job.procs)
        heapq.heappush(events, (now + job.run, 0, n))

    while events:
        now, kind, n = heapq.heappop(events)
        if kind == 0:
            free += jobs[n].procs
            del running[jobs[n].id]
        else:
            queue.append(n)
        if events and events[0][0] == now:
            continue  # everything at this instant first
        while queue and jobs[queue[0]].procs <= free:
            start(queue.pop(0), now)
        if not queue:
            continue
        need, avail, shadow = jobs[queue[0]].procs, free, None
        for end, procs in sorted((max(e, now), p) for e, p in running.values()):
            if shadow is not None and end > shadow:
                break
            avail += procs  # every job ending at the shadow time frees its processors by then
            if shadow is None and avail >= need:
                shadow = end
        extra = avail - need if shadow is not None else 0
        for n in list(queue[1:]):
            job = jobs[n]
            if job.procs > free:
                continue
            if shadow is None or now + job.requested <= shadow:
                queue.remove(n)
                start(n, now)
            elif job.procs <= extra:
                extra -= job.procs
                queue.remove(n)
                start(n, now)
    return starts


def log_queue(jobs: list[RefJob], nodes: int, wait_at_least: float) -> tuple[int, int, int]:
    """In the log's own schedule (start = submit + logged wait): the jobs that waited at least
    ``wait_at_least``, how many of them had their processors free at submission, and how many of
    those had an earlier-submitted job not yet started then."""
    logged = [j for j in jobs if j.logged_wait is not None]
    changes = sorted([(j.submit + j.logged_wait, j.procs) for j in logged] +
                     [(j.submit + j.logged_wait + j.run, -j.procs) for j in logged])
    times, busy, level = [], [], 0
    for t, d in changes:
        level += d
        times.append(t)
        busy.append(level)
    waited = free = queued = 0
    latest_start = -1.0  # the latest start among the jobs submitted before (the log is in submit order)
    for j in logged:
        if j.logged_wait >= wait_at_least:
            waited += 1
            i = bisect.bisect_right(times, j.submit) - 1
            if nodes - (busy[i] if i >= 0 else 0) >= j.procs:
                free += 1
                queued += latest_start > j.submit
        latest_start = max(latest_start, j.submit + j.logged_wait)
    return waited, free, queued


def _pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[max(0, -(-len(values) * p // 100) - 1)] if values else float("nan")  # nearest rank


def main() -> int:
    jobs, header_nodes = read_swf(sys.argv[1])
    nodes = int(sys.argv[2]) if len(sys.argv) > 2 else header_nodes
    starts = easy_starts(jobs, nodes)
    waits = [starts[j.id] - j.submit for j in jobs if j.id in starts]
    logged = [j.logged_wait for j in jobs if j.logged_wait is not None]
    print(f"{len(jobs):,} jobs on {nodes} processors ({len(jobs) - len(waits):,} never start: wider than "
          f"that): EASY wait p50 {_pct(waits, 50):,.1f} s, "
          f"p90 {_pct(waits, 90):,.1f} s, p99 {_pct(waits, 99):,.1f} s; logged p50 {_pct(logged, 50):,.1f} s, "
          f"p90 {_pct(logged, 90):,.1f} s, p99 {_pct(logged, 99):,.1f} s")
    p50 = _pct(logged, 50)
    waited, free, queued = log_queue(jobs, nodes, p50)
    print(f"the log's own schedule: {waited:,} jobs waited >= {p50:,.0f} s; {free:,} of them had their "
          f"processors free at submission, {queued:,} of those with an earlier job not yet started; "
          f"{sum(w % 60 == 0 for w in logged) / len(logged):.1%} of the logged waits are whole minutes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
