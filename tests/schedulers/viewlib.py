"""Test-only: a tiny in-memory CellView over dicts, builders for machines and jobs, and the
clock and stats sink a ``SchedulerProcess`` round needs.

Import from tests in this folder as ``from viewlib import DictView, machine, job``.
"""

from __future__ import annotations

from typing import Iterable

from cellstate.model import Alloc, Constraint, Job, JobKind, JobRecord, Machine, MachineState, TaskState
from cellstate.resources import Resources
from cellstate.plan import JobEntry, MachineEntry


def machine(mid: str, zone: str = "z1", cpu: int = 4000, memory: int = 8192, disk: int = 0,
            state: MachineState = MachineState.UP, rack: str = "", platform: str = "",
            labels: tuple[tuple[str, str], ...] = (), allocated: Resources | None = None) -> Machine:
    return Machine(id=mid, capacity=Resources.of(cpu, memory, disk), zone=zone, rack=rack,
                   platform=platform, labels=labels, state=state,
                   allocated=allocated or Resources())


def job(jid: str = "j1", tasks: int = 1, cpu: int = 100, memory: int = 128,
        kind: JobKind = JobKind.BATCH, constraints: tuple[Constraint, ...] = (), **kw) -> Job:
    return Job(id=jid, kind=kind, tasks=tasks, request=Resources.of(cpu, memory), constraints=constraints, **kw)


class DictView:
    """A read-only CellView over dicts; ``add_*``/``place`` mutate it as a replica would."""

    def __init__(self, machines: Iterable[Machine] = (), jobs: Iterable[Job] = ()) -> None:
        self._revision = 1
        self._machines: dict[str, MachineEntry] = {}
        self._jobs: dict[str, JobEntry] = {}
        self._allocs: dict[str, dict[int, Alloc]] = {}
        for m in machines:
            self.add_machine(m)
        for j in jobs:
            self.add_job(j)

    def _bump(self) -> int:
        self._revision += 1
        return self._revision

    def add_machine(self, m: Machine) -> MachineEntry:
        entry = self._machines[m.id] = MachineEntry(m, self._bump())
        return entry

    def add_job(self, j: Job) -> JobEntry:
        entry = self._jobs[j.id] = JobEntry(JobRecord.new(j, 0.0), self._bump())
        return entry

    def place(self, job_id: str, task: int, machine_id: str) -> None:
        """Record an existing allocation: ledger charged, task state 'a'."""
        entry = self._jobs[job_id]
        request = entry.record.job.request
        m = self._machines[machine_id].machine.with_claim(request)
        self._machines[machine_id] = MachineEntry(m, self._bump())
        self._jobs[job_id] = JobEntry(entry.record.with_tasks([task], TaskState.PLACED), self._bump())
        self._allocs.setdefault(job_id, {})[task] = Alloc(job_id, task, machine_id, request)

    @property
    def revision(self) -> int:
        return self._revision

    def machines(self) -> Iterable[MachineEntry]:
        return iter(self._machines.values())

    def machine(self, machine_id: str) -> MachineEntry | None:
        return self._machines.get(machine_id)

    def machine_count(self) -> int:
        return len(self._machines)

    def job(self, job_id: str) -> JobEntry | None:
        return self._jobs.get(job_id)

    def pending_jobs(self, kind: JobKind | None = None) -> list[JobEntry]:
        return [e for e in self._jobs.values()
                if e.record.pending_tasks() and (kind is None or e.record.job.kind is kind)]

    def allocs_on(self, machine_id: str) -> Iterable[Alloc]:
        return [a for allocs in self._allocs.values() for a in allocs.values() if a.machine_id == machine_id]

    def allocs_of(self, job_id: str) -> Iterable[Alloc]:
        return list(self._allocs.get(job_id, {}).values())


class FixedClock:
    """A clock that stays at ``t``; ``sleep`` returns at once."""

    def __init__(self, t: float):
        self.t = t

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        pass


class NullSink:
    """A stats sink that drops what it is given."""

    def publish(self, stats) -> None:
        pass

    def close(self) -> None:
        pass
