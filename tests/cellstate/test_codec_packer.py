"""The codec packs and unpacks with msgspec (cellstate.codec.envelope): the bytes and values
are msgpack-python's, for the vendored traces' records and the codec values inside them, and
for any plain value."""

from __future__ import annotations

import gzip
from pathlib import Path

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cellstate.codec.envelope import pack_plain, unpack
from cellstate.codec.fields import CodecError
from cellstate.codec.records import decode_job, decode_machine, encode_job, encode_machine

TRACES = sorted((Path(__file__).resolve().parents[1] / "data" / "traces").rglob("*.omt.gz"))
CODEC = {"machine": (decode_machine, encode_machine), "spec": (decode_job, encode_job)}


def _records(path: Path) -> list:
    with gzip.open(path) as f:
        return list(msgpack.Unpacker(f, raw=False))


def _codec_maps(x):
    """Every codec map (a machine, a bare job spec) nested in ``x``."""
    if isinstance(x, dict):
        if x.get("t") in CODEC and "v" in x:
            yield x
        for value in x.values():
            yield from _codec_maps(value)
    elif isinstance(x, list):
        for value in x:
            yield from _codec_maps(value)


def test_the_vendored_traces_are_found():
    assert len(TRACES) >= 2


@pytest.mark.parametrize("path", TRACES, ids=[p.name for p in TRACES])
def test_trace_records_pack_and_unpack_as_msgpack_does(path):
    maps = 0
    for record in _records(path):
        raw = msgpack.packb(record)
        assert pack_plain(record) == raw
        for d in _codec_maps(record):
            decode, encode = CODEC[d["t"]]
            stored = msgpack.packb(d)
            assert unpack("k", stored, d["t"]) == msgpack.unpackb(stored, raw=False)
            assert encode(decode("k", stored)) == stored
            maps += 1
    assert maps > 0


_PLAIN = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 63, 2 ** 64 - 1) | st.floats(allow_nan=False)
    | st.text(max_size=300) | st.binary(max_size=300),
    lambda inner: st.lists(inner, max_size=20) | st.dictionaries(st.text(max_size=40), inner, max_size=20),
    max_leaves=60)


@given(_PLAIN)
def test_any_plain_value_packs_to_msgpacks_bytes(value):
    raw = msgpack.packb(value)
    assert pack_plain(value) == raw
    assert unpack("k", msgpack.packb({"v": 1, "t": "x", "x": value}), "x")["x"] == msgpack.unpackb(raw, raw=False)


@pytest.mark.parametrize("raw", [b"", b"\xc1", b"\x81\xa1v", msgpack.packb({"v": 1, "t": "x"}) + b"\x00"],
                         ids=["empty", "reserved-byte", "truncated", "trailing-bytes"])
def test_bytes_that_are_not_one_msgpack_value_are_a_codec_error(raw):
    with pytest.raises(CodecError, match="not a msgpack value"):
        unpack("k", raw, "x")


def test_an_int_beyond_64_bits_is_refused_as_msgpack_refuses_it():
    for pack in (pack_plain, msgpack.packb):
        with pytest.raises(OverflowError):
            pack({"a": 2 ** 64})
