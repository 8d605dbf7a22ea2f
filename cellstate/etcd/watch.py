"""A watch on an etcd key prefix as a ``WatchStream`` of ``WatchBatch`` objects.

Each stream owns one gRPC bidirectional Watch call, read by a daemon thread that
turns every etcd WatchResponse into one WatchBatch on a queue. Failures are never
hidden: a compacted start revision surfaces as ``Compacted``, a broken stream as
``Unavailable`` (the caller resumes from its last revision + 1); neither reconnects.
"""

from __future__ import annotations

import itertools
import queue
import threading
from typing import Callable, Iterator

import grpc
import etcd3.etcdrpc as rpc

from cellstate.etcd import wire as etcd_wire
from cellstate.store import Compacted, StoreError, Unavailable, WatchBatch

_ids = itertools.count(1)
_CANCELLED = object()


def watch_request(key: bytes, range_end: bytes, start_revision: int) -> rpc.WatchRequest:
    return rpc.WatchRequest(create_request=rpc.WatchCreateRequest(
        key=key, range_end=range_end, start_revision=start_revision))


def batch_revision(response) -> int:
    """The revision a response brings the watcher up to.

    While catching up, etcd stamps a response with the store's *current* revision
    although later responses still carry older events; the last event's revision
    is exact (responses hold whole revisions). Without events: the header revision.
    """
    evs = response.events
    return evs[-1].kv.mod_revision if evs else response.header.revision


class EtcdWatchStream:
    """Batches of one etcd watch; see ``cellstate.store.WatchStream``.

    ``on_broken`` is called (from the reader thread) when the stream fails with a
    connection error, so the owner can mark the endpoint failed.
    """

    def __init__(self, channel: grpc.Channel, request: rpc.WatchRequest, metadata=None,
                 on_broken: Callable[[], None] | None = None):
        self._start_revision = request.create_request.start_revision
        self._batches: queue.SimpleQueue = queue.SimpleQueue()
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._requests.put(request)
        self._cancelled = threading.Event()
        self._error: StoreError | None = None
        self._on_broken = on_broken
        self._call = rpc.WatchStub(channel).Watch(self._request_iter(), metadata=metadata)
        self._thread = threading.Thread(target=self._read, name=f"etcd-watch-{next(_ids)}", daemon=True)
        self._thread.start()

    def next(self, timeout: float | None = None) -> WatchBatch | None:
        """The next batch; None after ``timeout`` seconds or once cancelled.

        Raises Compacted when the start revision is compacted, Unavailable when the
        stream broke, StoreError when etcd cancelled the watch; again on every call.
        """
        if self._error is not None:
            raise self._error
        if self._cancelled.is_set():
            return None
        try:
            item = self._batches.get(timeout=timeout)
        except queue.Empty:
            return None
        if item is _CANCELLED:
            return None
        if isinstance(item, StoreError):
            self._error = item
            raise item
        return item

    def cancel(self) -> None:
        """End the stream and its reader thread; later ``next`` calls return None."""
        if self._cancelled.is_set():
            return
        self._cancelled.set()
        self._requests.put(None)
        self._call.cancel()
        self._batches.put(_CANCELLED)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=5.0)

    def __iter__(self) -> Iterator[WatchBatch]:
        while (batch := self.next()) is not None:
            yield batch

    def _request_iter(self):
        # etcd ends the whole watch when the client half-closes, so block until cancel.
        while (request := self._requests.get()) is not None:
            yield request

    def _read(self) -> None:
        try:
            for response in self._call:
                error = self._deliver(response)
                if error is not None:
                    break
            else:
                error = Unavailable("etcd closed the watch stream")
        except grpc.RpcError as exc:
            if self._cancelled.is_set():
                return
            error = etcd_wire.store_error(exc, "watch")
            if isinstance(error, Unavailable) and self._on_broken is not None:
                self._on_broken()
        except Exception as exc:  # a conversion bug must reach the consumer, not die in this thread
            error = StoreError(f"watch reader failed: {exc!r}")
        self._batches.put(error)
        self._requests.put(None)
        self._call.cancel()

    def _deliver(self, response) -> StoreError | None:
        """Queue the batch of one response; the error that ends the stream, if any."""
        if response.compact_revision:
            return Compacted(response.compact_revision, self._start_revision)
        if response.canceled:
            return etcd_wire.cancelled_watch_error(response.cancel_reason)
        if response.created and not response.events:
            return None
        self._batches.put(WatchBatch(batch_revision(response), etcd_wire.events(response.events)))
        return None
