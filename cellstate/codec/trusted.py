"""Encoders for values built by the cell's own code (the committer, agents): the same bytes
as ``cellstate.codec.records``'s ``encode_machine``/``encode_alloc``, without their decode-back
self-check when cheap field checks prove the value valid.

``codec.encode_*`` builds the map, decodes it back and compares the result with the value
(a complete but costly proof that whatever is written decodes equal: half of a commit's
encoding time). Here straight-line checks of every field's exact type and range accept the
common shape: ids without "/", resource vectors of non-negative ints (extras: sorted, distinct
non-core str names, positive ints), str
attributes, a frozenset of non-empty str packages, (str, str) labels with distinct names,
a ``MachineState``, non-negative int task count, float times. Each condition is
sufficient for the value to survive the round trip, so accepted values encode exactly as
``codec`` encodes them. Anything else (a str subclass, an int time, any
invalid field) goes through the ``codec`` encoder, which encodes it or raises its precise
``CodecError``. So these encoders are as safe as the public ones, just faster.

msgpack packs a map entry by entry, so a map's bytes are its header and its entries' bytes
in order. Fields that repeat between writes are checked and packed once, and found again by
the identity of their (immutable) objects: a machine's fields beside its ledger (per machine
id), and the fields the claims of one commit share (those of the last alloc packed).
"""

from __future__ import annotations

import math

from cellstate.codec.records import (
    _ATTRIBUTES, ALLOC_MEMO, MACHINE_MEMO, SCHEMA_VERSION, _alloc_map, _alloc_tail_map, _machine_fixed_map,
    encode_alloc, encode_machine,
)
from cellstate.codec.envelope import pack_plain
from cellstate.model import Alloc, Machine, MachineState
from cellstate.resources import CORE_NAMES, Resources

__all__ = ["pack_alloc", "pack_machine"]

_PACK_ERRORS = (OverflowError, ValueError, TypeError)  # e.g. an int beyond 64 bits
_UP = MachineState.UP


def pack_machine(m: Machine) -> bytes:
    """``codec.encode_machine(m)`` (same bytes, same errors), checking fields instead of
    decoding back when ``m`` has the common shape."""
    if type(m) is Machine and type(m.id) is str:
        fixed = _FIXED.get(m.id)
        if fixed is None or not (fixed[0] is m.capacity and fixed[1] is m.zone and fixed[2] is m.rack
                                 and fixed[3] is m.platform and fixed[4] is m.packages and fixed[5] is m.labels):
            fixed = _fixed_part(m)
        ledger = _ledger_map(m) if fixed is not None else None
        if ledger is not None:
            try:
                tail = pack_plain(ledger)
            except _PACK_ERRORS:
                pass  # the codec's encoder names the problem
            else:
                raw = fixed[6][tail[0] & 0x0F] + tail[1:]
                MACHINE_MEMO.put(raw, m)  # decodes back equal, same types: decoders may answer with m
                return raw
    return encode_machine(m)


def _ledger_map(m: Machine) -> dict | None:
    """``codec._machine_ledger_map(m)`` when the fields a ledger write changes (state,
    allocated, task count, writer) are of the common shape; None otherwise."""
    state, allocated, tasks, writer = m.state, m.allocated, m.task_count, m.writer
    if type(state) is not MachineState or type(allocated) is not Resources:
        return None
    cpu, memory, disk, extra = allocated.cpu, allocated.memory, allocated.disk, allocated.extra
    if not (type(cpu) is int and cpu >= 0 and type(memory) is int and memory >= 0 and type(disk) is int
            and disk >= 0 and type(tasks) is int and tasks >= 0 and type(writer) is str):
        return None
    if extra != () and not _extra_ok(extra):
        return None
    d = {}
    if state is not _UP:
        d["state"] = state._value_
    if extra:
        d["allocated"] = allocated.to_dict()
    elif cpu or memory or disk:
        d["allocated"] = {"cpu": cpu, "memory": memory, "disk": disk}
    if tasks:
        d["tasks"] = tasks
    if writer:
        d["writer"] = writer
    return d


# The fixed part of each machine's map (id to labels) that passed its checks, by machine id:
# (capacity, zone, rack, platform, packages, labels, heads) with ``heads[n]`` the map's header
# for n trailing entries followed by the packed fixed entries. A ledger write keeps those field
# objects, so its bytes are the head and its packed trailing entries (msgpack packs a map entry
# by entry). Cleared when full.
_FIXED: dict[str, tuple] = {}
_FIXED_MAX = 1 << 16


