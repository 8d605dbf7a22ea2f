"""A relist after a compaction reports what went away while the watch could not see it: the
machines and jobs deleted in the compacted gap reach ``take_changed_machines`` and
``take_changed_jobs``, so the indexes that follow them (the batch scheduler's ``FreeIndex``)
drop them."""

from __future__ import annotations

from cellstate.memory.store import MemoryStore
from cellstate.replica.view import ReplicaView
from cellstate.resources import Resources
from replica_helpers import job, machine, write
from schedulers.free_index import FreeIndex


def _relisted_view(cell_keys):
    """A view that tracks changes, over m0, m1 and job j, whose watch then meets a compaction
    of a gap that deleted m1 and j and added m2."""
    store = MemoryStore()
    write(store, cell_keys, machine(0), machine(1), job("j"))
    view = ReplicaView(store, cell_keys)
    view.track_changed_machines()
    view.track_changed_jobs()
    index = FreeIndex(view, ["m0", "m1", "m2"])
    write(store, cell_keys, deletes=[cell_keys.machine("m1"), cell_keys.job("j")])
    last = write(store, cell_keys, machine(2))
    store.compact(last)
    view.pump()
    assert view.relists == 1 and view.revision == last
    return view, index


def test_a_relist_reports_the_machines_and_jobs_that_went_away(cell_keys):
    view, _ = _relisted_view(cell_keys)
    assert {"m1", "m2"} <= view.take_changed_machines()
    assert view.take_changed_jobs() == {"j"}
    assert view.machine("m1") is None and view.job("j") is None


def test_the_free_index_drops_a_machine_gone_in_a_relist(cell_keys):
    view, index = _relisted_view(cell_keys)
    index.refresh()
    assert list(index.candidates(Resources(100, 128), 0)) == [0, 2]  # m0 and the new m2, not m1
