"""Fault injection: a watch stream that fails with an error other than a lost connection or a
compaction (gRPC UNKNOWN "Stream removed", a watch etcd cancelled, a reader bug). The pump
raises it once; the next pump reopens the watch from the replica's revision + 1, so nothing
is lost and the replica does not stay stuck on a dead stream (it used to re-raise the same
error on every later pump, forever).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cellstate.memory.store import MemoryStore
from cellstate.replica.watched import Replica
from cellstate.store import StoreError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cellstate"))
from replica_helpers import assert_matches_store, job, machine, write  # noqa: E402


class FailedStream:
    """A watch stream that failed with ``error``: like ``EtcdWatchStream``, it raises the
    error again on every ``next``."""

    def __init__(self, stream, error: StoreError):
        self.stream, self.error = stream, error

    def next(self, timeout=None):
        raise self.error

    def cancel(self):
        self.stream.cancel()


class FaultyWatchStore(MemoryStore):
    """A MemoryStore whose first watch fails with ``error``."""

    def __init__(self, error: StoreError):
        super().__init__()
        self.error = error
        self.watches = 0

    def watch(self, prefix, start_revision):
        self.watches += 1
        stream = super().watch(prefix, start_revision)
        return FailedStream(stream, self.error) if self.watches == 1 else stream


@pytest.mark.parametrize("error", [
    StoreError("etcd watch failed: UNKNOWN: Stream removed"),
    StoreError("etcd cancelled the watch: no reason given"),
    StoreError("watch reader failed: KeyError('x')"),
], ids=["grpc-unknown", "cancelled-by-etcd", "reader-bug"])
def test_a_failed_watch_is_reopened_by_the_next_pump(cell_keys, error):
    store = FaultyWatchStore(error)
    replica = Replica(store, cell_keys)
    replica.sync()
    write(store, cell_keys, machine(0))
    with pytest.raises(StoreError) as raised:
        replica.pump()
    assert raised.value is error
    last = write(store, cell_keys, machine(1), job("j", "pp"))
    assert replica.pump() == 3, "every change since the last applied revision, exactly once"
    assert replica.revision == last and store.watches == 2
    assert_matches_store(replica, store, cell_keys)
    replica.close()
