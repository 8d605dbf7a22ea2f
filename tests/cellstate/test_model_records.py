"""JobRecord's derived records and pending indices: the shortcuts give what the plain
definitions give (``dataclasses.replace``, a scan of every task)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cellstate import model
from cellstate.model import Job, JobKind, JobRecord, TaskState, pending_indices
from cellstate.resources import Resources

JOB = Job("j", JobKind.BATCH, 1, Resources(1, 1))


def record(tasks: str, killed: bool = False) -> JobRecord:
    return JobRecord(replace(JOB, tasks=max(1, len(tasks))), tasks, 2.0, "why", killed, 3.0, None)


@given(st.text(alphabet="parfxk", max_size=200), st.booleans())
def test_pending_tasks_are_the_pending_indices(tasks, killed):
    expected = [] if killed else [i for i, c in enumerate(tasks) if c == "p"]
    assert record(tasks, killed).pending_tasks() == expected


@given(st.text(alphabet="pπa", max_size=60))
def test_pending_tasks_of_any_text_are_the_p_indices(tasks):
    """Unvalidated records too (a non-ASCII string is not scanned as bytes)."""
    assert record(tasks).pending_tasks() == [i for i, c in enumerate(tasks) if c == "p"]


@pytest.mark.parametrize("tasks", ["p" * 50, "a" * 50, "a" * 40 + "p" + "a" * 9, "pa" * 25, "pé" * 25],
                         ids=["all", "none", "one", "half", "half-non-ascii"])
def test_pending_tasks_of_the_usual_shapes(tasks):
    assert record(tasks).pending_tasks() == [i for i, c in enumerate(tasks) if c == "p"]


@pytest.mark.parametrize("tasks", ["pa" * 100, "p" * 64, "a" * 63 + "p", "pé" * 40], ids=["half", "all", "last", "non-ascii"])
def test_pending_indices_of_a_long_string_asked_again_are_a_fresh_equal_list(tasks):
    expected = [i for i, c in enumerate(tasks) if c == "p"]
    first = pending_indices(tasks)
    first.append(-1)  # the caller's own list
    again = pending_indices(tasks)
    assert again == expected and again is not first
    assert pending_indices("".join(tasks)) == expected


def test_pending_indices_are_remembered_by_identity_not_by_address(monkeypatch):
    monkeypatch.setattr(model, "_PENDING_OF_MAX", 2)
    strings = ["p" * 70 + "a" * i for i in range(5)] + ["a" * 70 + "p"]
    for _ in range(2):
        for tasks in strings:
            assert pending_indices(tasks) == [i for i, c in enumerate(tasks) if c == "p"]
    assert len(model._PENDING_OF) <= 2


@dataclass(frozen=True, slots=True)
class TaggedRecord(JobRecord):
    tag: str = "t"


@pytest.mark.parametrize("rec", [record("ppp"), TaggedRecord(replace(JOB, tasks=3), "ppp")], ids=["plain", "subclass"])
def test_with_progress_and_with_tasks_are_replace(rec):
    got = rec.with_progress("apa", "1 task: full", 5.0, None)
    assert got == replace(rec, tasks="apa", reason="1 task: full", first_attempt_at=5.0, placed_at=None)
    assert type(got) is type(rec) and repr(got) == repr(replace(got))
    assert rec.with_tasks([0, 2], TaskState.RUNNING) == replace(rec, tasks="rpr")


@pytest.mark.parametrize("capacity, allocated", [
    (Resources(4000, 8192, 10), Resources(1000, 512)),
    (Resources(4000, 8192, 0, (("gpu", 2),)), Resources(1000, 512, 0, (("gpu", 2),))),
    (Resources(1, 1), Resources(2, 3)),
], ids=["core", "extra", "overcommitted"])
def test_machine_free_and_ledger_changes_are_the_plain_arithmetic(capacity, allocated):
    from cellstate.model import Machine

    m = Machine("m1", capacity, "z", allocated=allocated, task_count=2, writer="w")
    assert m.free == capacity - allocated and repr(m.free) == repr(capacity - allocated)
    request = Resources(10, 20)
    assert m.with_claim(request, 2) == replace(m, allocated=allocated + request, task_count=4)
    assert m.with_release(request) == replace(m, allocated=allocated - request, task_count=1)


_AMOUNTS = st.integers(min_value=0, max_value=4)
_VECTORS = st.builds(lambda c, m, d, g: Resources.of(c, m, d, **({"gpu": g} if g is not None else {})),
                     _AMOUNTS, _AMOUNTS, _AMOUNTS, st.none() | _AMOUNTS)


@given(_VECTORS, _VECTORS)
def test_shortfall_names_the_first_short_resource(need, free):
    """The core-only shortcut gives the by-name definition (first of cpu, memory, disk, extras)."""
    expected = next((name for name in need.names() if need.get(name) > free.get(name)), None)
    assert need.shortfall(free) == expected
    assert (expected is None) == need.fits_in(free)


_EXTRA_VECTORS = st.builds(
    lambda c, extras: Resources.of(c, 0, 0, **extras), _AMOUNTS,
    st.dictionaries(st.sampled_from(["gpu", "prod_cpu", "prod_memory"]), st.integers(min_value=-3, max_value=3)))


@given(_EXTRA_VECTORS, _EXTRA_VECTORS)
def test_sums_and_differences_are_by_name_with_zeros_dropped(a, b):
    """Whatever names the two vectors share (the pairwise shortcut or not)."""
    for result, sign in ((a + b, 1), (a - b, -1)):
        names = {name for name, _ in a.extra} | {name for name, _ in b.extra}
        expected = tuple(sorted((n, a.get(n) + sign * b.get(n)) for n in names if a.get(n) + sign * b.get(n)))
        assert result.extra == expected
        assert result.cpu == a.cpu + sign * b.cpu
