"""Encoders for values built by the cell's own code (the committer, agents): the same bytes
as ``cellstate.codec``'s ``encode_machine``/``encode_alloc``, without their decode-back
self-check when cheap field checks prove the value valid.

``codec.encode_*`` builds the map, decodes it back and compares the result with the value
(a complete but costly proof that whatever is written decodes equal: half of a commit's
encoding time). Here straight-line checks of every field's exact type and range accept the
common shape: ids without "/", core-only resource vectors of non-negative ints, str
attributes, a frozenset of non-empty str packages, (str, str) labels with distinct names,
a ``MachineState``, non-negative int task count, float times. Each condition is
sufficient for the value to survive the round trip, so accepted values encode exactly as
``codec`` encodes them. Anything else (extra resources, a str subclass, an int time, any
invalid field) goes through the ``codec`` encoder, which encodes it or raises its precise
``CodecError``. So these encoders are as safe as the public ones, just faster.
"""

from __future__ import annotations

import math

import msgpack

from cellstate.codec import (
    _ATTRIBUTES, ALLOC_MEMO, MACHINE_MEMO, _alloc_map, _machine_map, encode_alloc, encode_machine,
)
from cellstate.model import Alloc, Machine, MachineState
from cellstate.resources import Resources

__all__ = ["pack_alloc", "pack_machine"]

_PACK_ERRORS = (OverflowError, ValueError, TypeError)  # e.g. an int beyond 64 bits


def pack_machine(m: Machine) -> bytes:
    """``codec.encode_machine(m)`` (same bytes, same errors), checking fields instead of
    decoding back when ``m`` has the common shape."""
    if _machine_ok(m):
        try:
            raw = msgpack.packb(_machine_map(m))
        except _PACK_ERRORS:
            pass  # the codec's encoder names the problem
        else:
            MACHINE_MEMO.put(raw, m)  # decodes back equal, same types: decoders may answer with m
            return raw
    return encode_machine(m)


def pack_alloc(a: Alloc) -> bytes:
    """``codec.encode_alloc(a)`` (same bytes, same errors), checking fields instead of
    decoding back when ``a`` has the common shape."""
    if _alloc_ok(a):
        try:
            raw = msgpack.packb(_alloc_map(a))
        except _PACK_ERRORS:
            pass
        else:
            ALLOC_MEMO.put(raw, a)
            return raw
    return encode_alloc(a)


def _ident_ok(x) -> bool:
    return type(x) is str and x != "" and "/" not in x


def _resources_ok(r) -> bool:
    """A core-only vector of non-negative ints (what decodes back to an equal vector)."""
    return (type(r) is Resources and r.extra == () and type(r.cpu) is int and r.cpu >= 0
            and type(r.memory) is int and r.memory >= 0 and type(r.disk) is int and r.disk >= 0)


def _machine_ok(m) -> bool:
    if type(m) is not Machine or not _ident_ok(m.id):
        return False
    if not (_resources_ok(m.capacity) and _resources_ok(m.allocated)):
        return False
    if type(m.zone) is not str or type(m.rack) is not str or type(m.platform) is not str:
        return False
    if type(m.state) is not MachineState or type(m.task_count) is not int or m.task_count < 0:
        return False
    if type(m.writer) is not str or type(m.packages) is not frozenset or type(m.labels) is not tuple:
        return False
    for name in m.packages:
        if type(name) is not str or not name:
            return False
    return _labels_ok(m.labels)


def _labels_ok(labels: tuple) -> bool:
    """(name, value) str pairs, names non-empty, distinct and not an attribute's."""
    names = set()
    for item in labels:
        if type(item) is not tuple or len(item) != 2:
            return False
        name, value = item
        if type(name) is not str or not name or name in _ATTRIBUTES or type(value) is not str or name in names:
            return False
        names.add(name)
    return True


def _alloc_ok(a) -> bool:
    if type(a) is not Alloc or not _ident_ok(a.job_id) or not _ident_ok(a.machine_id):
        return False
    if type(a.task_index) is not int or a.task_index < 0 or not _resources_ok(a.resources):
        return False
    if type(a.priority) is not int or type(a.scheduler) is not str:
        return False
    placed_at = a.placed_at
    if type(placed_at) is not float or not (0.0 < placed_at < math.inf or (placed_at == 0.0 and
                                                                           math.copysign(1.0, placed_at) > 0)):
        return False  # -0.0 would decode as 0.0
    return a.running is True or a.running is False
