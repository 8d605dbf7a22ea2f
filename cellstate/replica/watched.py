"""``Replica``: a watch-fed local copy of one cell, consistent at ``revision``.

``sync()`` lists the cell prefix at one revision R and opens a watch from R + 1;
``pump()`` applies the watch's batches in order. After a broken stream (``Unavailable``)
the watch resumes from ``revision + 1``, retrying with a small backoff and giving up
(re-raising) after ``give_up_after`` seconds of outage; after ``Compacted`` the replica
lists the cell again (counted in ``relists``). Any other stream error is raised once and
the stream dropped: the next ``pump`` reopens the watch from ``revision + 1``.

The owner may apply its own commits before the watch delivers them (``apply_local``,
``apply_entries``): every key remembers its mod_revision and a change is applied only
when it is newer, so the watch's copy of the same change is skipped. Only watch events at or
below the highest revision applied that way can be such copies; later ones are applied without
a look at their key's mod record.

Thread safety: none, by design. One thread (the scheduler that owns the replica) calls
``pump`` between decisions and reads in between; the live views returned by
``machines()`` etc. change on the next apply. For readers on other threads use
``cellstate.replica.thread.ReplicaThread``.
"""

from __future__ import annotations

import gc
import logging
import time
from collections import deque
from collections.abc import Mapping
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator

from tenacity import Retrying, retry_if_exception_type

from cellstate.keys import CellKeys
from cellstate.model import Alloc
from cellstate.replica.state import DecodeErrorHandler, ReplicaState
from cellstate.replica.shared_decodes import SharedDecodes
from cellstate.store import Compacted, EventKind, Store, StoreError, Unavailable, WatchBatch, WatchStream
from cellstate.plan import AllocEntry, JobEntry, MachineEntry

log = logging.getLogger(__name__)

