"""The envelope every stored value shares (``cellstate.codec.records``): a msgpack map with
``"v": SCHEMA_VERSION`` and a type tag ``"t"``, and the generic encoder that checks a
value decodes back equal before packing it."""

from __future__ import annotations

import threading
from dataclasses import fields

import msgpack

from cellstate.codec import fields as fc
from cellstate.codec.fields import CodecError

SCHEMA_VERSION = 1
_PACKERS = threading.local()  # one reused msgpack.Packer per thread (``pack_plain``)


def unpack(key: str, raw: bytes, tag: str) -> dict:
    """The top-level map of a value, after checking its type tag and schema version."""
    try:
        d = msgpack.unpackb(raw, raw=False)
    except Exception as exc:  # msgpack raises many types (ValueError, StackError, TypeError…)
        raise CodecError(key, "", f"not a msgpack value ({type(exc).__name__}: {exc})") from None
    return envelope(key, d, tag)


def envelope(key: str, d, tag: str) -> dict:
    """``d`` after checking it is a map with this codec's schema version and type tag."""
    if type(d) is not dict:
        raise fc.expected(key, "", "a msgpack map", d)
    v = d.get("v")
    if type(v) is not int or v != SCHEMA_VERSION:
        raise CodecError(key, "v", "missing schema version" if v is None else
                         f"unknown schema version {v!r} (this codec reads {SCHEMA_VERSION})")
    if d.get("t") != tag:
        raise CodecError(key, "t", f"expected type tag {tag!r}, got {d.get('t')!r}")
    return d


def encode_map(label: str, value, to_map, from_map) -> dict:
    """The map form of ``value`` after checking it decodes back to an equal value."""
    try:
        d = to_map(value)
    except (AttributeError, TypeError, ValueError) as exc:
        raise CodecError(label, "", f"not a valid {type(value).__name__}: {exc}") from None
    back = from_map(label, d)
    if back != value:
        field = next((f.name for f in fields(value) if getattr(back, f.name) != getattr(value, f.name)), "")
        raise CodecError(label, field, "value does not survive encoding (duplicate, unordered or "
                         "zero-amount entries, or a wrong type)")
    return d


def encode(label: str, value, to_map, from_map) -> bytes:
    """Msgpack bytes of ``encode_map(…)``; CodecError if it cannot be packed."""
    d = encode_map(label, value, to_map, from_map)
    try:
        return msgpack.packb(d)
    except (OverflowError, ValueError, TypeError) as exc:
        raise CodecError(label, "", f"cannot pack: {exc}") from None


def pack_plain(d) -> bytes:
    """``msgpack.packb(d)`` (same bytes, same errors) with this thread's reused packer, for
    maps of plain values only (exact dicts, lists, str, int, float, bool, None: packing them
    runs no Python code, so it never re-enters the packer). ``packb`` builds a packer and
    its buffer per call."""
    try:
        packer = _PACKERS.packer
    except AttributeError:
        packer = _PACKERS.packer = msgpack.Packer()
    return packer.pack(d)
