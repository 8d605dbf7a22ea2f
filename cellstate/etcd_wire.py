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
_PUT, _DELETE = EventKind.PUT, EventKind.DELETE
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
    return KeyValue(kv.key.decode(), kv.value, kv.create_revision, kv.mod_revision, kv.version, kv.lease)


def key_values(kvs: Iterable) -> tuple[KeyValue, ...]:
    return tuple([KeyValue(kv.key.decode(), kv.value, kv.create_revision, kv.mod_revision, kv.version, kv.lease)
                  for kv in kvs])


def events(pb_events: Iterable) -> tuple[Event, ...]:
    """Store events from etcd mvccpb.Events (type 0 = PUT, 1 = DELETE)."""
    out = []
    append = out.append
    for ev in pb_events:
        kv = ev.kv
        append(Event(_DELETE if ev.type else _PUT, kv.key.decode(), kv.value, kv.mod_revision,
                     kv.create_revision, kv.version))
    return tuple(out)


def compare_message(compare: Compare) -> rpc.Compare:
    """An etcd Compare; ValueError when the value does not suit the target."""
    if type(compare) is not Compare:
        raise TypeError(f"expected a Compare, got {compare!r}")
    target, field = _TARGETS[compare.target]
    value = compare.value
    if compare.target is CompareTarget.VALUE:
        if not isinstance(value, bytes):
            raise ValueError(f"compare on the value of {compare.key!r} needs bytes, got {type(value).__name__}")
    elif type(value) is not int:
        raise ValueError(f"compare on {compare.target.value} of {compare.key!r} needs an int, got {value!r}")
    return rpc.Compare(result=_RESULTS[compare.op], target=target, key=compare.key.encode(), **{field: value})


def request_ops(ops: Sequence[Op]) -> tuple[list, int]:
    """(etcd RequestOps, estimated request bytes) for ``ops``; TypeError on an unknown op."""
    out = []
    size = 0
    for op in ops:
        cls = type(op)
        if cls is not Put and cls is not Get and cls is not Delete:
            raise TypeError(f"unknown txn op {op!r} (expected Put, Delete or Get)")
        key = op.key.encode()
        if cls is Put:
            value = op.value
            if not isinstance(value, bytes):
                raise TypeError(f"put of {op.key!r} needs a bytes value, got {type(value).__name__}")
            size += len(key) + len(value) + OP_OVERHEAD_BYTES
            out.append(rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=value, lease=op.lease)))
        elif cls is Get:
            size += 2 * len(key) + OP_OVERHEAD_BYTES
            end = prefix_end_bytes(key) if op.prefix else b""
            out.append(rpc.RequestOp(request_range=rpc.RangeRequest(key=key, range_end=end)))
        else:
            size += 2 * len(key) + OP_OVERHEAD_BYTES
            end = prefix_end_bytes(key) if op.prefix else b""
            out.append(rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=key, range_end=end)))
    return out, size


def branch_reads(ops: Sequence[Op], responses) -> tuple[tuple[KeyValue, ...], ...]:
    """For each Get of the branch that ran, its key-values, in op order."""
    return tuple([key_values(resp.response_range.kvs) for op, resp in zip(ops, responses) if type(op) is Get])


def cancelled_watch_error(reason: str) -> StoreError:
    """The error of a watch etcd cancelled (PermissionDenied when the user may not read the range)."""
    text = f"etcd cancelled the watch: {reason or 'no reason given'}"
    return PermissionDenied(text) if any(msg in reason for msg in _DENIED_MESSAGES) else StoreError(text)


def is_compacted(exc: grpc.RpcError) -> bool:
    return exc.code() == grpc.StatusCode.OUT_OF_RANGE and COMPACTED_MESSAGE in (exc.details() or "")


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
