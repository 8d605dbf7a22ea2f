"""Building etcd txn requests in place: the same protobuf messages as building each message
and handing them to the constructor, and the same refusals."""

from __future__ import annotations

import etcd3.etcdrpc as rpc
import pytest

from cellstate.etcd import wire as etcd_wire
from cellstate.store import Compare, CompareOp, CompareTarget, Delete, Get, Put, exists, mod_revision_is

OPS = [Put("a", b"1"), Put("b", b"", lease=7), Get("c"), Get("d/", prefix=True), Delete("e"),
       Delete("f/", prefix=True), Put("g\u00e9", b"\xff" * 300)]
COMPARES = [mod_revision_is("a", 3), mod_revision_is("b", 0), exists("c"),
            Compare("d", CompareTarget.VERSION, CompareOp.GT, 2), Compare("e", CompareTarget.VALUE, CompareOp.NE, b"x"),
            Compare("f", CompareTarget.MOD, CompareOp.LT, 9)]


def expected_op(op) -> rpc.RequestOp:
    key = op.key.encode()
    end = etcd_wire.prefix_end_bytes(key) if getattr(op, "prefix", False) else b""
    if type(op) is Put:
        return rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=op.value, lease=op.lease))
    if type(op) is Get:
        return rpc.RequestOp(request_range=rpc.RangeRequest(key=key, range_end=end))
    return rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=key, range_end=end))


def test_ops_are_added_as_the_messages_they_stand_for():
    request = rpc.TxnRequest()
    size = etcd_wire.add_request_ops(request.failure, OPS)
    assert list(request.failure) == [expected_op(op) for op in OPS]
    assert size == sum(len(op.key.encode()) + len(op.value) if type(op) is Put else 2 * len(op.key.encode())
                       for op in OPS) + etcd_wire.OP_OVERHEAD_BYTES * len(OPS)
    assert etcd_wire.request_ops(OPS) == ([expected_op(op) for op in OPS], size)


def test_compares_are_added_as_the_messages_they_stand_for():
    request = rpc.TxnRequest()
    etcd_wire.add_compares(request.compare, COMPARES)
    assert list(request.compare) == [etcd_wire.compare_message(c) for c in COMPARES]
    first = request.compare[0]
    assert (first.result, first.target, first.key, first.mod_revision) == (rpc.Compare.EQUAL, rpc.Compare.MOD,
                                                                          b"a", 3)
    assert request.compare[4].value == b"x" and request.compare[3].version == 2


@pytest.mark.parametrize("ops, error, message", [
    ([Put("a", "text")], TypeError, "put of 'a' needs a bytes value"),
    ([("a", b"1")], TypeError, "unknown txn op"),
], ids=["text-value", "tuple-op"])
def test_bad_ops_are_refused(ops, error, message):
    with pytest.raises(error, match=message):
        etcd_wire.add_request_ops(rpc.TxnRequest().success, ops)


@pytest.mark.parametrize("compare, error, message", [
    (Compare("a", CompareTarget.MOD, CompareOp.EQ, "3"), ValueError, "needs an int"),
    (Compare("a", CompareTarget.VALUE, CompareOp.EQ, 3), ValueError, "needs bytes"),
    (("a", 3), TypeError, "expected a Compare"),
], ids=["text-revision", "int-value", "tuple"])
def test_bad_compares_are_refused(compare, error, message):
    with pytest.raises(error, match=message):
        etcd_wire.add_compares(rpc.TxnRequest().compare, [compare])
