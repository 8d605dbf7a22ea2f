"""The watch stream of ``MemoryStore`` and the two ways it is fed.

With history (the default) a stream is a cursor over the store's revision log (``scan_log``).
Without history (``MemoryStore(history=False)``) the store keeps no log: each commit is fanned
out at once to the live streams (``fan_out``), which queue its events until ``next`` takes
them, every queued revision as one batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Iterator, Sequence

from cellstate.fastbuild import builder
from cellstate.store import Event, WatchBatch

if TYPE_CHECKING:
    from cellstate.memory.store import MemoryStore

_WATCH_BATCH = builder(WatchBatch)  # one per commit and stream: without its dataclass __init__


class MemoryWatchStream:
    """Batches of the events under ``prefix``, in revision order, from ``start_revision``.

    ``next`` blocks until a batch (or ``timeout`` seconds: None); it raises ``Compacted``
    when its next revision was compacted away (without history: when it started at or below
    the store's revision) and ``Unavailable`` once the store was closed or
    ``disconnect_watches()`` broke it. After ``cancel`` it returns None.
    """

    def __init__(self, store: MemoryStore, prefix: str, start_revision: int):
        self.prefix = prefix
        self.next_revision = start_revision
        self.broken = False
        self.cancelled = False
        self.start_gone = False  # store without history: it started at a revision not kept
        self.pending: list[Event] = []  # fanned-out events (store without history) ...
        self.pending_revision = 0  # ... up to this revision
        self._store = store

    def next(self, timeout: float | None = None) -> WatchBatch | None:
        if timeout is not None and timeout < 0:
            raise ValueError(f"watch timeout must be >= 0 seconds, got {timeout!r}")
        store = self._store
        if timeout == 0 and not self.pending and not (self.broken or self.start_gone or store.history
                                                      or store._closed or store._leases):
            return None  # what next_batch answers then (a replica's pump asks once more per pump)
        return store.next_batch(self, timeout)

    def cancel(self) -> None:
        self.cancelled = True
        self.pending.clear()
        self._store.forget_watch(self)

    def __iter__(self) -> Iterator[WatchBatch]:
        """Batches until the stream is cancelled."""
        while True:
            batch = self.next()
            if batch is None:
                return
            yield batch


def scan_log(stream: MemoryWatchStream, log: Sequence[tuple[Event, ...]], log_start: int,
             revision: int) -> WatchBatch | None:
    """The first revision from the stream's position (up to ``revision``) with events under
    its prefix, one revision per batch; ``log[i]`` holds the events of ``log_start + i``."""
    prefix = stream.prefix
    while stream.next_revision <= revision:
        at = stream.next_revision
        index = at - log_start
        stream.next_revision += 1
        if index < 0:
            continue  # revision 1 and the unrecorded past before any write
        events = tuple(ev for ev in log[index] if ev.key.startswith(prefix))
        if events:
            return WatchBatch(at, events)
    return None


def fan_out(streams: Iterable[MemoryWatchStream], revision: int, events: Sequence[Event]) -> None:
    """Queue the events of ``revision`` under each live stream's prefix on that stream
    (streams that start later than ``revision`` skip it). Consecutive streams with the same
    prefix share one filtering (a replay's replicas all watch the cell)."""
    last_prefix = mine = None
    for stream in streams:
        if stream.cancelled or stream.broken or revision < stream.next_revision:
            continue
        prefix = stream.prefix
        if prefix != last_prefix:
            last_prefix = prefix
            if len(events) == 1:  # (most commits: one put, no comprehension)
                mine = events if events[0].key.startswith(prefix) else None
            else:
                mine = [ev for ev in events if ev.key.startswith(prefix)]
        if mine:
            stream.pending += mine
            stream.pending_revision = revision


def take_pending(stream: MemoryWatchStream) -> WatchBatch | None:
    """Every queued event of the stream as one batch up to the last revision queued (None
    when nothing is queued); the stream's position moves past that revision."""
    events = stream.pending
    if not events:
        return None
    stream.pending = []
    revision = stream.pending_revision
    stream.next_revision = revision + 1
    return _WATCH_BATCH(revision, tuple(events))
