"""Hypothesis strategies for valid cell values (each encodes and decodes back equal).

Import from tests in this folder as ``from strategies import machines, …``.
"""

from __future__ import annotations

from hypothesis import strategies as st

from cellstate.model import (
    Alloc,
    Constraint,
    ConstraintOp,
    Job,
    JobKind,
    JobRecord,
    Machine,
    MachineState,
    TaskState,
)
from cellstate.resources import CORE_NAMES, Resources

# Any text msgpack can carry (no lone surrogates); ids additionally have no "/".
_CHARS = st.characters(exclude_categories=("Cs",))
_ID_CHARS = st.characters(exclude_categories=("Cs",), exclude_characters="/")

ids = st.text(_ID_CHARS, min_size=1, max_size=12)
names = st.text(_CHARS, min_size=1, max_size=8)
texts = st.text(_CHARS, max_size=12)
amounts = st.integers(min_value=0, max_value=2**62)
times = st.floats(min_value=0.0, max_value=1e12, allow_nan=False, allow_infinity=False)
priorities = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@st.composite
def resources(draw, max_amount: int = 2**62) -> Resources:
    """Canonical vectors: extras sorted, non-zero, never named like a core resource."""
    amount = st.integers(min_value=0, max_value=max_amount)
    extra = draw(st.dictionaries(names.filter(lambda n: n not in CORE_NAMES), amount, max_size=3))
    return Resources(draw(amount), draw(amount), draw(amount),
                     tuple(sorted((k, v) for k, v in extra.items() if v)))


@st.composite
def machines(draw) -> Machine:
    """Any valid machine; ``allocated`` may exceed ``capacity`` (the codec allows it)."""
    label_names = names.filter(lambda n: n not in ("zone", "rack", "platform"))
    return Machine(
        id=draw(ids),
        capacity=draw(resources()),
        zone=draw(texts),
        rack=draw(texts),
        platform=draw(texts),
        packages=draw(st.frozensets(names, max_size=4)),
        labels=tuple(draw(st.dictionaries(label_names, texts, max_size=3)).items()),
        state=draw(st.sampled_from(MachineState)),
        allocated=draw(resources()),
        task_count=draw(amounts),
        writer=draw(texts),
    )


@st.composite
def constraints(draw) -> Constraint:
    """eq: one value; in/not-in: one or more; exists: none."""
    op = draw(st.sampled_from(ConstraintOp))
    low, high = {ConstraintOp.EQ: (1, 1), ConstraintOp.EXISTS: (0, 0)}.get(op, (1, 3))
    values = draw(st.lists(texts, min_size=low, max_size=high))
    return Constraint(draw(names), op, tuple(values))


@st.composite
def jobs(draw, max_tasks: int = 40) -> Job:
    return Job(
        id=draw(ids),
        kind=draw(st.sampled_from(JobKind)),
        tasks=draw(st.integers(min_value=1, max_value=max_tasks)),
        request=draw(resources()),
        priority=draw(priorities),
        owner=draw(texts),
        constraints=tuple(draw(st.lists(constraints(), max_size=3))),
        duration_s=draw(st.none() | times),
        estimate_s=draw(st.none() | times),
        gang=draw(st.booleans()),
        package=draw(texts),
        different_machine=draw(st.booleans()),
        max_per_machine=draw(amounts),
        scheduler=draw(st.just("") | ids),
    )


@st.composite
def job_records(draw) -> JobRecord:
    job = draw(jobs())
    states = draw(st.lists(st.sampled_from([s.value for s in TaskState]),
                           min_size=job.tasks, max_size=job.tasks))
    return JobRecord(
        job=job,
        tasks="".join(states),
        submitted_at=draw(times),
        reason=draw(texts),
        killed=draw(st.booleans()),
        first_attempt_at=draw(st.none() | times),
        placed_at=draw(st.none() | times),
    )


@st.composite
def allocs(draw) -> Alloc:
    return Alloc(
        job_id=draw(ids),
        task_index=draw(amounts),
        machine_id=draw(ids),
        resources=draw(resources()),
        priority=draw(priorities),
        scheduler=draw(texts),
        placed_at=draw(times),
        running=draw(st.booleans()),
    )
