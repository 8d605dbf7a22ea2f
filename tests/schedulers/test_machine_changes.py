"""``MachineChanges`` readers of one view: a reader that is gone stops receiving changes and
leaves the view's reader list."""

from __future__ import annotations

import gc

from test_sched_indexes import TrackingView
from viewlib import machine

from schedulers import machine_changes
from schedulers.machine_changes import MachineChanges


def test_a_dropped_reader_leaves_the_views_readers_and_the_others_go_on():
    view = TrackingView([machine("m0")])
    first, second = MachineChanges(view), MachineChanges(view)
    assert len(machine_changes._READERS[view]) == 2
    del second
    gc.collect()
    assert len(machine_changes._READERS[view]) == 1
    view.add_machine(machine("m1"))
    third = MachineChanges(view)  # takes m1 from the view and passes it on to the live reader
    assert first.take() == {"m1"} and third.take() == set()
    view.add_machine(machine("m2"))
    assert third.take() == {"m2"} and first.take() == {"m2"}
