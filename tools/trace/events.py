"""Trace events: what happens to a cell over (trace) time, as frozen dataclasses.

Every event has ``t``, seconds since the trace window opened (non-decreasing in a file).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from cellstate.model import Job, Machine


class TaskEndStatus(StrEnum):
    FINISHED = "finished"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class MachineAdd:
    """A machine joins the cell (``t = 0``: it is there when the trace opens)."""

    t: float
    machine: Machine


@dataclass(frozen=True, slots=True)
class MachineRemove:
    """A machine leaves the cell in an orderly way."""

    t: float
    machine_id: str


@dataclass(frozen=True, slots=True)
class MachineFail:
    """A machine fails: its tasks are lost."""

    t: float
    machine_id: str


@dataclass(frozen=True, slots=True)
class JobSubmit:
    """A job is submitted; all its tasks become pending."""

    t: float
    job: Job


@dataclass(frozen=True, slots=True)
class TaskEnd:
    """Task ``task`` of job ``job_id`` ended in the recorded cell."""

    t: float
    job_id: str
    task: int
    status: TaskEndStatus


@dataclass(frozen=True, slots=True)
class TaskPlaced:
    """Task ``task`` of job ``job_id`` runs on ``machine_id`` in the recorded cell (format
    version 2). At ``t = 0`` it describes the state the trace opens with: a replay with
    ``initial_state="recorded"`` starts from it instead of scheduling the task again."""

    t: float
    job_id: str
    task: int
    machine_id: str


@dataclass(frozen=True, slots=True)
class JobKill:
    """The job's owner kills it: its remaining tasks stop."""

    t: float
    job_id: str


TraceEvent = MachineAdd | MachineRemove | MachineFail | JobSubmit | TaskEnd | TaskPlaced | JobKill

# The type tag of each event class in a trace file.
EVENT_TYPES: dict[type, str] = {
    MachineAdd: "machine_add",
    MachineRemove: "machine_remove",
    MachineFail: "machine_fail",
    JobSubmit: "job_submit",
    TaskEnd: "task_end",
    TaskPlaced: "task_placed",
    JobKill: "job_kill",
}
