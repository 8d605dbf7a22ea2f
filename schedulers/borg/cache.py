"""Borg's equivalence classes and score cache (Borg, EuroSys'15 §3.4).

A task's *signature* is the values of the job fields its chain reads (the union of the
plugins' ``reads``): tasks with equal signatures get equal verdicts and scores on a
machine, so they form one *class*. ``ScoreCache`` keeps, per class and machine, the
verdict and rank computed at the machine's ``mod_revision``; an entry is used only while
the machine is at that revision, so invalidation is exact. It is bounded: when it holds
more than ``max_entries`` entries the least recently used classes are dropped whole.

Entries hold only ints, floats and tuples of them (a verdict is stored as its index in
``ScoreCache.verdicts``), so the cyclic garbage collector untracks them: millions of entries
would otherwise make every full collection walk the whole cache (it doubled the benchmark's
decision time).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Hashable

from cellstate.model import Job
from schedulers.plugin import Verdict

Entry = tuple[int, int, tuple[float, ...] | None]
"""(machine mod_revision, verdict index, rank or None when not feasible)."""


class Signer:
    """Signatures of jobs over the fields ``reads`` and small class ids for them."""

    def __init__(self, reads: frozenset[str]):
        self.fields = tuple(sorted(reads))
        for name in self.fields:
            if name not in Job.__dataclass_fields__:
                raise ValueError(f"a plugin reads job field {name!r}, which Job does not have")
        self._ids: dict[Hashable, int] = {}
        self._issued = 0

    def signature(self, job: Job) -> tuple:
        """The values of the read fields, in field-name order."""
        return tuple(getattr(job, name) for name in self.fields)

    def class_of(self, key: Hashable) -> int:
        """A stable small int for a signature (or any hashable class key)."""
        class_id = self._ids.get(key)
        if class_id is None:
            if len(self._ids) > 1_000_000:
                self._ids.clear()  # ids of dropped classes are never reused for other keys
            self._issued += 1
            class_id = self._ids[key] = self._issued
        return class_id


class ScoreCache:
    """(class id, machine id) -> Entry, least recently used classes dropped past the bound."""

    def __init__(self, max_entries: int):
        if not isinstance(max_entries, int) or isinstance(max_entries, bool) or max_entries < 1:
            raise ValueError(f"score cache: max_entries must be an int >= 1, got {max_entries!r}")
        self.max_entries = max_entries
        self._classes: OrderedDict[int, dict[str, Entry]] = OrderedDict()
        self._estimate = 0  # entries stored since the last exact count, plus that count: >= len(self)
        self.verdicts: list[Verdict] = []  # index -> verdict (kept alive, so ids stay unique)
        self._verdict_index: dict[int, int] = {}  # id(verdict) -> index

    def index_of(self, verdict: Verdict) -> int:
        """The verdict's index in ``verdicts`` (plugins reuse verdict objects: few distinct)."""
        index = self._verdict_index.get(id(verdict))
        if index is None:
            index = self._verdict_index[id(verdict)] = len(self.verdicts)
            self.verdicts.append(verdict)
        return index

    def table(self, class_id: int) -> dict[str, Entry]:
        """The class's entries by machine id (created empty); marks the class recently used."""
        table = self._classes.get(class_id)
        if table is None:
            table = self._classes[class_id] = {}
        else:
            self._classes.move_to_end(class_id)
        return table

    def __len__(self) -> int:
        return sum(len(t) for t in self._classes.values())

    def stored(self, entries: int) -> None:
        """Note that ``entries`` entries were written (new or replacing): keeps ``trim`` cheap."""
        self._estimate += entries

    def trim(self) -> int:
        """Drop least recently used classes until at most ``max_entries`` remain; how many
        dropped. Counts exactly only when the entries noted by ``stored`` may exceed the bound."""
        if self._estimate <= self.max_entries:
            return 0
        total = len(self)
        dropped = 0
        while total > self.max_entries and len(self._classes) > 1:
            _, table = self._classes.popitem(last=False)
            total -= len(table)
            dropped += 1
        if total > self.max_entries:  # one class alone exceeds the bound: sweep stale revisions
            self._classes[next(iter(self._classes))].clear()
            total = 0
        self._estimate = total
        return dropped

    def clear(self) -> None:
        self._classes.clear()
        self._estimate = 0