def _fixed_part(m: Machine) -> tuple | None:
    """Check and pack the fixed fields of ``m`` and remember them; None if they are not of
    the common shape or cannot be packed."""
    if not _fixed_ok(m):
        return None
    try:
        packed = pack_plain(_machine_fixed_map(m))
    except _PACK_ERRORS:
        return None
    count = packed[0] & 0x0F  # a fixmap: at most 9 fixed entries, 13 in all
    heads = tuple(bytes((0x80 | (count + n),)) + packed[1:] for n in range(5))
    if len(_FIXED) >= _FIXED_MAX:
        _FIXED.clear()
    fixed = _FIXED[m.id] = (m.capacity, m.zone, m.rack, m.platform, m.packages, m.labels, heads)
    return fixed


def pack_alloc(a: Alloc) -> bytes:
    """``codec.encode_alloc(a)`` (same bytes, same errors), checking fields instead of
    decoding back when ``a`` has the common shape."""
    if type(a) is Alloc and type(a.task_index) is int and a.task_index >= 0 and _ident_ok(a.machine_id):
        shared = _shared_part(a)
        if shared is not None:
            try:
                if shared[6] is None:  # the first alloc of these shared fields: its map packed whole
                    raw = pack_plain(_alloc_map(a))
                else:
                    raw = shared[6] + pack_plain(("task", a.task_index, "machine", a.machine_id))[1:] + shared[7]
            except _PACK_ERRORS:
                pass  # the codec's encoder names the problem
            else:
                ALLOC_MEMO.put(raw, a)
                return raw
    return encode_alloc(a)


# The fields the claims of one commit share (job id, resources, priority, scheduler, placed_at,
# running) of the last alloc packed, after their checks; from the second alloc sharing them on,
# with the packed map before the task and machine entries (header, v, t, job) and after them.
_LAST_SHARED: tuple = (object(),) * 6 + (None, None)  # (no alloc's fields)


def _shared_part(a: Alloc) -> tuple | None:
    """The checked shared fields of ``a``, packed when the last alloc had the same objects;
    None if they are not of the common shape or cannot be packed."""
    global _LAST_SHARED
    last = _LAST_SHARED
    if (last[0] is a.job_id and last[1] is a.resources and last[2] is a.priority and last[3] is a.scheduler
            and last[4] is a.placed_at and last[5] is a.running):
        if last[6] is None:
            try:
                head = pack_plain({"v": SCHEMA_VERSION, "t": "alloc", "job": a.job_id})
                tail = pack_plain(_alloc_tail_map(a))
            except _PACK_ERRORS:
                return None
            count = 3 + 2 + (tail[0] & 0x0F)  # a fixmap: at most 10 entries
            last = _LAST_SHARED = last[:6] + (bytes((0x80 | count,)) + head[1:], tail[1:])
        return last
    if not (_ident_ok(a.job_id) and _resources_ok(a.resources) and type(a.priority) is int
            and type(a.scheduler) is str and _placed_at_ok(a.placed_at) and (a.running is True or a.running is False)):
        return None
    last = _LAST_SHARED = (a.job_id, a.resources, a.priority, a.scheduler, a.placed_at, a.running, None, None)
    return last


def _ident_ok(x) -> bool:
    return type(x) is str and x != "" and "/" not in x


def _resources_ok(r) -> bool:
    """A vector of non-negative ints whose extras pass ``_extra_ok`` (what decodes back to an
    equal vector)."""
    return (type(r) is Resources and type(r.cpu) is int and r.cpu >= 0 and type(r.memory) is int and r.memory >= 0
            and type(r.disk) is int and r.disk >= 0 and (r.extra == () or _extra_ok(r.extra)))


def _extra_ok(extra) -> bool:
    """Extra resources that decode back equal: a tuple of (name, amount) pairs, names non-empty
    str, not a core name, in increasing order (so distinct), amounts positive ints (0 is
    dropped on decode)."""
    if type(extra) is not tuple:
        return False
    previous = ""
    for item in extra:
        if type(item) is not tuple or len(item) != 2:
            return False
        name, amount = item
        if (type(name) is not str or name <= previous or name in CORE_NAMES or type(amount) is not int
                or amount <= 0):
            return False
        previous = name
    return True


def _fixed_ok(m: Machine) -> bool:
    """The fields a ledger write keeps (id to labels) are of the common shape."""
    if not _ident_ok(m.id) or not _resources_ok(m.capacity):
        return False
    if type(m.zone) is not str or type(m.rack) is not str or type(m.platform) is not str:
        return False
    if type(m.packages) is not frozenset or type(m.labels) is not tuple:
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


def _placed_at_ok(placed_at) -> bool:
    """A float time >= 0 that decodes back the same (not -0.0, which would decode as 0.0)."""
    return type(placed_at) is float and (0.0 < placed_at < math.inf or (placed_at == 0.0 and
                                                                         math.copysign(1.0, placed_at) > 0))
