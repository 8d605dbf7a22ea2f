"""Replica against a real etcd that goes away: resume without loss or duplicates, give up
after the configured outage, relist after a compaction made while it was down.

These tests stop their own single-member etcd (never the session's shared one).
"""

from __future__ import annotations

import time

import pytest

from cellstate.etcd.cluster import EtcdCluster
from cellstate.etcd.options import EtcdOptions
from cellstate.etcd.store import EtcdStore
from cellstate.replica.watched import Replica
from cellstate.store import Unavailable
from replica_helpers import alloc, assert_matches_store, catch_up, job, machine, write

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def own_etcd():
    cluster = EtcdCluster(1, options=EtcdOptions(unsafe_no_fsync=True), client_port=None).start()
    yield cluster
    cluster.stop()


@pytest.fixture
def own_store(own_etcd):
    if not own_etcd.members[0].running:
        own_etcd.restart_member(0)
    store = EtcdStore(own_etcd.endpoints, max_txn_ops=own_etcd.options.max_txn_ops,
                      max_request_bytes=own_etcd.options.max_request_bytes, timeout=2.0)
    yield store
    store.close()


def restart(cluster: EtcdCluster, store: EtcdStore, timeout: float = 30.0) -> None:
    """Start the member again and wait until ``store`` reads from it (the client reconnects
    with a backoff; reads are retried, writes are not, so none is applied twice)."""
    cluster.restart_member(0)
    deadline = time.monotonic() + timeout
    while True:
        try:
            store.revision()
            return
        except Unavailable:
            assert time.monotonic() < deadline, "etcd client did not reconnect"
            time.sleep(0.1)


def test_server_restart_resumes_without_loss_or_duplicates(own_etcd, own_store, cell_keys):
    replica = Replica(own_store, cell_keys)
    replica.sync()
    before = write(own_store, cell_keys, machine(0), machine(1), job("j", "pp"))
    catch_up(replica, before)
    unpumped = write(own_store, cell_keys, machine(0, tasks=1), alloc("j", 0, "m0"))
    own_etcd.members[0].stop()
    restart(own_etcd, own_store)
    after = [write(own_store, cell_keys, machine(i)) for i in range(2, 5)]
    after.append(write(own_store, cell_keys, job("j", "ap"), deletes=[cell_keys.machine("m1")]))
    applied = catch_up(replica, after[-1], timeout=30)
    assert applied == 2 + 3 + 2, "every change after the last pump exactly once"
    assert replica.revision == after[-1] > unpumped
    assert_matches_store(replica, own_store, cell_keys)
    replica.close()


def test_pump_gives_up_while_the_server_is_down_and_resumes_later(own_etcd, own_store, cell_keys):
    replica = Replica(own_store, cell_keys, give_up_after=1.5)
    replica.sync()
    own_etcd.members[0].stop()
    with pytest.raises(Unavailable):
        replica.pump(0.2)
    restart(own_etcd, own_store)
    last = write(own_store, cell_keys, machine(0))
    assert catch_up(replica, last, timeout=30) == 1
    assert replica.resumes >= 1
    assert_matches_store(replica, own_store, cell_keys)
    replica.close()


def test_compaction_during_an_outage_relists(own_etcd, own_store, cell_keys):
    replica = Replica(own_store, cell_keys)
    write(own_store, cell_keys, machine(0), machine(1))
    replica.sync()
    own_etcd.members[0].kill()
    restart(own_etcd, own_store)
    write(own_store, cell_keys, machine(0, tasks=1), alloc("j", 0, "m0"))
    write(own_store, cell_keys, deletes=[cell_keys.machine("m1")])
    last = write(own_store, cell_keys, job("j", "a"))
    own_store.compact(last)
    catch_up(replica, last, timeout=30)
    assert replica.relists == 1 and replica.revision == last
    assert_matches_store(replica, own_store, cell_keys)
    replica.close()
