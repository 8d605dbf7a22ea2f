"""The Google-2011 part-0 initial state for the Borg benchmark, and a fast in-memory view.

Initial state: every task with a row at timestamp 0 in task_events part 0 (the tasks
present when the trace window opened, scheduled or pending), grouped per Google job:
tasks = its task indices present, request = the per-resource maximum of their SUBMIT
requests (scaled and rounded as ``tools.trace.google2011.schema.scaled_request``; rows without
requests take the minimum), priority = the maximum, kind = service for priority >= 9,
different_machine from the trace's restriction column. Machines: every machine id seen in
the part file, with capacities from ``tools.trace.google2011.cell.CapacityModel`` (the README's
published 2011 mix, drawn per machine id by a seeded hash).
"""

from __future__ import annotations

import csv
import gzip
from collections import defaultdict
from typing import Iterable

from cellstate.model import Alloc, Job, JobKind, JobRecord, Machine, TaskState
from cellstate.plan import JobEntry, MachineEntry
from tools.trace.google2011.cell import CapacityModel
from tools.trace.google2011.schema import (
    CPU, DIFFERENT, DISK, JOB, MACHINE, MEMORY, PRIORITY, PRODUCTION_PRIORITY, TASK, TS, scaled_request,
)


def load_initial_state(path: str, capacity: CapacityModel) -> tuple[list[Machine], list[Job]]:
    """(machines, jobs) of the trace's initial state (see the module docstring)."""
    machine_ids: set[str] = set()
    rows_of: dict[str, dict[str, list[str]]] = defaultdict(dict)
    with gzip.open(path, "rt", newline="") as f:
        for row in csv.reader(f):
            if row[MACHINE]:
                machine_ids.add(row[MACHINE])
            if row[TS] == "0" and row[TASK] not in rows_of[row[JOB]]:
                rows_of[row[JOB]][row[TASK]] = row
    machines = [Machine(id=f"m{mid}", capacity=capacity.capacity(mid), rack=f"r{int(mid) % 400}")
                for mid in sorted(machine_ids, key=int)]
    jobs = [_job(job, list(rows.values())) for job, rows in rows_of.items() if rows]
    return machines, jobs


def _job(job: str, rows: list[list[str]]) -> Job:
    known = [r for r in rows if r[CPU] and r[MEMORY] and r[DISK]]
    request = scaled_request(max((float(r[CPU]) for r in known), default=0.0),
                             max((float(r[MEMORY]) for r in known), default=0.0),
                             max((float(r[DISK]) for r in known), default=0.0))
    priority = max(int(r[PRIORITY]) for r in rows)
    return Job(id=f"g{job}", kind=JobKind.SERVICE if priority >= PRODUCTION_PRIORITY else JobKind.BATCH,
               tasks=len(rows), request=request, priority=priority,
               different_machine=any(r[DIFFERENT] == "1" for r in rows))


class MemoryCellView:
    """A replica-like CellView over dicts; ``commit`` applies a decision as a successful
    transaction would (ledgers, allocations, task states, evictions; revisions bumped)."""

    def __init__(self, machines: Iterable[Machine], jobs: Iterable[Job]) -> None:
        self.revision = 1
        self._machines = {m.id: MachineEntry(m, 1) for m in machines}
        self._jobs = {j.id: JobEntry(JobRecord.new(j, 0.0), 1) for j in jobs}
        self._on: dict[str, dict[tuple[str, int], Alloc]] = defaultdict(dict)
        self._of: dict[str, dict[int, Alloc]] = defaultdict(dict)

    def machines(self):
        return self._machines.values()

    def machine(self, machine_id):
        return self._machines.get(machine_id)

    def machine_count(self):
        return len(self._machines)

    def job(self, job_id):
        return self._jobs.get(job_id)

    def pending_jobs(self, kind=None):
        return [e for e in self._jobs.values() if e.record.pending_tasks() and (kind is None or e.record.job.kind is kind)]

    def allocs_on(self, machine_id):
        return self._on.get(machine_id, {}).values()

    def allocs_of(self, job_id):
        return self._of.get(job_id, {}).values()

    def commit(self, job_id: str, claims) -> None:
        self.revision += 1
        rev = self.revision
        entry = self._jobs[job_id]
        spec = entry.record.job
        for claim in claims:
            for victim, task in claim.evicts:
                self._evict(victim, task, rev)
            m = self._machines[claim.machine_id].machine.with_claim(claim.request)
            self._machines[m.id] = MachineEntry(m, rev)
            alloc = Alloc(job_id, claim.task_index, m.id, claim.request, spec.priority)
            self._on[m.id][job_id, claim.task_index] = alloc
            self._of[job_id][claim.task_index] = alloc
        if claims:
            record = entry.record.with_tasks([c.task_index for c in claims], TaskState.PLACED)
            self._jobs[job_id] = JobEntry(record, rev)

    def _evict(self, job_id: str, task: int, rev: int) -> None:
        alloc = self._of[job_id].pop(task)
        del self._on[alloc.machine_id][job_id, task]
        m = self._machines[alloc.machine_id].machine.with_release(alloc.resources)
        self._machines[m.id] = MachineEntry(m, rev)
        record = self._jobs[job_id].record.with_tasks([task], TaskState.PENDING)
        self._jobs[job_id] = JobEntry(record, rev)


def packing(view: MemoryCellView, exhausted: float = 0.02) -> dict[str, float]:
    """Machines used, and stranded resources: free cpu on machines whose memory is exhausted
    (free <= ``exhausted`` of capacity) and free memory on machines whose cpu is, as % of
    the cell's capacity of that resource."""
    used = cpu_total = mem_total = stranded_cpu = stranded_mem = 0
    for entry in view.machines():
        m = entry.machine
        cap, free = m.capacity, m.free
        cpu_total += cap.cpu
        mem_total += cap.memory
        used += m.task_count > 0
        if free.memory <= exhausted * cap.memory:
            stranded_cpu += free.cpu
        if free.cpu <= exhausted * cap.cpu:
            stranded_mem += free.memory
    return {"machines_used": used, "stranded_cpu_pct": 100 * stranded_cpu / cpu_total,
            "stranded_memory_pct": 100 * stranded_mem / mem_total}
