"""An in-memory Store with etcd's semantics, for tests and the fauxmaster.

It follows etcd 3.5 where the contract suite checks it against a real server:
- the revision starts at 1 and rises by one per txn that changed something;
- reads inside a txn see the earlier writes of the same branch;
- history is kept per key until ``compact(C)``: reads at C still work, below C raise
  ``Compacted``; a watch from below C raises ``Compacted``, a watch from C replays the
  puts made at C (etcd drops the deletes at the compact revision);
- leases expire ``ttl`` seconds after their grant or last refresh on the injected clock,
  checked on every operation and by ``expire_leases()``.

``history=False`` (replays): no per-key version history and no revision log. Only the current
revision is readable (older ones raise ``Compacted``, as if compacted at every write); each
commit is handed at once to the open watches, which still see every event in order; a watch
starting at or below the current revision raises ``Compacted`` (relist, then watch from the
listing's revision + 1).
Such a store without leases keeps a put's ``Event`` as the key's entry (it carries every
field of the ``KeyValue`` but the lease, 0 then) and builds the ``KeyValue`` when a read
first returns it.
"""

from __future__ import annotations

import bisect
import itertools
import threading
import time
from typing import Callable, Sequence

from cellstate.codec.memo import wake_codec_memos
from cellstate.fastbuild import builder
from cellstate.memory.history import LiveKeys, compact_log, compact_versions, version_at
from cellstate.memory.lease import LEASE_NOT_FOUND, Lease, MemoryLeases
from cellstate.memory.watch import MemoryWatchStream, fan_out, scan_log, take_pending
from cellstate.store import (
    Compacted, Compare, CompareOp, CompareTarget, Delete, Event, EventKind, Get, KeyValue, Op,
    Put, RangeResult, StoreError, TxnResult, Unavailable, WatchBatch,
)
from cellstate.txn_rules import check_txn

DEFAULT_MAX_TXN_OPS = 128
DEFAULT_MAX_REQUEST_BYTES = 1572864
FUTURE_REVISION = "required revision is a future revision"

_COMPARE = {
    CompareOp.EQ: lambda a, b: a == b,
    CompareOp.NE: lambda a, b: a != b,
    CompareOp.LT: lambda a, b: a < b,
    CompareOp.GT: lambda a, b: a > b,
}
_MOD, _CREATE, _EQ = CompareTarget.MOD, CompareTarget.CREATE, CompareOp.EQ
# Built by the thousand per replay second: without their dataclass __init__ (cellstate.fastbuild).
_KEY_VALUE, _EVENT, _TXN_RESULT = builder(KeyValue), builder(Event), builder(TxnResult)
_PUT_EVENT, _DELETE_EVENT = EventKind.PUT, EventKind.DELETE
_FIELD = {
    CompareTarget.MOD: "mod_revision",
    CompareTarget.CREATE: "create_revision",
    CompareTarget.VERSION: "version",
    CompareTarget.VALUE: "value",
}


