"""The replica's pending index by scheduler class (``pending_of_classes``) follows every change
of a job: submission, placement, a changed class, a kill, a delete, and a relist."""

from __future__ import annotations

from dataclasses import replace

from cellstate.memory_store import MemoryStore
from cellstate.keys import CellKeys
from cellstate.model import JobKind
from cellstate.placement_view import ReplicaView
from replica_helpers import job, write

KEYS = CellKeys("classes")


def _expected(view: ReplicaView, classes: set[str]) -> set[str]:
    return {e.id for e in view.pending_jobs()
            if e.record.job.scheduler_class in classes and not e.record.killed and "p" in e.record.tasks}


def _served(view: ReplicaView, lookup, ids) -> set[str]:
    return {i for i in ids if lookup(i) is not None}


def test_the_class_index_follows_each_change_of_a_job():
    store = MemoryStore()
    plain, borg = job("a", "ppp"), job("b", "pp", kind=JobKind.SERVICE)
    borg = replace(borg, job=replace(borg.job, scheduler="borg"))
    write(store, KEYS, plain, borg)
    view = ReplicaView(store, KEYS)
    batch_of, borg_of = view.pending_of_classes({"batch"}), view.pending_of_classes({"borg"})
    both = view.pending_of_classes({"batch", "borg"})
    ids = ["a", "b", "c", "d"]
    steps = [
        lambda: write(store, KEYS, job("c", "pp")),                                   # submitted
        lambda: write(store, KEYS, replace(plain, tasks="aaa")),                      # placed
        lambda: write(store, KEYS, replace(borg, job=replace(borg.job, scheduler=""))),  # class changed
        lambda: write(store, KEYS, job("d", "pp", killed=True)),                      # killed
        lambda: write(store, KEYS, deletes=[KEYS.job("c")]),                          # deleted
        lambda: write(store, KEYS, replace(plain, tasks="apa")),                      # pending again
    ]
    for step in [lambda: None, *steps]:
        step()
        view.pump()
        assert _served(view, batch_of, ids) == _expected(view, {"batch"})
        assert _served(view, borg_of, ids) == _expected(view, {"borg"})
        assert _served(view, both, ids) == _expected(view, {"batch", "borg"})
    assert _served(view, batch_of, ids) == {"a"} and _served(view, borg_of, ids) == set()
    view.replica._reset()  # a relist clears the indexes in place: the lookups stay valid
    view.replica.sync()
    assert _served(view, batch_of, ids) == {"a"}
