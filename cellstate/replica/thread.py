"""``ReplicaThread``: keep a ``Replica`` current from a background thread.

For tools that read the cell from another thread (the monitor): the thread pumps under
a lock and readers take the same lock with ``with replica_thread.locked() as view:``,
so they never see a half-applied batch. Schedulers do not need this: they own their
replica and pump it between decisions.
"""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from typing import Iterator

from cellstate.replica.watched import Replica
from cellstate.store import StoreError

log = logging.getLogger(__name__)


class ReplicaThread:
    """Pumps ``replica`` every ``poll_interval`` seconds (at most ``max_batches`` per lock hold).

    The replica is synced on ``start()`` unless it already is. A store failure that the
    replica gives up on is kept in ``error`` and the thread tries again after
    ``retry_after`` seconds; ``error`` is cleared by the next successful pump.
    """

    def __init__(self, replica: Replica, poll_interval: float = 0.05, max_batches: int = 256,
                 retry_after: float = 1.0):
        if poll_interval <= 0 or max_batches < 1 or retry_after <= 0:
            raise ValueError(f"poll_interval and retry_after must be > 0 and max_batches >= 1, got "
                             f"{poll_interval!r}, {retry_after!r}, {max_batches!r}")
        self.replica = replica
        self.poll_interval = poll_interval
        self.max_batches = max_batches
        self.retry_after = retry_after
        self.error: StoreError | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @contextmanager
    def locked(self) -> Iterator[Replica]:
        """Hold the replica still while reading it."""
        with self._lock:
            yield self.replica

    def start(self) -> ReplicaThread:
        if self._thread is not None:
            raise RuntimeError("ReplicaThread already started")
        with self._lock:
            if self.replica.revision == 0:
                self.replica.sync()
        self._thread = threading.Thread(target=self._run, name="replica-pump", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop pumping and close the replica's watch."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        with self._lock:
            self.replica.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with self._lock:
                    applied = self.replica.pump(0.0, self.max_batches)
                self.error = None
            except StoreError as exc:
                log.warning("replica pump failed, retrying in %.1fs: %s", self.retry_after, exc)
                self.error = exc
                self._stop.wait(self.retry_after)
                continue
            if not applied:
                self._stop.wait(self.poll_interval)

    def __enter__(self) -> ReplicaThread:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
