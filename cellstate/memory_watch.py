"""The watch stream of ``MemoryStore``: a cursor over the store's revision log."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from cellstate.store import WatchBatch

if TYPE_CHECKING:
    from cellstate.memory_store import MemoryStore


class MemoryWatchStream:
    """Batches of the events under ``prefix``, one batch per revision, from ``start_revision``.

    ``next`` blocks until a batch (or ``timeout`` seconds: None); it raises ``Compacted``
    when its next revision was compacted away and ``Unavailable`` once the store was
    closed or ``disconnect_watches()`` broke it. After ``cancel`` it returns None.
    """

    def __init__(self, store: MemoryStore, prefix: str, start_revision: int):
        self.prefix = prefix
        self.next_revision = start_revision
        self.broken = False
        self.cancelled = False
        self._store = store

    def next(self, timeout: float | None = None) -> WatchBatch | None:
        if timeout is not None and timeout < 0:
            raise ValueError(f"watch timeout must be >= 0 seconds, got {timeout!r}")
        return self._store.next_batch(self, timeout)

    def cancel(self) -> None:
        self.cancelled = True
        self._store.forget_watch(self)

    def __iter__(self) -> Iterator[WatchBatch]:
        """Batches until the stream is cancelled."""
        while True:
            batch = self.next()
            if batch is None:
                return
            yield batch
