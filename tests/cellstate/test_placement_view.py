"""ReplicaView.apply_outcome: a commit taken in as objects or as written bytes leaves the
same view, and an own commit that shrinks a ledger raises the freed flag either way."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cellstate.codec import encode_machine
from cellstate.keys import CellKeys
from cellstate.memory_store import MemoryStore
from cellstate.model import Machine
from cellstate.placement_view import ReplicaView
from cellstate.resources import Resources
from cellstate.store import Put
from omega.protocols import CommitOutcome, MachineEntry

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
