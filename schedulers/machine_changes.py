"""``MachineChanges``: one reader's own feed of the ids of machines whose entry changed (or went
away) in a view that hands each change out once (``ReplicaView.take_changed_machines``).

Several indexes may follow one view (the batch scheduler's free index, the service scheduler's
machine index): whichever takes from the view passes the ids on to the other readers of that
view, so every reader sees every change since it was made.
"""

from __future__ import annotations

import weakref

_READERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""view -> weak references to its readers (a reader's reference leaves the list when it dies;
a list of references is iterated several times faster than a ``WeakSet``)."""


def tracks_changes(view) -> bool:
    """True when ``view`` can report its changed machines."""
    return hasattr(view, "take_changed_machines")


class MachineChanges:
    """The ids of the machines of ``view`` that changed since this reader was made or last took."""

    def __init__(self, view) -> None:
        self.view = view
        view.track_changed_machines()
        readers = _READERS.get(view)
        if readers is None:
            readers = _READERS[view] = []
        self._pass_on(view.take_changed_machines(), readers)  # theirs, not this new reader's
        readers.append(weakref.ref(self, readers.remove))
        self._readers: list[weakref.ref] = readers
        self._pending: set[str] = set()

    def take(self) -> set[str]:
        """The ids changed since the last call (or since this reader was made)."""
        fresh = self.view.take_changed_machines()
        if fresh:
            self._pass_on(fresh, self._readers)
        mine = self._pending
        self._pending = set()
        return mine | fresh if mine else fresh

    def _pass_on(self, ids: set[str], readers: list[weakref.ref]) -> None:
        for ref in readers:
            reader = ref()
            if reader is not self and reader is not None:
                reader._pending |= ids
