"""``check_txn``: its one-pass check of usual txns reports exactly what the op-by-op checks
report (the same size estimate, the same first error), for usual and unusual txns alike."""

from __future__ import annotations

import pytest

from cellstate.store import Compare, CompareOp, CompareTarget, Delete, Get, Put, TxnTooLarge, mod_revision_is
from cellstate.txn_rules import (
    TOO_LARGE_MESSAGE, TOO_MANY_OPS_MESSAGE, _plain_size, check_compare, check_duplicates, check_op, check_txn,
    txn_request_bytes,
)


class Key(str):
    pass


def one_by_one(compares, success, failure, max_ops, max_bytes):
    """The checks in their documented order, each on its own (what check_txn must match)."""
    for compare in compares:
        check_compare(compare)
    for branch in (success, failure):
        for op in branch:
            check_op(op)
    if max(len(compares), len(success), len(failure)) > max_ops:
        raise TxnTooLarge(f"{TOO_MANY_OPS_MESSAGE} (limit {max_ops} per branch)")
    size = txn_request_bytes(compares, success, failure)
    if size > max_bytes:
        raise TxnTooLarge(f"{TOO_LARGE_MESSAGE} ({size} bytes, limit {max_bytes})")
    check_duplicates(success)
    check_duplicates(failure)


def outcome(check, txn, max_ops=128, max_bytes=10_000):
    try:
        check(*txn, max_ops, max_bytes)
    except Exception as exc:  # the type and the message (which names the key or the size)
        return f"{type(exc).__name__}: {exc}"
    return "ok"


C = [mod_revision_is("m/1", 3)]
TXNS = {
    "commit": (C, [Put("m/1", b"x" * 40), Put("j/1", b"y"), Delete("a/1/0")], [Get("m/1")]),
    "non-ascii-key": ([mod_revision_is("m/é", 0)], [Put("m/é", b"v", 7)], [Get("m/é")]),
    "value-compare": ([Compare("k", CompareTarget.VALUE, CompareOp.EQ, b"v")], [Put("k", b"w")], []),
    "prefix-delete": ([], [Delete("a/", prefix=True), Put("b", b"")], []),
    "put-inside-prefix-delete": ([], [Delete("a/", prefix=True), Put("a/1", b"")], []),
    "put-twice": (C, [Put("k", b"1"), Put("k", b"2")], []),
    "put-and-delete": (C, [Put("k", b"1"), Delete("k")], []),
    "two-deletes": (C, [Delete("k"), Delete("k")], []),
    "failure-put-twice": (C, [], [Put("k", b"1"), Put("k", b"2")]),
    "key-subclass": ([], [Put(Key("k"), b"1")], []),
    "bytearray-value": ([], [Put("k", bytearray(b"1"))], []),
    "negative-lease": ([], [Put("k", b"1", -1)], []),
    "bool-revision": ([Compare("k", CompareTarget.MOD, CompareOp.EQ, True)], [], []),
    "bytes-key": ([], [Get(b"k")], []),
    "not-an-op": ([], ["k"], []),
    "not-a-compare": (["k"], [], []),
    "too-many": ([], [Put(f"k{i}", b"") for i in range(200)], []),
    "too-large": ([], [Put("k", b"x" * 20_000)], []),
    "too-large-and-duplicate": ([], [Put("k", b"x" * 20_000), Put("k", b"")], []),
}
# Long branches of one kind of op (a commit's puts and gets) take C-level passes: the same answers.
PUTS = [Put(f"m/{i}", b"v" * i) for i in range(12)]
GETS = [Get(f"m/{i}") for i in range(12)]
TXNS.update({
    "long-commit": ([mod_revision_is(f"m/{i}", i) for i in range(12)], PUTS, GETS),
    "long-deletes": (C, [Delete(f"a/{i}") for i in range(12)], []),
    "long-non-ascii": ([], [*PUTS, Put("m/é", b"v")], [*GETS, Get("m/é")]),
    "long-leased": ([], [*PUTS, Put("l", b"", 4)], []),
    "long-put-twice": ([], [*PUTS, Put("m/3", b"")], []),
    "long-mixed-put-twice": ([], [Delete("a/1"), *PUTS, Put("m/3", b"")], []),
    "long-key-subclass": ([], [*PUTS, Put(Key("k"), b"")], []),
    "long-bytearray-value": ([], [*PUTS, Put("k", bytearray(b"1"))], []),
    "long-negative-lease": ([], [*PUTS, Put("k", b"", -1)], []),
    "long-bool-lease": ([], [*PUTS, Put("k", b"", True)], []),
    "long-prefix-get": ([], [], [*GETS, Get("m/", prefix=True)]),
    "long-int-prefix": ([], [], [*GETS, Get("m/", prefix=0)]),
    "long-not-ops": ([], ["k"] * 12, []),
    "long-too-large": ([], [*PUTS, Put("k", b"x" * 20_000)], []),
})


@pytest.mark.parametrize("name", list(TXNS), ids=list(TXNS))
def test_check_txn_reports_what_the_op_by_op_checks_report(name):
    assert outcome(check_txn, TXNS[name]) == outcome(one_by_one, TXNS[name])


@pytest.mark.parametrize("name, leased", [("commit", False), ("non-ascii-key", True), ("long-commit", False),
                                          ("long-non-ascii", False), ("long-leased", True)])
def test_usual_txns_take_one_pass_with_the_same_size(name, leased):
    compares, success, failure = TXNS[name]
    assert _plain_size(compares, success, failure) == (txn_request_bytes(compares, success, failure), True, leased)


@pytest.mark.parametrize("txn, leased", [
    (([], [Put("k", b"1")], [Put("l", b"2", 5)]), True),  # a lease in the failure branch counts too
    (([], [Put("k", b"1")], [Get("k")]), False),
    (([], [Delete("a/", prefix=True), Put("b", b"", 3)], []), True),  # the op-by-op path
    (([], [Delete("a/", prefix=True), Put("b", b"")], []), False),
], ids=["plain-failure-lease", "plain-none", "unusual-lease", "unusual-none"])
def test_check_txn_says_whether_a_put_carries_a_lease(txn, leased):
    assert check_txn(*txn, 128, 10_000) is leased
