"""Fixtures of the cellstate tests that run on both stores: ``store`` (a memory store, then the
session's etcd) and ``keys`` (the cell on it). A module may define its own ``store``."""

from __future__ import annotations

import pytest

from cellstate.keys import CellKeys
from cellstate.memory.store import MemoryStore


@pytest.fixture(params=["memory", "etcd"])
def store(request):
    if request.param == "memory":
        yield MemoryStore()
    else:
        yield request.getfixturevalue("etcd_store")


@pytest.fixture
def keys(request):
    if "etcd_store" in request.fixturenames:
        return request.getfixturevalue("cell_keys")
    return CellKeys("mem")
