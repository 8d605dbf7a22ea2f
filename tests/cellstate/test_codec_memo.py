"""The codec's memo of recent values by their bytes (``cellstate.codec.memo``)."""

from __future__ import annotations

import pytest

from cellstate.codec.records import CodecError, decode_machine, encode_machine
from cellstate.codec.memo import ValueMemo, wake_codec_memos
from cellstate.codec.trusted import pack_machine
from cellstate.model import Machine
from cellstate.resources import Resources

M = Machine("m1", Resources(4000, 1024))


def test_the_bytes_object_and_equal_bytes_are_answered_other_bytes_and_buffers_are_not():
    memo = ValueMemo()
    raw = b"x" * 8
    memo.put(raw, "value")
    assert memo.get(raw) == "value"
    assert memo.get(bytes(bytearray(raw))) == "value"  # equal content, another object: decodes the same
    assert memo.get(b"y" * 8) is None
    with pytest.raises(TypeError):
        memo.get(bytearray(raw))  # a buffer is not looked up (no hash)
    assert decode_machine("machines/m1", bytearray(pack_machine(M))) == M  # the decoders ask with bytes only


@pytest.mark.parametrize("raw", [bytearray(b"abc"), memoryview(b"abc")], ids=["bytearray", "memoryview"])
def test_mutable_or_borrowed_buffers_are_not_remembered(raw):
    memo = ValueMemo()
    memo.put(raw, "value")
    assert memo.get(b"abc") is None


@pytest.mark.parametrize("limits, kept", [((4, 1 << 20), 3), ((100, 40), 3), ((100, 15), 1)],
                         ids=["by-entries", "by-bytes", "by-bytes-twice"])
def test_the_older_half_is_dropped_when_full(limits, kept):
    memo = ValueMemo(*limits)
    values = [bytes([i]) * 10 for i in range(7)]
    for i, raw in enumerate(values):
        memo.put(raw, i)
    assert [memo.get(raw) for raw in values] == [None] * (7 - kept) + list(range(7 - kept, 7))


def test_a_value_bigger_than_the_byte_limit_is_not_kept():
    memo = ValueMemo(10, 4)
    memo.put(b"12345", "value")
    assert memo.get(b"12345") is None
    memo.put(b"123", "small")
    assert memo.get(b"123") == "small"


@pytest.mark.parametrize("limits", [(0, 10), (10, 0)], ids=["entries", "bytes"])
def test_bad_limits_are_refused(limits):
    with pytest.raises(ValueError, match="limits"):
        ValueMemo(*limits)


def test_decodes_of_encoded_and_decoded_bytes_share_the_value():
    wake_codec_memos()  # as a MemoryStore does
    raw = pack_machine(M)
    assert decode_machine("machines/m1", raw) is M  # trusted encode: remembered
    assert decode_machine("machines/m1", encode_machine(M)) is M  # equal bytes: the same value
    m2 = Machine("m2", Resources(2000, 512))
    other = encode_machine(m2)  # the generic encoder remembers nothing
    first = decode_machine("machines/m2", other)
    assert first == m2 and first is not m2
    assert decode_machine("machines/m2", other) is first


def test_a_value_that_fails_to_decode_fails_every_time():
    raw = b"\x81\xa1v\x01"  # {"v": 1}: no type tag
    for _ in range(2):
        with pytest.raises(CodecError, match="type tag"):
            decode_machine("machines/m1", raw)


def test_a_dormant_memo_remembers_nothing():
    memo = ValueMemo(awake=False)
    raw = b"x" * 8
    memo.put(raw, "value")
    assert memo.get(raw) is None
    memo.awake = True
    memo.put(raw, "value")
    assert memo.get(raw) == "value"


def test_the_codecs_memos_sleep_until_a_memory_store_exists():
    """A process on etcd (no MemoryStore) keeps nothing: its bytes are new objects each read."""
    import subprocess
    import sys
    script = """
import cellstate.codec.records as codec
from cellstate.codec.memo import codec_memos_awake
from cellstate.codec.trusted import pack_machine
from cellstate.etcd.store import EtcdStore
from cellstate.model import Machine
from cellstate.resources import Resources
m = Machine("m1", Resources(4000, 1024))
raw = pack_machine(m)
assert not codec_memos_awake() and codec.decode_machine("machines/m1", raw) is not m
assert codec.MACHINE_MEMO.get(raw) is None
from cellstate.memory.store import MemoryStore
MemoryStore()
assert codec_memos_awake()
raw = pack_machine(m)
assert codec.decode_machine("machines/m1", raw) is m
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "ok", done.stderr
