"""The cell's data model: machines (with their ledgers), jobs, allocations.

Values here are plain frozen dataclasses; ``cellstate.codec.records`` turns them into
schema-versioned msgpack and back, validating on the way in.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from itertools import compress
from typing import Iterable, Sequence

from cellstate.fastbuild import builder
from cellstate.resources import ZERO, Resources


class MachineState(StrEnum):
    UP = "up"
    DRAINING = "draining"
    DOWN = "down"


class JobKind(StrEnum):
    BATCH = "batch"
    SERVICE = "service"


class JobState(StrEnum):
    PENDING = "pending"
    PARTLY_PLACED = "partly-placed"
    PLACED = "placed"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    KILLED = "killed"


class TaskState(StrEnum):
    """One character per task inside ``JobRecord.tasks``."""

    PENDING = "p"
    PLACED = "a"
    RUNNING = "r"
    FINISHED = "f"
    FAILED = "x"
    KILLED = "k"


class ConstraintOp(StrEnum):
    EQ = "eq"
    IN = "in"
    NOT_IN = "not-in"
    EXISTS = "exists"


TERMINAL_TASK_STATES = frozenset({TaskState.FINISHED, TaskState.FAILED, TaskState.KILLED})
LIVE_TASK_STATES = frozenset({TaskState.PLACED, TaskState.RUNNING})


@dataclass(frozen=True, slots=True)
class Constraint:
    """A condition on a machine attribute (``zone``, ``rack``, ``platform`` or a label)."""

    attribute: str
    op: ConstraintOp
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Machine:
    """A machine and its ledger: what it has and the sum of what is allocated on it."""

    id: str
    capacity: Resources
    zone: str = ""
    rack: str = ""
    platform: str = ""
    packages: frozenset[str] = frozenset()
    labels: tuple[tuple[str, str], ...] = ()
    state: MachineState = MachineState.UP
    allocated: Resources = ZERO
    task_count: int = 0
    writer: str = ""  # who last changed the ledger (scheduler or agent name): tells a loser who won

    @property
    def free(self) -> Resources:
        """Capacity minus allocated."""
        capacity, allocated = self.capacity, self.allocated
        if capacity.extra or allocated.extra:
            return capacity - allocated
        # core-only (the usual case): Resources.__sub__ without __init__'s cost
        return _RESOURCES(capacity.cpu - allocated.cpu, capacity.memory - allocated.memory,
                          capacity.disk - allocated.disk, ())

    def attribute(self, name: str) -> str | None:
        """Value of a named attribute or label (None when absent or empty)."""
        if name in ("zone", "rack", "platform"):
            return getattr(self, name) or None
        for key, value in self.labels:
            if key == name:
                return value
        return None

    def with_claim(self, request: Resources, tasks: int = 1) -> Machine:
        """This machine with ``tasks`` more tasks charged to its ledger."""
        return self.with_ledger(self.allocated + request, self.task_count + tasks)

    def with_release(self, request: Resources, tasks: int = 1) -> Machine:
        """This machine with ``tasks`` tasks removed from its ledger."""
        return self.with_ledger(self.allocated - request, self.task_count - tasks)

    def with_ledger(self, allocated: Resources, task_count: int, writer: str | None = None) -> Machine:
        """``replace(self, allocated=…, task_count=…[, writer=…])`` (the writer kept when None),
        built without ``__init__``."""
        writer = self.writer if writer is None else writer
        if type(self) is not Machine:
            return replace(self, allocated=allocated, task_count=task_count, writer=writer)
        return _MACHINE(self.id, self.capacity, self.zone, self.rack, self.platform, self.packages, self.labels,
                        self.state, allocated, task_count, writer)


@dataclass(frozen=True, slots=True)
class Job:
    """A job specification: ``tasks`` identical tasks, each asking for ``request``."""

    id: str
    kind: JobKind
    tasks: int
    request: Resources
    priority: int = 0
    owner: str = ""
    constraints: tuple[Constraint, ...] = ()
    duration_s: float | None = None
    gang: bool = False
    package: str = ""
    different_machine: bool = False
    max_per_machine: int = 0
    scheduler: str = ""
    """The scheduler class that serves the job (as Kubernetes' ``schedulerName``); empty: the
    class named like its kind (``scheduler_class``)."""
    estimate_s: float | None = None
    """The run time the job's owner asked for (an upper bound a backfilling scheduler plans
    with, as SWF's requested time); None: not given. Nothing ends a task at it."""

    @property
    def scheduler_class(self) -> str:
        """The class of scheduler that serves this job: ``scheduler``, else its kind's name."""
        return self.scheduler or self.kind._value_


@dataclass(frozen=True, slots=True)
class JobRecord:
    """A job as stored: its spec, one TaskState character per task, and bookkeeping."""

    job: Job
    tasks: str
    submitted_at: float = 0.0
    reason: str = ""
    killed: bool = False
    first_attempt_at: float | None = None
    placed_at: float | None = None

    @staticmethod
    def new(job: Job, submitted_at: float) -> JobRecord:
        """A freshly submitted job: every task pending."""
        return JobRecord(job=job, tasks=TaskState.PENDING * job.tasks, submitted_at=submitted_at)

    @property
    def id(self) -> str:
        return self.job.id

    def task_state(self, index: int) -> TaskState:
        return TaskState(self.tasks[index])

    def pending_tasks(self) -> list[int]:
        """Indices of tasks waiting to be placed, in order."""
        return [] if self.killed else pending_indices(self.tasks)

    def count(self, state: TaskState) -> int:
        return self.tasks.count(state.value)

    @property
    def state(self) -> JobState:
        """Lifecycle state derived from the task states."""
        return derive_job_state(self.tasks, self.killed)

    def with_tasks(self, indices: Sequence[int], state: TaskState) -> JobRecord:
        """This record with the given tasks set to ``state``."""
        return self.with_progress(with_states(self.tasks, indices, state.value), self.reason,
                                  self.first_attempt_at, self.placed_at)

    def with_progress(self, tasks: str, reason: str, first_attempt_at: float | None,
                      placed_at: float | None) -> JobRecord:
        """``replace(self, tasks=…, reason=…, first_attempt_at=…, placed_at=…)``, the fields
        placements and task ends change, built without ``__init__`` (every write derives one)."""
        if type(self) is not JobRecord:
            return replace(self, tasks=tasks, reason=reason, first_attempt_at=first_attempt_at, placed_at=placed_at)
        return _JOB_RECORD(self.job, tasks, self.submitted_at, reason, self.killed, first_attempt_at, placed_at)

    def with_allocs(self, allocs: Iterable[Alloc]) -> JobRecord:
        """The effective record: this stored record with ``allocs`` (allocations of its tasks
        that exist in the store) applied by ``effective_tasks``' rule; ``self`` when nothing
        changes (a gang, or no alloc of a pending task)."""
        tasks = effective_tasks(self, allocs)
        return self if tasks is self.tasks else self.with_progress(tasks, self.reason, self.first_attempt_at,
                                                                   self.placed_at)


_JOB_RECORD, _MACHINE, _RESOURCES = builder(JobRecord), builder(Machine), builder(Resources)
_PENDING_BYTES = bytes(int(b == ord("p")) for b in range(256))  # bytes.translate table: 1 for "p"


def derive_job_state(tasks: str, killed: bool) -> JobState:
    """pending → partly-placed → placed → running → finished/failed; killed wins."""
    if killed:
        return JobState.KILLED
    total = len(tasks)
    pending = tasks.count("p")
    if pending == total:
        return JobState.PENDING
    if pending:
        return JobState.PARTLY_PLACED
    if tasks.count("f") == total:
        return JobState.FINISHED
    if "a" in tasks:
        return JobState.PLACED
    if "r" in tasks:
        return JobState.RUNNING
    return JobState.FAILED if "x" in tasks else JobState.FINISHED


@dataclass(frozen=True, slots=True)
class Alloc:
    """A task placed on a machine, holding ``resources`` of it."""

    job_id: str
    task_index: int
    machine_id: str
    resources: Resources
    priority: int = 0
    scheduler: str = ""
    placed_at: float = 0.0
    running: bool = False


def with_states(tasks: str, indices: Sequence[int], char: str) -> str:
    """``tasks`` with the states at ``indices`` set to ``char``; one index by slicing, more
    through a bytearray of the ASCII string (no per-task list of a job of thousands of tasks).
    IndexError for an index out of range."""
    if len(indices) == 1 and 0 <= indices[0] < len(tasks):
        i = indices[0]
        return tasks[:i] + char + tasks[i + 1:]
    if not (tasks.isascii() and len(char) == 1 and char.isascii()):
        chars = list(tasks)
        for i in indices:
            chars[i] = char
        return "".join(chars)
    states, code = bytearray(tasks, "ascii"), ord(char)
    for i in indices:
        states[i] = code
    return states.decode("ascii")


def effective_tasks(record: JobRecord, allocs: Iterable[Alloc]) -> str:
    """The task states of ``record`` as the cell has them, given allocations of its tasks that
    exist in the store (any subset: tasks whose alloc is not given keep their stored state).

    The one rule of derived placement (docs/CELLSTATE.md, "Task state out of the record"): a
    placement of a job that is not a gang writes the task's alloc without the record, so a task
    whose stored state is ``p`` and that has an alloc is placed: ``r`` if the alloc says running,
    else ``a``. A gang's reservations are allocs of pending tasks (placed only by the gang's
    finish, which writes ``a`` into the record), so a gang's record is taken as stored.
    Returns ``record.tasks`` itself when nothing changes."""
    tasks = record.tasks
    if record.job.gang:
        return tasks
    n = len(tasks)
    changes = [(a.task_index, a.running) for a in allocs if 0 <= a.task_index < n and tasks[a.task_index] == "p"]
    if not changes:
        return tasks
    return set_placed(tasks, changes)


def set_placed(tasks: str, changes: Sequence[tuple[int, bool]]) -> str:
    """``tasks`` with each (index, running) of ``changes`` set to ``r`` (running) or ``a``: one
    change by slicing, more through a bytearray of the ASCII string (one copy of the string,
    then a byte per change; no per-task list)."""
    if len(changes) == 1:
        i, running = changes[0]
        return tasks[:i] + ("r" if running else "a") + tasks[i + 1:]
    states = bytearray(tasks, "ascii")
    for i, running in changes:
        states[i] = 114 if running else 97  # ord("r"), ord("a")
    return states.decode("ascii")


def pending_indices(tasks: str) -> list[int]:
    """Indices of the ``"p"`` (pending) characters of a task-state string, in order (a new
    list). A long string's answer is remembered by the string's identity: the schedulers'
    task checks (``checked_tasks``) ask again of the same record at each decision."""
    if len(tasks) < _REMEMBER_FROM:
        return _pending_indices(tasks)
    held = _PENDING_OF.get(id(tasks))
    if held is not None and held[0] is tasks:
        return list(held[1])
    found = _pending_indices(tasks)
    if len(_PENDING_OF) >= _PENDING_OF_MAX:
        _PENDING_OF.clear()
    _PENDING_OF[id(tasks)] = (tasks, tuple(found))  # (holds the string: its id is not reused meanwhile)
    return found


_REMEMBER_FROM, _PENDING_OF_MAX = 64, 4096
_PENDING_OF: dict[int, tuple[str, tuple[int, ...]]] = {}


def _pending_indices(tasks: str) -> list[int]:
    count = tasks.count("p")  # the usual answers (all, none, a few) without a per-task loop
    if count == len(tasks):
        return list(range(count))
    if count * 8 < len(tasks):
        found, i = [], tasks.find("p")
        while i >= 0:
            found.append(i)
            i = tasks.find("p", i + 1)
        return found
    if tasks.isascii():  # C loops: a byte 1 where a task is pending, 0 elsewhere
        return list(compress(range(len(tasks)), tasks.encode().translate(_PENDING_BYTES)))
    return [i for i, c in enumerate(tasks) if c == "p"]