DEFAULT_GIVE_UP_AFTER = 30.0
_FIRST_BACKOFF, _MAX_BACKOFF = 0.05, 1.0
_PUT = EventKind.PUT


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a listing is decoded: hundreds of thousands of
    new, acyclic objects would otherwise trigger repeated full collections of the growing heap
    (a third of the listing time at 200,000 allocations)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class Replica(ReplicaState):
    """A ``CellView`` of one cell kept current from a store's watch (see the module docstring)."""

    def __init__(self, store: Store, keys: CellKeys, *, on_decode_error: DecodeErrorHandler | None = None,
                 clock: Callable[[], float] = time.monotonic, give_up_after: float = DEFAULT_GIVE_UP_AFTER,
                 sleep: Callable[[float], None] = time.sleep, shared_decodes: SharedDecodes | None = None):
        if give_up_after < 0:
            raise ValueError(f"give_up_after must be >= 0 seconds, got {give_up_after!r}")
        super().__init__(keys, on_decode_error, shared_decodes)
        self.store = store
        self.clock = clock
        self.give_up_after = give_up_after
        self._sleep = sleep
        self.revision = 0
        self.relists = 0
        self.resumes = 0
        self._stream: WatchStream | None = None
        self._tombstones: deque[tuple[int, str]] = deque()  # local deletes ahead of the watch
        # The highest revision of a change applied outside the watch (``_applied_at``): a watch
        # event above it is news for its key, without a look at the key's mod record.
        self._local_top = 0
        self._outage_since: float | None = None
        self._backoff = 0.0

    # -- listing ----------------------------------------------------------------------------

    def sync(self) -> int:
        """List the cell at one revision, replace the content with it, watch from the next
        revision; returns that revision. Store errors propagate (content unchanged)."""
        result = self.store.range(self._prefix)
        self._close_stream()
        self._reset()
        self._tombstones.clear()
        with _gc_paused():
            put = self._put
            for kv in result.kvs:
                put(kv.key, kv.value, kv.mod_revision)
            if self._dirty:
                self._flush_derived()
        self.revision = result.revision
        self._stream = self.store.watch(self._prefix, result.revision + 1)
        return result.revision

    def close(self) -> None:
        """Stop watching (the content stays readable)."""
        self._close_stream()

    def _close_stream(self) -> None:
        if self._stream is not None:
            self._stream.cancel()
            self._stream = None

    # -- watching ---------------------------------------------------------------------------

    def pump(self, timeout: float = 0.0, max_batches: int | None = None) -> int:
        """Apply the watch batches that are ready, waiting up to ``timeout`` seconds for the
        first (later ones are taken only if already there), at most ``max_batches``; returns
        how many events changed the replica (skipped duplicates do not count, nor does the
        listing after a compaction, which raises ``relists``)."""
        if timeout < 0:
            raise ValueError(f"pump timeout must be >= 0 seconds, got {timeout!r}")
        if self._stream is None and self.revision == 0:
            raise RuntimeError("Replica.pump() before sync(): list the cell first")
        deadline = self.clock() + timeout if timeout else None  # (a zero wait needs no clock)
        applied = batches = 0
        wait = timeout
        while max_batches is None or batches < max_batches:
            try:
                if self._stream is None:
                    raise Unavailable("no open watch")
                batch = self._stream.next(wait)
            except Unavailable as exc:
                self._resume(exc)
                wait = max(0.0, deadline - self.clock()) if deadline is not None and not batches else 0.0
                continue
            except Compacted:
                self._relist()
                wait = 0.0
                continue
            except StoreError:
                self._close_stream()  # a failed stream stays failed: the next pump reopens the watch
                raise
            self._outage_since = None
            if batch is None:
                break
            applied += self._apply_batch(batch)
            batches += 1
            wait = 0.0
        return applied

    def reconnect(self) -> None:
        """Reopen the watch from ``revision + 1`` (what ``pump`` does after a broken stream)."""
        self._close_stream()
        self._stream = self.store.watch(self._prefix, self.revision + 1)

    def _apply_batch(self, batch: WatchBatch) -> int:
        """Apply the batch's news in order. A run of allocation puts is stored by one
        ``_put_allocs`` call, before the next other change (each key's mod record at once);
        job and machine puts and allocation deletes skip the dispatch by kind."""
        mods, alloc_prefix, job_prefix, machine_prefix = (
            self._mod, self._alloc_prefix, self._job_prefix, self._machine_prefix)
        store_job, store_machine, put_allocs = self._store_job, self._store_machine, self._put_allocs
        run: list = []
        applied = 0
        local_top = self._local_top
        for ev in batch.events:
            key, mod = ev.key, ev.mod_revision
            if mod <= local_top and mod <= mods.get(key, 0):
                continue  # the owner applied this change (or a newer one) already
            applied += 1
            if ev.kind is _PUT:
                mods[key] = mod
                if key.startswith(alloc_prefix):
                    run.append(ev)
                    continue
                if run:
                    put_allocs(run)
                    run = []
                if key.startswith(job_prefix):
                    store_job(key, ev.value, mod)
                elif key.startswith(machine_prefix):
                    store_machine(key, ev.value, mod)
                else:
                    self._store_value(key, ev.value, mod)
            else:
                if run:
                    put_allocs(run)
                    run = []
                del mods[key]
                if key.startswith(alloc_prefix):
                    self._drop_alloc(key)
                    if self.quarantine:
                        self.quarantine.pop(key, None)
                else:
                    self._delete(key)
        if run:
            put_allocs(run)
        if self._ahead:
            self._caught_up(batch.revision)
        if self._dirty:
            self._flush_derived()
        if batch.revision > self.revision:
            self.revision = batch.revision
            if self._tombstones:
                self._prune_tombstones()
        return applied

    def _resume(self, error: Unavailable) -> None:
        """Reopen the watch from revision + 1, probing the store; re-raise the last Unavailable
        once the outage has lasted ``give_up_after`` seconds (a later pump tries again). The
        backoff spans the outage: a watch that reopened and broke again waits before its next try."""
        if self._outage_since is None:
            self._outage_since, self._backoff = self.clock(), 0.0
        elif self._outage_over():
            self._end_outage()
            raise error
        else:
            self._sleep(self._backoff)
        try:
            Retrying(retry=retry_if_exception_type(Unavailable), stop=lambda _: self._outage_over(),
                     before=self._grow_backoff, wait=lambda _: self._backoff, sleep=self._sleep,
                     reraise=True)(self._reopen)
        except Unavailable:
            self._end_outage()
            raise
        self.resumes += 1
        log.info("cell replica resumed cell=%s revision=%d outage_s=%.1f", self.keys.cell, self.revision,
                 self.clock() - self._outage_since)

    def _outage_over(self) -> bool:
        return self.clock() - self._outage_since >= self.give_up_after

    def _grow_backoff(self, _state=None) -> None:
        self._backoff = min(max(_FIRST_BACKOFF, 2 * self._backoff), _MAX_BACKOFF)

    def _end_outage(self) -> None:
        self._close_stream()
        self._outage_since = None  # the next pump starts a new outage window

    def _reopen(self) -> None:
        self.reconnect()
        self.store.revision()  # the watch reports a dead server late; a read reports it now

    def _relist(self) -> None:
        """Sync again after the watch's start revision was compacted away."""
        self.relists += 1
        try:
            self.sync()
        except Unavailable as exc:
            self._resume(exc)  # the reopened watch reports Compacted again: relist then
            return
        log.info("cell replica relisted after a compaction cell=%s revision=%d relists=%d", self.keys.cell,
                 self.revision, self.relists)

    def _prune_tombstones(self) -> None:
        """Drop local-delete records the watch has caught up with (a key put again since
        carries a different mod_revision and is left alone)."""
        tombstones, mods, revision = self._tombstones, self._mod, self.revision
        while tombstones and tombstones[0][0] <= revision:
            mod, key = tombstones.popleft()
            if mods.get(key) == mod:
                del mods[key]

    # -- the owner's own commits ----------------------------------------------------------------

    def apply_local(self, revision: int, puts: Mapping[str, bytes] | Iterable[tuple[str, bytes]] = (),
                    deletes: Iterable[str] = ()) -> int:
        """Apply a txn the caller committed at ``revision`` (every key gets that mod_revision),
        skipping keys the replica already holds at ``revision`` or later; returns how many
        keys changed. ValueError for a key outside the cell."""
        if type(revision) is not int or revision < 1:
            raise ValueError(f"apply_local needs the commit's revision (a positive int), got {revision!r}")
        items = puts.items() if isinstance(puts, Mapping) else puts
        applied = 0
        self._applied_at(revision)
        for key, raw in items:
            if self._newer(key, revision):
                self._put(key, raw, revision)
                applied += 1
        return applied + self._delete_news(deletes, revision)

    def apply_entries(self, machines: Iterable[MachineEntry] = (), jobs: Iterable[JobEntry] = (), *,
                      revision: int = 0, deleted_machines: Iterable[str] = (),
                      deleted_jobs: Iterable[str] = (), allocs: Iterable[AllocEntry] = (),
                      deleted_allocs: Iterable[tuple[str, int]] = ()) -> int:
        """Apply fresh, decoded entries (a failed commit's failure branch, read at ``revision``),
        each only if newer than what the replica holds; ``deleted_*`` ids (and (job, task) of
        allocations) were found absent at ``revision``. A job entry is taken as the stored
        record (a failed placement's fresh job may have tasks whose ``allocs`` it found already
        placed: the same effective record, and every later delete of those allocs writes the
        record again), with no task derived from the other allocations held until the watch
        reaches ``revision`` (``_set_job_ahead``). Returns how many changed."""
        applied = 0
        for job_id, task in deleted_allocs:
            key = self.keys.alloc(job_id, task)
            if revision and self._newer(key, revision):
                self._delete_local(key, revision)
                applied += 1
        for entry in allocs:
            alloc = entry.alloc
            key = self.keys.alloc(alloc.job_id, alloc.task_index)
            if self._newer(key, entry.mod_revision):
                self._mod[key] = entry.mod_revision
                self._applied_at(entry.mod_revision)
                self._set_alloc(key, alloc)
                self.quarantine.pop(key, None)
                applied += 1
        for entry in machines:
            key = self.keys.machine(entry.id)
            if self._newer(key, entry.mod_revision):
                self._mod[key] = entry.mod_revision
                self._applied_at(entry.mod_revision)
                self._machines[entry.id] = entry
                self.quarantine.pop(key, None)
                applied += 1
        for entry in jobs:
            key = self.keys.job(entry.id)
            if self._newer(key, entry.mod_revision):
                self._mod[key] = entry.mod_revision
                self._applied_at(entry.mod_revision)
                self._set_job_ahead(entry.id, entry, max(revision, entry.mod_revision))
                self.quarantine.pop(key, None)
                applied += 1
        gone = [self.keys.machine(i) for i in deleted_machines] + [self.keys.job(i) for i in deleted_jobs]
        for key in gone:
            if revision and self._newer(key, revision):
                self._delete_local(key, revision)
                applied += 1
        if self._dirty:
            self._flush_derived()
        return applied

    def apply_quarantined(self, bad: Mapping[str, tuple[int, str]]) -> int:
        """Quarantine values a failed commit read back (``CommitOutcome.quarantined``: key ->
        (mod_revision, why)), each only if newer than what the replica holds: the key's value
        is dropped and the key recorded as if the watch had brought the bad value (whose event
        is then skipped). Returns how many changed."""
        applied = 0
        for key, (mod, why) in bad.items():
            if self._newer(key, mod):
                self._mod[key] = mod
                self._applied_at(mod)
                kind, _, ident = key[self._plen:].partition("/")
                self._forget(kind, key, ident)
                self._reject(key, ValueError(why))
                applied += 1
        if self._dirty:
            self._flush_derived()
        return applied

    def apply_commit(self, revision: int, machines: Iterable[MachineEntry] = (), jobs: Iterable[JobEntry] = (),
                     allocs: Mapping[str, Alloc] | None = None, deletes: Iterable[str] = ()) -> int:
        """``apply_local`` for a txn the caller committed at ``revision``, given as the decoded
        values it put (entries at ``revision``, allocations by key): nothing to decode. The
        values must be what the txn wrote (the committer built and encoded them). Same skip
        rules; returns how many keys changed. ValueError for a key outside the cell."""
        if type(revision) is not int or revision < 1:
            raise ValueError(f"apply_commit needs the commit's revision (a positive int), got {revision!r}")
        machine_prefix, job_prefix = self._machine_prefix, self._job_prefix  # + id: ``keys.machine``, ``keys.job``
        machines = [(machine_prefix + e.id, e.id, e) for e in machines]
        jobs = [(job_prefix + e.id, e.id, e) for e in jobs]
        applied = self._store_news(machines, self._set_machine, revision)
        applied += self._store_news(jobs, self._set_job, revision)
        if allocs:
            applied += self._store_news([(key, key, alloc) for key, alloc in allocs.items()], self._set_alloc,
                                        revision)
        applied += self._delete_news(deletes, revision)
        if self._dirty:
            self._flush_derived()
        return applied

    def _store_news(self, changes: list[tuple[str, str, object]], store, revision: int) -> int:
        """``store(ident, value)`` each (key, ident, value) this replica has not seen a later
        change of, at ``revision``; how many."""
        mods, quarantine, prefix = self._mod, self.quarantine, self._prefix
        if revision <= self.revision:  # the watch is past it: nothing is news (keys still checked)
            for key, _, _ in changes:
                self._newer(key, revision)
            return 0
        applied = 0
        self._applied_at(revision)
        for key, ident, value in changes:
            if not key.startswith(prefix):
                self._newer(key, revision)  # raises, naming the key
            if revision > mods.get(key, 0):
                mods[key] = revision
                store(ident, value)
                if quarantine:
                    quarantine.pop(key, None)
                applied += 1
        return applied

    def _delete_news(self, keys: Iterable[str], revision: int) -> int:
        """Delete each of ``keys`` this replica has not seen a later change of; how many."""
        deleted = 0
        for key in keys:
            if self._newer(key, revision):
                self._delete_local(key, revision)
                deleted += 1
        return deleted

    def _newer(self, key: str, revision: int) -> bool:
        """True when a change of ``key`` at ``revision`` is news to this replica: later than
        the key's known mod_revision and than the revision the watch has brought it to."""
        if not key.startswith(self._prefix):
            raise ValueError(f"key {key!r} is not in cell {self.keys.cell!r} (prefix {self._prefix!r})")
        return revision > self.revision and revision > self._mod.get(key, 0)

    def _applied_at(self, revision: int) -> None:
        """A change at ``revision`` is applied outside the watch: the watch's events up to
        there are checked against the keys' mod records (``_apply_batch``)."""
        if revision > self._local_top:
            self._local_top = revision

    def _delete_local(self, key: str, revision: int) -> None:
        self._applied_at(revision)
        self._mod[key] = revision  # a tombstone until the watch passes it
        self._tombstones.append((revision, key))
        self._delete(key)
