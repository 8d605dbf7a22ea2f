"""Conversions between the Store types and etcd's protobuf messages, and gRPC error mapping.

Kept free of client state so ``EtcdStore`` and ``EtcdWatchStream`` share it. The
converters are on the hot path (txns, ranges, watch replay): they build protobuf
messages directly and avoid intermediate objects.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import grpc
import etcd3.etcdrpc as rpc
from etcd3 import exceptions as etcd_exceptions

from cellstate.fastbuild import builder
from cellstate.store import (
    Compare, CompareOp, CompareTarget, Delete, Event, EventKind, Get, KeyValue, Op, PermissionDenied, Put,
    StoreError, TxnTooLarge, Unavailable,
)

# Codes after which the endpoint is considered down (the client fails over).
ENDPOINT_FAILURE_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
CONNECTION_ERRORS = (
    etcd_exceptions.ConnectionFailedError, etcd_exceptions.ConnectionTimeoutError,
    etcd_exceptions.NoServerAvailableError,
)
COMPACTED_MESSAGE = "required revision has been compacted"
_TOO_LARGE_MESSAGES = ("too many operations in txn request", "request is too large",
                       "message larger than max")
# etcd's auth refusals (PERMISSION_DENIED, or INVALID_ARGUMENT/UNAUTHENTICATED with these details).
_DENIED_MESSAGES = ("permission denied", "user name is empty", "authentication failed", "invalid auth token")

_RESULTS = {
    CompareOp.EQ: rpc.Compare.EQUAL, CompareOp.NE: rpc.Compare.NOT_EQUAL,
    CompareOp.LT: rpc.Compare.LESS, CompareOp.GT: rpc.Compare.GREATER,
}
_TARGETS = {
    CompareTarget.MOD: (rpc.Compare.MOD, "mod_revision"),
    CompareTarget.CREATE: (rpc.Compare.CREATE, "create_revision"),
    CompareTarget.VERSION: (rpc.Compare.VERSION, "version"),
    CompareTarget.VALUE: (rpc.Compare.VALUE, "value"),
}
_MOD, _MOD_TARGET = CompareTarget.MOD, rpc.Compare.MOD
_PUT, _DELETE = EventKind.PUT, EventKind.DELETE
# Built by the hundred per txn and watch batch, without their dataclass __init__ (cellstate.fastbuild).
_KEY_VALUE, _EVENT = builder(KeyValue), builder(Event)
# Rough protobuf framing per op (tags, lengths, op wrapper) for the client-side size estimate.
OP_OVERHEAD_BYTES = 16


def prefix_end_bytes(prefix: bytes) -> bytes:
    """etcd's range_end for every key starting with ``prefix`` (b"\\0": to the end)."""
    raw = bytearray(prefix)
    while raw and raw[-1] == 0xFF:
        raw.pop()
    if not raw:
        return b"\0"
    raw[-1] += 1
    return bytes(raw)


def key_value(kv) -> KeyValue:
    """A KeyValue from an etcd mvccpb.KeyValue."""
    return _KEY_VALUE(kv.key.decode(), kv.value, kv.create_revision, kv.mod_revision, kv.version, kv.lease)


def key_values(kvs: Iterable) -> tuple[KeyValue, ...]:
    build = _KEY_VALUE
    return tuple([build(kv.key.decode(), kv.value, kv.create_revision, kv.mod_revision, kv.version, kv.lease)
                  for kv in kvs])


def events(pb_events: Iterable) -> tuple[Event, ...]:
    """Store events from etcd mvccpb.Events (type 0 = PUT, 1 = DELETE)."""
    out = []
    append, build = out.append, _EVENT
    for ev in pb_events:
        kv = ev.kv
        append(build(_DELETE if ev.type else _PUT, kv.key.decode(), kv.value, kv.mod_revision,
                     kv.create_revision, kv.version))
    return tuple(out)


def compare_message(compare: Compare) -> rpc.Compare:
    """An etcd Compare; ValueError when the value does not suit the target."""
    message = rpc.Compare()
    _fill_compare(message, compare)
    return message


def add_compares(repeated, compares: Sequence[Compare]) -> None:
    """Append etcd Compares for ``compares`` to a request's repeated ``compare`` field
    (ValueError/TypeError as ``compare_message``)."""
    add = repeated.add
    for compare in compares:
        if type(compare) is Compare and compare.target is _MOD and type(compare.value) is int:
            message = add()  # the placement commit's compare, straight-line
            message.result = _RESULTS[compare.op]
            message.target = _MOD_TARGET
            message.key = compare.key.encode()
            message.mod_revision = compare.value
        else:
            _fill_compare(add(), compare)


