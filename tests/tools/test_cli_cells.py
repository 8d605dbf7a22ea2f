"""Which cells exist: ``EtcdStore.first_key`` (one keys-only read) and ``tools.cli.common``'s
``cell_exists`` / ``list_cells`` (a cell exists once it has machines)."""

from __future__ import annotations

from cellstate.keys import CellKeys
from tools.cli.common import cell_exists, list_cells


def test_first_key(etcd_store):
    root = f"/fk-{id(etcd_store)}"
    assert etcd_store.first_key(f"{root}/") is None
    for key in ("b/2", "a/1", "a/0", "c"):
        etcd_store.put(f"{root}/{key}", b"x")
    etcd_store.put(f"{root}0", b"outside")  # the next prefix: never returned
    assert etcd_store.first_key(f"{root}/") == f"{root}/a/0"
    assert etcd_store.first_key(f"{root}/", start=f"{root}/a0") == f"{root}/b/2"
    assert etcd_store.first_key(f"{root}/", start=f"{root}/c\0") is None
    assert etcd_store.first_key(f"{root}/b/") == f"{root}/b/2"


def test_cells_exist_once_they_have_machines(etcd_store):
    root = f"/cells-{id(etcd_store)}"
    with_machines = ("prod", "a", "prod-2")
    for cell in with_machines:
        etcd_store.put(CellKeys(cell, root).machine("m1"), b"x")
    etcd_store.put(CellKeys("jobs-only", root).job("j"), b"x")  # submitted to, never initialised
    etcd_store.put(CellKeys("stats-only", root).stats("s"), b"x")
    assert list_cells(etcd_store, root) == ["a", "prod", "prod-2"]
    assert [cell_exists(etcd_store, CellKeys(c, root)) for c in ("prod", "prod-", "jobs-only", "nope")] == [
        True, False, False, False]
    assert list_cells(etcd_store, f"{root}-empty") == []
