"""ReplicaView.apply_outcome: a commit taken in as objects or as written bytes leaves the
same view, and an own commit that shrinks a ledger raises the freed flag either way."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cellstate.codec.records import encode_machine
from cellstate.keys import CellKeys
from cellstate.memory.store import MemoryStore
from cellstate.model import Machine, MachineState
from cellstate.replica.view import ReplicaView, frees_resources
from cellstate.resources import Resources
from cellstate.store import Put
from cellstate.plan import CommitOutcome, MachineEntry

KEYS = CellKeys("view")
M = Machine("m1", Resources(4000, 16384, 100), allocated=Resources(2000, 512), task_count=2)


@pytest.mark.parametrize("as_objects", [True, False], ids=["objects", "bytes"])
@pytest.mark.parametrize("allocated, freed", [(Resources(1000, 256), True), (Resources(3000, 768), False)],
                         ids=["ledger-shrank", "ledger-grew"])
def test_own_commit_is_applied_and_noticed(as_objects, allocated, freed):
    store = MemoryStore()
    store.txn((), [Put(KEYS.machine("m1"), encode_machine(M))])
    view = ReplicaView(store, KEYS)
    view.take_freed()
    new = replace(M, allocated=allocated, writer="me")
    written = {KEYS.machine("m1"): encode_machine(new)}
    revision = store.txn((), [Put(k, v) for k, v in written.items()]).revision
    outcome = CommitOutcome(True, revision, written=written, applied_machines=(MachineEntry(new, revision),),
                            applied=as_objects)
    view.apply_outcome(outcome)
    assert view.machine("m1") == MachineEntry(new, revision) and view.take_freed() is freed
    assert view.pump(0.0) == 0  # the watch's copy is skipped


@pytest.mark.parametrize("change", [
    dict(allocated=Resources(2000, 256, 10)), dict(allocated=Resources(2000, 512, 9)), dict(allocated=Resources(1999, 600, 10)),
    dict(allocated=Resources(2000, 512, 11)), dict(allocated=Resources(2000, 512, 10, (("gpu", 1),))),
    dict(state=MachineState.DOWN), dict(capacity=Resources(4000, 16384, 100)), dict(capacity=Resources(8000, 16384, 100)),
], ids=["memory-shrank", "disk-shrank", "cpu-shrank", "disk-grew", "extra-grew", "down", "equal-capacity",
        "bigger-capacity"])
@pytest.mark.parametrize("tracked", [False, True], ids=["flag", "tracked-ids"])
def test_a_ledger_change_frees_room_as_frees_resources_says(change, tracked):
    """The watched replica's inline check of a machine change (same capacity object, both up,
    core resources) answers as ``frees_resources`` does for every kind of change."""
    store = MemoryStore()
    store.txn((), [Put(KEYS.machine("m1"), encode_machine(replace(M, allocated=Resources(2000, 512, 10))))])
    view = ReplicaView(store, KEYS)
    if tracked:
        view.track_freed_machines()
    view.take_freed()
    old = view.machine("m1").machine
    new = replace(old, **change)
    revision = store.txn((), [Put(KEYS.machine("m1"), encode_machine(new))]).revision
    view.apply_outcome(CommitOutcome(True, revision, applied_machines=(MachineEntry(new, revision),), applied=True))
    expected = frees_resources(old, new)
    assert view.take_freed() is expected
    if tracked:
        assert view.take_freed_machines() == ({"m1"} if expected else set())