def _fill_compare(message: rpc.Compare, compare: Compare) -> None:
    if type(compare) is not Compare:
        raise TypeError(f"expected a Compare, got {compare!r}")
    target, field = _TARGETS[compare.target]
    value = compare.value
    if compare.target is CompareTarget.VALUE:
        if not isinstance(value, bytes):
            raise ValueError(f"compare on the value of {compare.key!r} needs bytes, got {type(value).__name__}")
    elif type(value) is not int:
        raise ValueError(f"compare on {compare.target.value} of {compare.key!r} needs an int, got {value!r}")
    message.result = _RESULTS[compare.op]
    message.target = target
    message.key = compare.key.encode()
    setattr(message, field, value)


def request_ops(ops: Sequence[Op]) -> tuple[list, int]:
    """(etcd RequestOps, estimated request bytes) for ``ops``; TypeError on an unknown op."""
    holder = rpc.TxnRequest()
    size = add_request_ops(holder.success, ops)
    return list(holder.success), size


def add_request_ops(repeated, ops: Sequence[Op]) -> int:
    """Append etcd RequestOps for ``ops`` to a request's repeated ``success``/``failure``
    field; returns the estimated request bytes. TypeError on an unknown op or a non-bytes
    put value. (Filling the request in place is ~3x faster than building each message and
    handing the list to the TxnRequest constructor, which copies them.)"""
    add = repeated.add
    size = 0
    for op in ops:
        cls = type(op)
        if cls is Put:
            value = op.value
            if type(value) is not bytes and not isinstance(value, bytes):
                raise TypeError(f"put of {op.key!r} needs a bytes value, got {type(value).__name__}")
            key = op.key.encode()
            size += len(key) + len(value) + OP_OVERHEAD_BYTES
            put = add().request_put
            put.key = key
            put.value = value
            if op.lease:
                put.lease = op.lease
        elif cls is Get or cls is Delete:
            key = op.key.encode()
            size += 2 * len(key) + OP_OVERHEAD_BYTES
            request = add().request_range if cls is Get else add().request_delete_range
            request.key = key
            if op.prefix:
                request.range_end = prefix_end_bytes(key)
        else:
            raise TypeError(f"unknown txn op {op!r} (expected Put, Delete or Get)")
    return size


def branch_reads(ops: Sequence[Op], responses) -> tuple[tuple[KeyValue, ...], ...]:
    """For each Get of the branch that ran, its key-values, in op order."""
    return tuple([key_values(resp.response_range.kvs) for op, resp in zip(ops, responses) if type(op) is Get])


def cancelled_watch_error(reason: str) -> StoreError:
    """The error of a watch etcd cancelled (PermissionDenied when the user may not read the range)."""
    text = f"etcd cancelled the watch: {reason or 'no reason given'}"
    return PermissionDenied(text) if any(msg in reason for msg in _DENIED_MESSAGES) else StoreError(text)


def is_compacted(exc: grpc.RpcError) -> bool:
    return exc.code() == grpc.StatusCode.OUT_OF_RANGE and COMPACTED_MESSAGE in (exc.details() or "")


def is_invalid_token(exc: grpc.RpcError) -> bool:
    """etcd refused the call's auth token (expired, or unknown after a restart)."""
    return "invalid auth token" in (exc.details() or "")


def store_error(exc: grpc.RpcError, what: str) -> StoreError:
    """The StoreError for a failed gRPC call (compaction is handled by the caller)."""
    code, details = exc.code(), exc.details() or ""
    if code in ENDPOINT_FAILURE_CODES or code == grpc.StatusCode.CANCELLED:
        return Unavailable(f"etcd {what} failed: {code.name}: {details}")
    if any(msg in details for msg in _TOO_LARGE_MESSAGES):
        return TxnTooLarge(f"etcd refused {what}: {details}")
    if code == grpc.StatusCode.PERMISSION_DENIED or any(msg in details for msg in _DENIED_MESSAGES):
        return PermissionDenied(f"etcd denied {what}: {code.name}: {details}")
    return StoreError(f"etcd {what} failed: {code.name}: {details}")