class MemoryStore(MemoryLeases):
    """A thread-safe, versioned key-value store in memory (see the module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 max_txn_ops: int = DEFAULT_MAX_TXN_OPS, max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
                 history: bool = True):
        if not isinstance(history, bool):
            raise ValueError(f"history must be a bool, got {history!r}")
        if max_txn_ops < 1 or max_request_bytes < 1:
            raise ValueError(f"limits must be positive (max_txn_ops={max_txn_ops}, "
                             f"max_request_bytes={max_request_bytes})")
        wake_codec_memos()  # readers get the writers' very bytes objects: decodes can be shared
        self.max_txn_ops = max_txn_ops
        self.max_request_bytes = max_request_bytes
        self.clock = clock
        self.history = history
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._waiting = 0  # watches waiting on _changed
        self._revision = 1
        self._compact_revision = 0
        self._kvs: dict[str, KeyValue | Event] = {}  # an Event: a plain put not read yet
        self._keys: list[str] = []  # sorted; every key with current or historical versions
        self._live_keys = LiveKeys()  # without history: the keys (instead of _keys)
        self._history: dict[str, list[tuple[int, KeyValue | None]]] = {}  # (revision, kv or tombstone)
        self._log: list[tuple[Event, ...]] = []  # events of revision _log_start + i
        self._log_start = 2
        self._leases: dict[int, Lease] = {}
        self._lease_ids = itertools.count(1)
        self._watches: set[MemoryWatchStream] = set()
        self._closed = False

    # -- reads -------------------------------------------------------------------------

    def get(self, key: str) -> KeyValue | None:
        with self._lock:
            if self._closed or self._leases:  # (_start_op's work; no call on a replay's reads)
                self._start_op()
            kv = self._kvs.get(key)
            return self._settle(kv) if type(kv) is Event else kv

    def get_many(self, keys: Sequence[str]) -> tuple[int, dict[str, KeyValue]]:
        """Read several keys at one revision: (revision, present keys)."""
        if isinstance(keys, str):
            raise TypeError("get_many needs a sequence of keys, not a str")
        with self._lock:
            self._start_op()
            kvs = self._kvs
            found = {key: self._read(kvs[key]) for key in keys if key in kvs}
            return self._revision, found

    def range(self, prefix: str, revision: int | None = None) -> RangeResult:
        """All keys under ``prefix`` at ``revision`` (default: now), sorted by key;
        ``RangeResult.revision`` is the revision read."""
        with self._lock:
            self._start_op()
            if revision is None or revision == self._revision:
                return RangeResult(self._revision, self._current_range(prefix))
            self._check_readable(revision)
            return RangeResult(revision, self._historical_range(prefix, revision))

    def revision(self) -> int:
        with self._lock:
            self._start_op()
            return self._revision

    def _current_range(self, prefix: str) -> tuple[KeyValue, ...]:
        kvs = self._kvs
        return tuple([self._read(kvs[key]) for key in self._keys_under(prefix) if key in kvs])

    def _read(self, entry: KeyValue | Event) -> KeyValue:
        """The KeyValue of a key's entry."""
        return self._settle(entry) if type(entry) is Event else entry

    def _settle(self, event: Event) -> KeyValue:
        """The KeyValue of a key whose entry is still its put's Event; it replaces the Event."""
        kv = self._kvs[event.key] = _KEY_VALUE(event.key, event.value, event.create_revision,
                                               event.mod_revision, event.version, 0)
        return kv

    def _historical_range(self, prefix: str, revision: int) -> tuple[KeyValue, ...]:
        found = (version_at(self._history[key], revision) for key in self._keys_under(prefix))
        return tuple(kv for kv in found if kv is not None)

    def _keys_under(self, prefix: str):
        if not self.history:
            yield from self._live_keys.under(prefix)
            return
        keys = self._keys
        for i in range(bisect.bisect_left(keys, prefix), len(keys)):
            if not keys[i].startswith(prefix):
                return
            yield keys[i]

    def _check_readable(self, revision: int) -> None:
        if type(revision) is not int or revision < 1:
            raise ValueError(f"revision must be a positive int, got {revision!r}")
        if revision > self._revision:
            raise StoreError(f"{FUTURE_REVISION} (asked {revision}, current {self._revision})")
        if revision < self._oldest_readable():
            raise Compacted(self._oldest_readable(), revision)

    def _oldest_readable(self) -> int:
        """The compact revision; without history every revision but the current is gone."""
        return self._compact_revision if self.history else self._revision

    # -- writes ------------------------------------------------------------------------

    def txn(self, compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op] = ()) -> TxnResult:
        """Run ``success`` if every compare holds, else ``failure``, atomically."""
        leased = check_txn(compares, success, failure, self.max_txn_ops, self.max_request_bytes)
        with self._lock:
            if self._closed or self._leases:
                self._start_op()
            succeeded = self._all_hold(compares)
            branch = success if succeeded else failure
            for op in branch if leased else ():
                if type(op) is Put and op.lease and op.lease not in self._leases:
                    raise StoreError(f"{LEASE_NOT_FOUND}: lease {op.lease} for {op.key!r}")
            reads = self._apply(branch)
            return _TXN_RESULT(succeeded, self._revision, reads)

    def put(self, key: str, value: bytes, lease: int = 0) -> int:
        """Unconditional put; returns the new revision."""
        return self.txn((), (Put(key, value, lease),)).revision

    def delete(self, key: str) -> int:
        """Unconditional delete; returns the store revision after it."""
        return self.txn((), (Delete(key),)).revision

    def _all_hold(self, compares: Sequence[Compare]) -> bool:
        """True when every compare holds; mod_revision and create_revision equality (a commit's
        compares, a submission's ``missing``) inline."""
        kvs = self._kvs
        for compare in compares:
            target = compare.target
            if compare.op is _EQ and (target is _MOD or target is _CREATE):
                kv = kvs.get(compare.key)
                if kv is None:
                    if compare.value != 0:
                        return False
                elif (kv.mod_revision if target is _MOD else kv.create_revision) != compare.value:
                    return False
            elif not self._holds(compare):
                return False
        return True

    def _holds(self, compare: Compare) -> bool:
        kv = self._kvs.get(compare.key)
        if kv is None:
            if compare.target is CompareTarget.VALUE:
                return False  # etcd: a value compare on a missing key always fails
            return _COMPARE[compare.op](0, compare.value)
        return _COMPARE[compare.op](getattr(kv, _FIELD[compare.target]), compare.value)

    def _apply(self, ops: Sequence[Op]) -> tuple[tuple[KeyValue, ...], ...]:
        """Apply a validated branch at revision + 1; commit the revision if anything changed."""
        revision = self._revision + 1
        events: list[Event] = []
        append = events.append
        reads = []
        kvs = self._kvs
        # Without history and leases (a replay), puts and single-key deletes are written here,
        # not by _write_put and _write_delete.
        plain = not self.history and not self._leases
        for op in ops:
            t = type(op)
            if t is Put:
                if plain:
                    key, value = op.key, op.value
                    old = kvs.get(key)
                    if old is None:
                        kvs[key] = event = _EVENT(_PUT_EVENT, key, value, revision, revision, 1)
                        self._live_keys.add(key, kvs)
                    else:  # the key object stored first: every event of the key carries that one str
                        key = old.key
                        kvs[key] = event = _EVENT(_PUT_EVENT, key, value, revision, old.create_revision,
                                                  old.version + 1)
                    append(event)
                else:
                    append(self._write_put(op, revision))
            elif t is Get:
                if op.prefix:
                    reads.append(self._current_range(op.key))
                else:
                    kv = kvs.get(op.key)
                    reads.append(() if kv is None else (self._read(kv),))
            elif plain and not op.prefix:
                if kvs.pop(op.key, None) is not None:
                    append(_EVENT(_DELETE_EVENT, op.key, b"", revision, 0, 0))
            else:
                keys = list(self._keys_under(op.key)) if op.prefix else [op.key]
                events.extend([self._write_delete(key, revision) for key in keys if key in kvs])
        if events:
            self._commit(revision, events)
        return tuple(reads)

    def _write_put(self, op: Put, revision: int) -> Event:
        key, value, lease = op.key, op.value, op.lease
        kvs = self._kvs
        old = kvs.get(key)
        if old is None:
            kv = kvs[key] = _KEY_VALUE(key, value, revision, revision, 1, lease)
            if not self.history:
                self._live_keys.add(key, kvs)  # only a new key: a live one is listed already
        else:
            kv = kvs[key] = _KEY_VALUE(key, value, old.create_revision, revision, old.version + 1, lease)
            if type(old) is KeyValue and old.lease and old.lease in self._leases:
                self._leases[old.lease].keys.discard(key)
        if lease:
            self._leases[lease].keys.add(key)
        if self.history:
            self._record(key, revision, kv)
        return _EVENT(_PUT_EVENT, key, value, revision, kv.create_revision, kv.version)

    def _write_delete(self, key: str, revision: int) -> Event:
        old = self._kvs.pop(key)
        if type(old) is KeyValue and old.lease and old.lease in self._leases:
            self._leases[old.lease].keys.discard(key)
        if self.history:
            self._record(key, revision, None)  # (without history the key stays listed until pruned)
        return _EVENT(_DELETE_EVENT, key, b"", revision, 0, 0)

    def _record(self, key: str, revision: int, kv: KeyValue | None) -> None:
        """Add a version (or a tombstone) to the key's history (stores with history only)."""
        versions = self._history.get(key)
        if versions is None:
            self._history[key] = versions = []
            bisect.insort(self._keys, key)
        versions.append((revision, kv))

    def _commit(self, revision: int, events: list[Event]) -> None:
        self._revision = revision
        if self.history:
            self._log.append(tuple(events))
        elif self._watches:
            fan_out(self._watches, revision, events)
        if self._waiting:  # (no Condition call per commit while no watch waits)
            self._changed.notify_all()

    # -- compaction ----------------------------------------------------------------------

    def compact(self, revision: int) -> None:
        """Drop history below ``revision`` (state at ``revision`` stays readable)."""
        with self._lock:
            self._start_op()
            if type(revision) is not int or revision < 1:
                raise ValueError(f"compact revision must be a positive int, got {revision!r}")
            if revision > self._revision:
                raise StoreError(f"{FUTURE_REVISION} (asked {revision}, current {self._revision})")
            if revision <= self._compact_revision:
                raise Compacted(self._compact_revision, revision)
            self._compact_revision = revision
            if self.history:
                if compact_versions(self._history, revision):
                    self._keys = [key for key in self._keys if key in self._history]
                self._log_start = compact_log(self._log, self._log_start, revision)
            self._changed.notify_all()

    # -- watches -------------------------------------------------------------------------

    def watch(self, prefix: str, start_revision: int) -> MemoryWatchStream:
        """Stream the events under ``prefix`` from ``start_revision`` on, one batch per revision."""
        if type(start_revision) is not int or start_revision < 1:
            raise ValueError(f"watch start revision must be a positive int, got {start_revision!r}")
        with self._lock:
            self._start_op()
            stream = MemoryWatchStream(self, prefix, start_revision)
            if not self.history and start_revision <= self._revision:
                stream.start_gone = True  # its first revisions were never kept
            self._watches.add(stream)
            return stream

    def disconnect_watches(self) -> None:
        """Test hook: every open stream raises Unavailable on its next ``next()``."""
        with self._lock:
            for stream in self._watches:
                stream.broken = True
            self._watches.clear()
            self._changed.notify_all()

    def next_batch(self, stream: MemoryWatchStream, timeout: float | None) -> WatchBatch | None:
        """The stream's next batch (called by MemoryWatchStream.next); a timeout of 0 only
        takes what is there (a replica's pump, once per decision)."""
        deadline = None if not timeout else time.monotonic() + timeout
        with self._lock:
            while True:
                if self._closed:
                    stream.broken = True
                if stream.broken:
                    raise Unavailable(f"watch of {stream.prefix!r} disconnected; resume from revision "
                                      f"{stream.next_revision}")
                if stream.cancelled:
                    return None
                if self._leases:
                    self.expire_leases()
                batch = self._scan(stream)
                if batch is not None or timeout == 0:
                    return batch
                wait = None if deadline is None else deadline - time.monotonic()
                if wait is not None and wait <= 0:
                    return None
                self._waiting += 1
                try:
                    self._changed.wait(self._wait_slice(wait))
                finally:
                    self._waiting -= 1

    def forget_watch(self, stream: MemoryWatchStream) -> None:
        with self._lock:
            self._watches.discard(stream)
            self._changed.notify_all()

    def _scan(self, stream: MemoryWatchStream) -> WatchBatch | None:
        """The stream's next batch: from the log, or (without history) what commits queued on
        it; Compacted when its position is gone."""
        if self.history:
            if stream.next_revision < self._compact_revision:
                raise Compacted(self._compact_revision, stream.next_revision)
            return scan_log(stream, self._log, self._log_start, self._revision)
        if stream.start_gone:
            raise Compacted(self._revision, stream.next_revision)
        return take_pending(stream)

    # -- lifecycle -----------------------------------------------------------------------

    def _start_op(self) -> None:
        """Refuse work after close; expire due leases (lazy expiry)."""
        if self._closed:
            raise Unavailable("memory store is closed")
        if self._leases:  # (every read and write comes here: no call when there is no lease)
            self.expire_leases()

    def close(self) -> None:
        """Close the store: further operations raise Unavailable, open watches break."""
        with self._lock:
            self._closed = True
            self._changed.notify_all()
