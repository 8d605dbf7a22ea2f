"""Hand-built traces for the fauxmaster tests, written with the real TraceWriter."""

from __future__ import annotations

from cellstate.model import Job, JobKind, Machine
from cellstate.resources import Resources
from tools.trace.events import JobKill, JobSubmit, MachineAdd, MachineFail, TaskEnd, TaskEndStatus
from tools.trace.format import TraceHeader, TraceWriter

HEADER = TraceHeader("hand-built test trace", "2024-01-01T00:00:00Z", "4 cores, 8 GiB per machine")


def machine(i: int, cpu: int = 4000) -> Machine:
    return Machine(f"m{i}", Resources(cpu, 8192, 10_000))


def batch(job_id: str, tasks: int, cpu: int = 1000, duration: float | None = None) -> Job:
    return Job(job_id, JobKind.BATCH, tasks, Resources(cpu, 512), duration_s=duration)


def write(path, events) -> str:
    with TraceWriter(path, HEADER) as writer:
        for event in events:
            writer.write(event)
    return str(path)


def small_cell_trace(path, machines: int = 4, jobs: int = 20, tasks: int = 2, every: float = 0.25,
                     duration: float | None = None) -> str:
    """``machines`` machines at t=0, then a batch job of ``tasks`` tasks every ``every`` s."""
    events = [MachineAdd(0.0, machine(i)) for i in range(machines)]
    events += [JobSubmit(j * every, batch(f"j{j}", tasks, duration=duration)) for j in range(jobs)]
    return write(path, events)


def mixed_trace(path) -> str:
    """Batch and service jobs, a recorded task end, a kill and a machine failure."""
    events = [MachineAdd(0.0, machine(i)) for i in range(6)]
    events += [JobSubmit(j * 0.5, batch(f"b{j}", 3, duration=4.0)) for j in range(12)]
    events.insert(9, JobSubmit(1.0, Job("svc", JobKind.SERVICE, 3, Resources(500, 256))))
    events += [TaskEnd(8.0, "svc", 0, TaskEndStatus.FINISHED), MachineFail(9.0, "m0"),
               JobKill(12.0, "svc"), JobSubmit(13.0, batch("late", 2, duration=2.0))]
    return write(path, events)
