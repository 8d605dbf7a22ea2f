"""Signatures, class ids and the bounded score cache of the Borg scheduler."""

from __future__ import annotations

import pytest
from viewlib import job

from cellstate.model import Constraint, ConstraintOp
from schedulers.borg.cache import ScoreCache, Signer
from schedulers.plugin import Verdict

OK = Verdict.fit("x")


@pytest.mark.parametrize("a,b,same", [
    (job("a", cpu=100), job("b", cpu=100), True),
    (job("a", cpu=100), job("b", cpu=200), False),
    (job("a", tasks=1), job("b", tasks=9), True),
    (job("a", priority=1), job("b", priority=9), True),
    (job("a"), job("b", constraints=(Constraint("zone", ConstraintOp.EQ, ("z",)),)), False),
], ids=["same-request", "other-request", "task-count-unread", "priority-unread", "constraints-read"])
def test_signature_covers_exactly_the_read_fields(a, b, same):
    signer = Signer(frozenset({"request", "constraints"}))
    assert (signer.signature(a) == signer.signature(b)) is same
    assert (signer.class_of(signer.signature(a)) == signer.class_of(signer.signature(b))) is same


def test_unknown_field_is_refused():
    with pytest.raises(ValueError, match="'colour'"):
        Signer(frozenset({"colour"}))


@pytest.mark.parametrize("bound,classes,per_class,left_classes", [
    (10, 3, 3, 3),
    (10, 4, 3, 3),
    (5, 4, 3, 1),
    (2, 1, 5, 1),
], ids=["under-bound", "drops-oldest", "drops-several", "one-huge-class-swept"])
def test_trim_keeps_the_bound(bound, classes, per_class, left_classes):
    cache = ScoreCache(bound)
    for c in range(classes):
        table = cache.table(c)
        for m in range(per_class):
            table[f"m{m}"] = (1, 0, (1.0,))
        cache.stored(per_class)
    cache.trim()
    assert len(cache) <= bound
    assert len(cache._classes) == left_classes


def test_recently_used_class_survives():
    cache = ScoreCache(4)
    for c in (1, 2):
        cache.table(c).update({"m0": (1, 0, None), "m1": (1, 0, None)})
    cache.table(1)  # 1 is now the most recently used
    cache.table(3)["m0"] = (1, 0, None)
    cache.stored(5)
    cache.trim()
    assert set(cache._classes) == {1, 3}


def test_trim_counts_only_past_the_noted_bound():
    cache = ScoreCache(2)
    cache.table(1).update({"m0": (1, 0, None), "m1": (1, 0, None), "m2": (1, 0, None)})
    cache.stored(2)  # under-noted: trim trusts the note and does not count
    assert cache.trim() == 0 and len(cache) == 3
    cache.table(2)["m0"] = (1, 0, None)
    cache.stored(2)
    assert cache.trim() == 1 and len(cache) == 1


def test_entries_are_untracked_by_the_garbage_collector():
    """Entries of ints and float tuples: the collector stops tracking them after one pass."""
    import gc

    cache = ScoreCache(10)
    entry = (3, cache.index_of(OK), (0.5, 0.25))
    cache.table(1)["m0"] = entry
    assert cache.verdicts[entry[1]] is OK and cache.index_of(OK) == entry[1]
    gc.collect()
    assert not gc.is_tracked(entry)
