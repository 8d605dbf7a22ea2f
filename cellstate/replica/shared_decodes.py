"""``SharedDecodes``: the replicas of one process decode each stored value once.

A ``MemoryStore`` hands every watcher (and every listing) the same ``bytes`` object for a
value, so replicas in one process (the fauxmaster's schedulers) can share the decoded
object: it is immutable (frozen dataclasses), and each replica still builds its own entry
with the mod_revision.

The codec's own decoders (``decode_machine``, ``decode_job_record``, ``decode_alloc``)
already share their values process-wide through the codec's memo (``cellstate.codec.memo``,
woken here and by every ``MemoryStore``), so ``decoder`` returns them unchanged: a second
cache in front would only add a lookup and a Python frame to every apply. Any other decode
function is wrapped in a cache keyed by the identity of the bytes object (it holds the
bytes, so the identity cannot be reused while cached) and by the key; it keeps the values
of the last one to two ``generation`` decodes (two dicts swapped, so eviction costs
nothing); ``hits`` and ``misses`` count its answers. A value that fails to decode is not
cached: each caller gets the error itself.
"""

from __future__ import annotations

from typing import Callable, TypeVar

from cellstate.codec.records import decode_alloc, decode_job_record, decode_machine
from cellstate.codec.memo import wake_codec_memos

T = TypeVar("T")
Decode = Callable[[str, bytes], T]
_MEMOIZED = (decode_machine, decode_job_record, decode_alloc)  # shared by the codec's memo


class SharedDecodes:
    """A decode cache shared by replicas (see the module docstring)."""

    def __init__(self, generation: int = 100_000):
        if generation < 1:
            raise ValueError(f"generation must be >= 1 values, got {generation!r}")
        wake_codec_memos()
        self.generation = generation
        self._young: dict[int, tuple[bytes, str, object]] = {}
        self._old: dict[int, tuple[bytes, str, object]] = {}
        self.hits = 0
        self.misses = 0

    def decoder(self, decode: Decode) -> Decode:
        """``decode`` (key, raw) → value, answered from the cache when another replica
        decoded the same bytes object under the same key (the codec's memoized decoders
        are returned as they are: their memo is the shared cache)."""
        if decode in _MEMOIZED:
            return decode

        def shared(key: str, raw: bytes):
            ident = id(raw)
            held = self._young.get(ident) or self._old.get(ident)
            if held is not None and held[0] is raw and held[1] == key:
                self.hits += 1
                return held[2]
            value = decode(key, raw)
            self.misses += 1
            young = self._young
            young[ident] = (raw, key, value)
            if len(young) >= self.generation:
                self._old, self._young = young, {}
            return value
        return shared
