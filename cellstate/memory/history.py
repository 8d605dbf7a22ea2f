"""The revision history ``MemoryStore`` keeps by default: each key's versions and the log of
every revision's events, and how compaction trims them (as etcd: the state at the compact
revision stays readable; a watch from it replays its puts, not its deletes)."""

from __future__ import annotations

import bisect
import heapq
from typing import Iterator

from cellstate.store import Event, EventKind, KeyValue

Versions = list[tuple[int, KeyValue | None]]  # (revision, kv or tombstone), ascending


def version_at(versions: Versions, revision: int) -> KeyValue | None:
    """The key's value at ``revision`` (None: absent then)."""
    i = bisect.bisect_right(versions, revision, key=lambda entry: entry[0])
    return versions[i - 1][1] if i else None


def compact_versions(history: dict[str, Versions], revision: int) -> bool:
    """Keep, per key, its versions above ``revision`` and its last version at or below it
    unless that is a deletion; keys left with no version are removed. True if any was."""
    dropped = False
    for key, versions in list(history.items()):
        i = bisect.bisect_right(versions, revision, key=lambda entry: entry[0])
        keep_from = i - 1 if i and versions[i - 1][1] is not None else i
        if keep_from > 0:
            del versions[:keep_from]
        if not versions:
            del history[key]
            dropped = True
    return dropped


def compact_log(log: list[tuple[Event, ...]], log_start: int, revision: int) -> int:
    """Drop the log's revisions below ``revision`` (``log[i]`` is revision ``log_start + i``)
    and the deletes at ``revision``; returns the new ``log_start``."""
    drop = revision - log_start
    if drop <= 0:
        return log_start
    del log[:drop]
    if log:
        log[0] = tuple(ev for ev in log[0] if ev.kind is EventKind.PUT)
    return revision


class LiveKeys:
    """The sorted key list of a store without history: every key put since the last prune
    (deleted ones stay until pruned; readers skip them). New keys are appended to a small
    tail, sorted when a scan needs it (puts outnumber scans by far); a full tail is merged
    into a middle list, and a full middle into the main list (where deleted keys are dropped
    once they are half of it). A put costs an append and a share of the sorts and merges
    (each list is merged into one ``MIDDLE_AT / MERGE_AT`` times longer); a prefix scan is
    two bisections per list."""

    MERGE_AT = 2048
    MIDDLE_AT = 32768

    def __init__(self) -> None:
        self._sorted: list[str] = []
        self._middle: list[str] = []  # sorted
        self._tail: list[str] = []  # sorted unless _tail_unsorted
        self._tail_unsorted = False
        self._listed: set[str] = set()

    def add(self, key: str, live: dict) -> None:
        """List ``key``; ``live`` (the current key-values) decides what a prune keeps."""
        if key in self._listed:
            return
        self._listed.add(key)
        self._tail.append(key)
        self._tail_unsorted = True
        if len(self._tail) > self.MERGE_AT:
            self._merge(live)

    def under(self, prefix: str) -> Iterator[str]:
        """Listed keys starting with ``prefix``, sorted."""
        if self._tail_unsorted:
            self._tail.sort()
            self._tail_unsorted = False
        found = [keys for keys in (_under(self._sorted, prefix), _under(self._middle, prefix),
                                   _under(self._tail, prefix)) if keys]
        if len(found) > 1:
            return heapq.merge(*found)
        return iter(found[0] if found else ())

    def _merge(self, live: dict) -> None:
        """Sort the tail into the middle; a long middle into the main list, dropping deleted
        keys once they are half of it."""
        middle = self._middle
        middle.extend(self._tail)
        self._tail.clear()
        self._tail_unsorted = False
        middle.sort()
        if len(middle) <= self.MIDDLE_AT:
            return
        keys = self._sorted
        keys.extend(middle)
        middle.clear()
        if len(keys) > 2 * len(live) + self.MIDDLE_AT:
            keys[:] = [key for key in keys if key in live]
            self._listed = set(keys)
        keys.sort()


def _under(keys: list[str], prefix: str) -> list[str]:
    """The keys of sorted ``keys`` that start with ``prefix``."""
    start = stop = bisect.bisect_left(keys, prefix)
    while stop < len(keys) and keys[stop].startswith(prefix):
        stop += 1
    return keys[start:stop]
