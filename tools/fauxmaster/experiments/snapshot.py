"""The workload of a trace's cell at one instant (a *snapshot*, the input of cell compaction:
``tools.fauxmaster.experiments.compaction``): ``take_snapshot`` reads it from an omega trace
(optionally a seeded sample of its machines and tasks, the same fraction of each),
``write_snapshot`` stores it as an omega trace of its own (every ``machine_add`` and ``job_submit``
at t = 0; a job: its present tasks), ``read_snapshot`` reads that back."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import Any

from cellstate.model import Job, Machine
from tools.trace.events import JobKill, JobSubmit, MachineAdd, MachineFail, MachineRemove, TaskEnd
from tools.trace.format import TraceHeader, TraceWriter, read_trace

class CompactionError(ValueError):
    """Bad input to a compaction (a trace, an instant, a variant): one line naming it."""


class EmptySnapshot(CompactionError):
    """The trace holds no machine or no task at the instant (an input that cannot be compacted)."""


# ---------------------------------------------------------------- the snapshot

@dataclass
class Snapshot:
    """The workload in the cell at ``at``: machines, jobs (their present tasks) and counts of what
    the snapshot left out (``counts``, all shown)."""

    at: float
    machines: list[Machine]
    jobs: list[Job]
    counts: dict[str, Any] = field(default_factory=dict)

    @property
    def tasks(self) -> int:
        return sum(j.tasks for j in self.jobs)


def _kept(seed: int, key: str, share: float) -> bool:
    """Whether ``key`` is in the seeded sample of ``share`` (a stable hash: same on every host)."""
    if share >= 1:
        return True
    digest = hashlib.blake2b(f"{seed}/{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") < share * 2 ** 64


def trace_span(path) -> float:
    """The time of the trace's last event."""
    _, events = read_trace(path)
    last = 0.0
    with events:
        for event in events:
            last = event.t
    return last


def take_snapshot(path, at: float | None = None, sample: float = 1.0, sample_seed: int = 0) -> Snapshot:
    """The snapshot of the trace at ``path`` at ``at`` seconds (None: the middle of its span):
    events at times <= ``at`` are applied. ``sample`` < 1 keeps a seeded share of the machines and,
    independently, the same share of the tasks (per task, so a job keeps the share of its tasks)."""
    if not 0 < sample <= 1:
        raise CompactionError(f"--sample must be in (0, 1], got {sample!r}")
    span = trace_span(path)
    if at is None:
        at = span / 2
    if not 0 <= at <= span:
        raise CompactionError(f"--at {at:g} is outside the trace's span 0..{span:g} s")
    machines: dict[str, Machine] = {}
    jobs: dict[str, Job] = {}
    alive: dict[str, set[int]] = {}
    counts = {"events_applied": 0, "resubmitted_jobs": 0}
    _, events = read_trace(path)
    with events:
        for event in events:
            if event.t > at:
                break
            counts["events_applied"] += 1
            if isinstance(event, MachineAdd):
                machines[event.machine.id] = event.machine
            elif isinstance(event, (MachineRemove, MachineFail)):
                machines.pop(event.machine_id, None)
            elif isinstance(event, JobSubmit):
                counts["resubmitted_jobs"] += event.job.id in jobs
                jobs[event.job.id] = event.job
                alive[event.job.id] = set(range(event.job.tasks))
            elif isinstance(event, TaskEnd):
                alive.get(event.job_id, set()).discard(event.task)
            elif isinstance(event, JobKill):
                alive.pop(event.job_id, None)
    up = [m for m in machines.values() if m.state.value == "up"]
    kept_machines = [m for m in up if _kept(sample_seed, "m/" + m.id, sample)]
    out_jobs = []
    present = 0
    for job_id, tasks in alive.items():
        present += len(tasks)
        n = sum(1 for t in tasks if _kept(sample_seed, f"t/{job_id}/{t}", sample))
        if n:
            out_jobs.append(replace(jobs[job_id], tasks=n, duration_s=None))
    counts.update({"machines_up": len(up), "machines_not_up": len(machines) - len(up),
                   "machines": len(kept_machines), "tasks_present": present,
                   "tasks": sum(j.tasks for j in out_jobs), "jobs": len(out_jobs)})
    if not kept_machines or not out_jobs:
        raise EmptySnapshot(f"the snapshot at {at:g} s holds {len(kept_machines)} machines and "
                              f"{counts['tasks']} tasks (sample {sample:g}): nothing to compact")
    return Snapshot(at, kept_machines, out_jobs, counts)


def write_snapshot(snapshot: Snapshot, path, source: str) -> None:
    """The snapshot as an omega trace: its machines and jobs, all at t = 0 (atomic write)."""
    header = TraceHeader(
        source=f"compaction snapshot of {source} at {snapshot.at:g} s", created_at="1970-01-01T00:00:00+00:00",
        capacity_model="the machines up at the instant, as the source trace has them",
        notes=json.dumps(snapshot.counts, sort_keys=True))
    with TraceWriter(path, header, atomic=True) as writer:
        for machine in snapshot.machines:
            writer.write(MachineAdd(0.0, machine))
        for job in snapshot.jobs:
            writer.write(JobSubmit(0.0, job))


def read_snapshot(path) -> tuple[list[Machine], list[Job]]:
    """The machines and jobs of a snapshot trace (``write_snapshot``)."""
    machines, jobs = [], []
    _, events = read_trace(path)
    with events:
        for event in events:
            if isinstance(event, MachineAdd):
                machines.append(event.machine)
            elif isinstance(event, JobSubmit):
                jobs.append(event.job)
    return machines, jobs
