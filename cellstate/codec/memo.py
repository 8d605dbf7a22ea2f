"""``ValueMemo``: values the codec recently encoded or decoded, by their bytes.

Decoding is a function of the bytes alone, and a ``MemoryStore`` hands every reader the very
``bytes`` object a writer put. So in one process (a replay) the bytes a committer or an agent
encoded reach the replicas' watches and the agents' reads as the same object, and bytes one
replica decoded reach the other. The codec keeps one memo per value type and answers a decode
of remembered bytes with the remembered value (immutable, so it can be shared):

- after decoding ``bytes`` successfully (failures are not remembered: each caller gets the error);
- after encoding a value through a trusted shape check (``codec_trusted``, ``codec_job_fast``),
  which admits only values that decode back equal with the same types (no ``int`` time that
  would come back a ``float``, no ``-0.0``).

Entries are keyed by ``raw`` itself: a bytes object caches its hash, so the readers of the
object a writer put find it by identity without hashing it again (equal bytes from elsewhere
find the same value, which is what they decode to). Only exact ``bytes`` are remembered and
looked up (a ``bytearray`` may change and has no hash). ``get`` is the entries' dict's own
``get`` (no Python frame per lookup), so it takes exact ``bytes`` only. When the memo reaches
``max_entries`` values or ``max_bytes`` of bytes, the older half of its entries is dropped
(no per-entry eviction). Dict operations are atomic, so threads sharing a memo at worst lose
an entry (a miss).

The codec's memos (``codec_memos``) start dormant: they remember nothing, and a lookup in an
dormant memo hashes nothing. Bytes read from etcd are read once per reader, so a scheduler on
etcd pays neither the memory (up to ``max_bytes`` of bytes plus their values, twice, per
type) nor the puts and hashes. Creating a ``MemoryStore`` wakes them
(``wake_codec_memos``): from then on the process may hand the same bytes object to several
readers, and the memos stay awake for the rest of the process.
"""

from __future__ import annotations

from itertools import islice


def _remembered_nothing(raw) -> None:
    """A dormant memo's ``get``: nothing is remembered (and no bytes are hashed)."""


class ValueMemo:
    """Recently encoded or decoded values of one type, by their bytes (see the module docstring).

    ``get(raw)``: the value remembered for the exact ``bytes`` ``raw``, or None (while awake a
    buffer raises TypeError: it has no hash). Read it from the memo at each use: the memo
    rebinds it when it wakes or drops entries."""

    __slots__ = ("max_entries", "max_bytes", "get", "_awake", "_values", "_bytes")

    def __init__(self, max_entries: int = 200_000, max_bytes: int = 64 << 20, awake: bool = True):
        if max_entries < 1 or max_bytes < 1:
            raise ValueError(f"memo limits must be positive, got {max_entries!r} entries, {max_bytes!r} bytes")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._values: dict[bytes, object] = {}
        self._bytes = 0
        self.awake = awake

    @property
    def awake(self) -> bool:
        """False while dormant: ``put`` remembers nothing and ``get`` hashes nothing."""
        return self._awake

    @awake.setter
    def awake(self, awake: bool) -> None:
        self._awake = awake
        self.get = self._values.get if awake else _remembered_nothing

    def put(self, raw, value: object) -> None:
        """Remember ``value`` as what ``raw`` decodes to (exact ``bytes`` only; nothing while dormant)."""
        if type(raw) is not bytes or not self._awake:
            return
        values = self._values
        values[raw] = value
        self._bytes += len(raw)
        if len(values) >= self.max_entries or self._bytes >= self.max_bytes:
            self._drop_older_half()

    def _drop_older_half(self) -> None:
        """Keep the newer half of the entries (halved again while their bytes reach ``max_bytes``)."""
        values = self._values
        while values:
            values = dict(islice(values.items(), (len(values) + 1) // 2, None))
            self._bytes = sum(map(len, values))
            if self._bytes < self.max_bytes:
                break
        self._values = values
        self.get = values.get

    def clear(self) -> None:
        self._values, self._bytes = {}, 0
        self.awake = self._awake


_CODEC_MEMOS: list[ValueMemo] = []


def codec_memo() -> ValueMemo:
    """A dormant memo for one of the codec's value types, woken by ``wake_codec_memos``."""
    memo = ValueMemo(awake=False)
    _CODEC_MEMOS.append(memo)
    return memo


def wake_codec_memos() -> None:
    """Let the codec's memos remember values from now on (``MemoryStore`` calls this: its
    readers get the writers' very bytes objects, so remembered values are found again)."""
    for memo in _CODEC_MEMOS:
        memo.awake = True


def codec_memos_awake() -> bool:
    """True once ``wake_codec_memos`` ran in this process."""
    return all(memo.awake for memo in _CODEC_MEMOS)
