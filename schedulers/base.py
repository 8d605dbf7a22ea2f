"""What every scheduler returns and promises: ``omega.protocols.Decision``, the ``Scheduler``
protocol and its host contract (``attach``, ``needs_nothing``: docs/HOST.md)."""

from __future__ import annotations

from itertools import islice
from operator import lt
from typing import Protocol, Sequence

from cellstate.fastbuild import builder
from cellstate.plan import Claim, JobEntry
from omega.host import Attachment, SchedulerHost
from omega.protocols import CellView, Decision


new_decision = builder(Decision)
"""``new_decision(claims, unplaced)``: a ``Decision`` without its ``__init__``."""
new_claim = builder(Claim)
"""``new_claim(task_index, machine_id, request, evicts)``: a ``Claim`` without its ``__init__``."""


class Scheduler(Protocol):
    """Decides where a job's pending tasks go on a read-only view; claims fit cumulatively.

    ``attach(host)`` is its declared contract with the process that runs it (``omega.host``):
    called once before the first decision, it takes what it needs of the ``SchedulerHost``
    (its clock, the cycle's refusals, the view and its change feed) and returns what it offers
    (``Attachment``: ``share_machines``, a candidate filter such as the nothing-fits memo,
    ``schedulers.fit_memo.nothing_fits_memo``). A scheduler that needs nothing declares
    ``attach = needs_nothing``."""

    name: str
    kind: str

    def decide(self, job: JobEntry, tasks: list[int], view: CellView) -> Decision: ...

    def attach(self, host: SchedulerHost) -> Attachment: ...


NOTHING = Attachment()


def needs_nothing(scheduler: object, host: SchedulerHost) -> Attachment:
    """The ``attach`` of a scheduler that asks its host for nothing and offers it nothing
    (declared in a class body as ``attach = needs_nothing``)."""
    return NOTHING


def checked_tasks(job: JobEntry, tasks: Sequence[int]) -> list[int]:
    """``tasks`` as a list after checking each is a distinct pending task of ``job``.
    The usual answer (plain ints, distinct, in range, all pending) is checked in C (a big job
    lists thousands): ascending ones by one pass, others with a set, the listed tasks' states
    read in C too; anything else is checked task by task for the exact error."""
    listed = list(tasks)
    record = job.record
    if not record.killed and _TYPES_INT >= set(map(type, listed)):
        if not listed:
            return listed
        states = record.tasks
        if _distinct_in_range(listed, len(states)):
            if states.count("p") == len(states) or _PENDING >= set(map(states.__getitem__, listed)):
                return listed
    return _checked_one_by_one(job, listed)


def _distinct_in_range(listed: list[int], size: int) -> bool:
    """True when the ints ``listed`` (not empty) are distinct and within 0 … ``size`` - 1."""
    if listed[0] >= 0 and listed[-1] < size and all(map(lt, listed, islice(listed, 1, None))):
        return True  # ascending
    distinct = set(listed)
    return len(distinct) == len(listed) and min(distinct) >= 0 and max(distinct) < size


_TYPES_INT = frozenset((int,))
_PENDING = frozenset("p")


def _checked_one_by_one(job: JobEntry, tasks: list[int]) -> list[int]:
    record = job.record
    pending = set(record.pending_tasks())
    seen: set[int] = set()
    for t in tasks:
        if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < len(record.tasks):
            raise ValueError(f"job {job.id}: task index {t!r} out of range 0..{len(record.tasks) - 1}")
        if t not in pending:
            state = "killed job" if record.killed else f"state {record.tasks[t]!r}"
            raise ValueError(f"job {job.id}: task {t} is not pending ({state})")
        if t in seen:
            raise ValueError(f"job {job.id}: task {t} listed twice")
        seen.add(t)
    return list(tasks)


def gang_outcome(job: JobEntry, tasks: Sequence[int], decision: Decision) -> Decision:
    """For a gang job: the decision unchanged if every task was placed, else no claims
    and every task unplaced with the first failure's reason."""
    if not job.record.job.gang or not decision.unplaced:
        return decision
    first = min(decision.unplaced)
    why = f"gang: not all {len(tasks)} tasks fit; task {first}: {decision.unplaced[first]}"
    return new_decision([], dict.fromkeys(tasks, why))
