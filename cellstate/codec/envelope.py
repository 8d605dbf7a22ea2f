"""The envelope every stored value shares (``cellstate.codec.records``): a msgpack map with
``"v": SCHEMA_VERSION`` and a type tag ``"t"``, and the generic encoder that checks a
value decodes back equal before packing it.

Bytes are packed and unpacked by msgspec's msgpack encoder and untyped decoder: for the
codec's plain maps (str keys; str, int, float, bool, None, lists and maps) they give the
bytes and values ``msgpack.packb``/``unpackb`` give, in about half the time (docs/LIBRARIES.md);
the codec's own checks stay as they are. Trace files keep msgpack's streaming Unpacker."""

from __future__ import annotations

from dataclasses import fields

import msgspec

from cellstate.codec import fields as fc
from cellstate.codec.fields import CodecError

SCHEMA_VERSION = 1
# Reused by every thread (msgspec's encoders and decoders are thread-safe since 0.16).
_ENCODER, _DECODER = msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder()


def unpack(key: str, raw: bytes, tag: str) -> dict:
    """The top-level map of a value, after checking its type tag and schema version."""
    try:
        d = _DECODER.decode(raw)
    except Exception as exc:  # msgspec.DecodeError (not msgpack, truncated, trailing bytes), TypeError
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
        return pack_plain(d)
    except (OverflowError, ValueError, TypeError) as exc:
        raise CodecError(label, "", f"cannot pack: {exc}") from None


# ``msgpack.packb(d)``'s bytes for maps of plain values (dicts, lists, tuples, str, bytes, int,
# float, bool, None; OverflowError for an int beyond 64 bits): msgspec's encoder itself, so a
# call runs no Python frame. (It also packs sets, enums and dataclasses, which msgpack refuses:
# the codec's maps hold none, their builders check every field's exact type first.)
pack_plain = _ENCODER.encode
