"""``FairIndex``: a set of pending jobs held in ``fair_order``, updated one job at a time.

``fair_order`` sorts every job it is given: fine for one round, costly when a scheduler with
a backlog of tens of thousands of jobs orders it again for every few jobs it takes. The index
keeps the order's structure between rounds instead — per priority band, each owner's jobs
sorted by (submission time, id) and the owners sorted by their oldest job — so adding,
updating or removing a job costs a few binary searches, and iterating yields exactly
``fair_order``'s sequence lazily: a caller that stops after k jobs pays for about k.

Why the lazy round-robin is ``fair_order``'s: round r of the turn-taking visits, in the
owners' initial order, every owner with more than r jobs (an owner that runs out leaves the
turn; the others keep their relative order), handing out each one's (r+1)-th oldest job.

Groups: a job may be put in a group (any hashable key; None: no group), and ``set_asleep``
leaves every job of a group out of the order at once, or puts them all back, at a cost that
follows the owners with jobs in the group, not the jobs: each owner's jobs are held in one
sorted list per group, an owner's place in the turn is its oldest job in an awake group,
and a walk merges the owner's awake lists. (The fauxmaster's nothing-fits memo puts a
request's thousands of jobs to sleep when no machine has room for it, and wakes them when
one has.)

``hide`` removes one job lazily: the job stays in its owner's list, marked, and putting it
back before a walk reached it costs nothing more. A walk drops the hidden jobs it meets: an
owner whose oldest job is hidden is re-sorted by its oldest job left (its turn only comes
later, so the walk meets it again in the right place), and a hidden job further down is
dropped when its round comes. ``discard`` removes at once (a job that is gone).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from typing import Callable, Container, Hashable, Iterator

from cellstate.plan import JobEntry

_Item = tuple[float, str]  # (submitted_at, job id)
_Key = tuple[int, str, float, Hashable]  # (priority, owner, submitted_at, group)


class _Band:
    """The jobs of one priority: per owner, per group, (submitted_at, id) sorted lists (never
    empty); ``heads`` sorts the owners that have an awake list by the oldest job in them."""

    __slots__ = ("queues", "heads", "oldest")

    def __init__(self) -> None:
        self.queues: dict[str, dict[Hashable, list[_Item]]] = {}
        self.heads: list[tuple[float, str]] = []  # (oldest awake submitted_at, owner), sorted
        self.oldest: dict[str, float] = {}  # owner → its key in heads (absent: not in heads)


class _Cursor:
    """One owner's awake jobs in (submitted_at, id) order during a walk: a merge of its awake
    lists that drops the hidden jobs it meets (through ``drop``)."""

    __slots__ = ("runs", "at")

    def __init__(self, lists: dict[Hashable, list[_Item]], asleep: set[Hashable]):
        self.runs = [items for group, items in lists.items() if group not in asleep] if asleep \
            else list(lists.values())
        self.at = [0] * len(self.runs)

    def next(self, hidden: Container[str], drop: Callable[[str, bool], None]) -> _Item | None:
        """The next visible job (None: none left); hidden ones met are dropped."""
        runs, at = self.runs, self.at
        while True:
            best = -1
            if len(runs) == 1:
                if at[0] < len(runs[0]):
                    best = 0
            else:
                for i, run in enumerate(runs):
                    if at[i] < len(run) and (best < 0 or run[at[i]] < runs[best][at[best]]):
                        best = i
            if best < 0:
                return None
            run = runs[best]
            item = run[at[best]]
            if item[1] in hidden:
                del run[at[best]]
                drop(item[1], not run)
                continue
            at[best] += 1
            return item

    def more(self) -> bool:
        """True if some awake job (maybe hidden) is left after those handed out."""
        at = self.at
        if len(at) == 1:
            return at[0] < len(self.runs[0])
        return any(i < len(run) for i, run in zip(at, self.runs))


class FairIndex:
    """Pending jobs kept in ``omega.queue.fair_order`` (see the module docstring). Iterating
    while the index changes is not supported."""

    def __init__(self) -> None:
        self._entries: dict[str, JobEntry] = {}  # placed in the bands, hidden or not
        self._keys: dict[str, _Key] = {}
        self._bands: dict[int, _Band] = {}
        self._priorities: list[int] = []  # high first
        self._hidden: set[str] = set()  # hidden one by one, not yet removed from the bands
        self._asleep: set[Hashable] = set()  # groups left out
        self._group_owners: dict[Hashable, set[tuple[int, str]]] = {}  # group → (priority, owner) with jobs in it

    def __len__(self) -> int:
        """The number of visible jobs (counted: O(jobs))."""
        return sum(1 for job_id in self._entries if job_id in self)

    def __contains__(self, job_id: str) -> bool:
        key = self._keys.get(job_id)
        return key is not None and job_id not in self._hidden and key[3] not in self._asleep

    def asleep(self, group: Hashable) -> bool:
        """True while ``group``'s jobs are left out (``set_asleep``)."""
        return group in self._asleep

    def group_of(self, job_id: str) -> Hashable:
        """The group the job was put in (None: none, or not held)."""
        key = self._keys.get(job_id)
        return None if key is None else key[3]

    def put(self, entry: JobEntry, group: Hashable = None) -> None:
        """Add ``entry`` in ``group``, or replace the job's entry (moving it if its priority,
        owner, submission time or group changed). It is visible unless its group is asleep."""
        record = entry.record
        spec = record.job
        job_id = spec.id
        key = (spec.priority, spec.owner, record.submitted_at, group)
        self._hidden.discard(job_id)
        self._entries[job_id] = entry
        old = self._keys.get(job_id)
        if old == key:
            return
        if old is not None:
            self._unplace(job_id, old)
        self._keys[job_id] = key
        self._place(job_id, key)

    def discard(self, job_id: str) -> None:
        """Remove the job if held (hidden or not)."""
        if job_id in self._entries:
            self._hidden.discard(job_id)
            del self._entries[job_id]
            self._unplace(job_id, self._keys.pop(job_id))

    def hide(self, job_id: str) -> None:
        """Leave the job out of the order (lazily; see the module docstring) until put again."""
        if job_id in self._entries:
            self._hidden.add(job_id)

    def set_asleep(self, group: Hashable, asleep: bool) -> None:
        """Leave every job of ``group`` out of the order (``asleep``), or put them back; also
        jobs put in the group later. Costs O(owners with jobs in the group)."""
        if group is None:
            raise ValueError("only a named group can sleep (None is the jobs without one)")
        if asleep == (group in self._asleep):
            return
        if asleep:
            self._asleep.add(group)
        else:
            self._asleep.discard(group)
        for priority, owner in self._group_owners.get(group, ()):
            band = self._bands[priority]
            first = band.queues[owner][group][0][0]
            oldest = band.oldest.get(owner)
            if asleep:
                if first == oldest:  # its list may have held the owner's oldest awake job
                    self._refresh_head(band, owner)
            elif oldest is None or first < oldest:
                self._move_head(band, owner, first)

    def submitted_after(self, group: Hashable, t: float) -> Iterator[str]:
        """Ids of the group's jobs (hidden ones not yet dropped included) submitted after ``t``."""
        for priority, owner in self._group_owners.get(group, ()):
            items = self._bands[priority].queues[owner][group]
            for item in items[bisect_left(items, (t, "\U0010ffff")):]:
                yield item[1]

    # -- placing --------------------------------------------------------------------------------

    def _place(self, job_id: str, key: _Key) -> None:
        priority, owner, submitted_at, group = key
        band = self._bands.get(priority)
        if band is None:
            self._bands[priority] = band = _Band()
            self._priorities = sorted(self._bands, reverse=True)
        lists = band.queues.get(owner)
        if lists is None:
            band.queues[owner] = lists = {}
        item = (submitted_at, job_id)
        items = lists.get(group)
        if items is None:
            lists[group] = items = [item]
            self._group_owners.setdefault(group, set()).add((priority, owner))
        elif item > items[-1]:
            items.append(item)
            return  # not a new oldest
        else:
            insort(items, item)
        if items[0] is item and group not in self._asleep:
            self._refresh_head(band, owner)

    def _unplace(self, job_id: str, key: _Key) -> None:
        priority, owner, submitted_at, group = key
        band = self._bands[priority]
        items = band.queues[owner][group]
        item = (submitted_at, job_id)
        at = bisect_left(items, item)
        if at == len(items) or items[at] != item:
            raise KeyError(f"job {job_id!r} is not in owner {owner!r}'s queue")
        del items[at]
        if not items:
            self._drop_list(band, priority, owner, group)
        elif at == 0 and group not in self._asleep:
            self._refresh_head(band, owner)
        if not band.queues:
            del self._bands[priority]
            self._priorities = sorted(self._bands, reverse=True)

    def _drop_list(self, band: _Band, priority: int, owner: str, group: Hashable) -> None:
        """An emptied list: forget it (and the owner if it has no list left); re-sort the owner."""
        lists = band.queues[owner]
        del lists[group]
        owners = self._group_owners[group]
        owners.discard((priority, owner))
        if not owners:
            del self._group_owners[group]
        if not lists:
            del band.queues[owner]
        self._refresh_head(band, owner)

    def _refresh_head(self, band: _Band, owner: str) -> None:
        """Put the owner in ``heads`` at its oldest job in an awake group (out if none)."""
        lists = band.queues.get(owner)
        new = None
        if lists:
            asleep = self._asleep
            for group, items in lists.items():
                if group not in asleep and (new is None or items[0][0] < new):
                    new = items[0][0]
        self._move_head(band, owner, new)

    @staticmethod
    def _move_head(band: _Band, owner: str, new: float | None) -> None:
        """Put the owner in ``heads`` at ``new`` (out if None)."""
        old = band.oldest.get(owner)
        if old == new:
            return
        if old is not None:
            del band.heads[bisect_left(band.heads, (old, owner))]
        if new is None:
            del band.oldest[owner]
        else:
            band.oldest[owner] = new
            insort(band.heads, (new, owner))

    # -- walking --------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[JobEntry]:
        """The visible jobs in fair order, lazily (hidden jobs met on the way are dropped)."""
        for priority in self._priorities:  # replaced, never changed in place, when bands come and go
            band = self._bands.get(priority)
            if band is not None:
                if band.heads:
                    yield from self._walk(priority, band)
                if not band.queues and self._bands.get(priority) is band:
                    del self._bands[priority]
                    self._priorities = sorted(self._bands, reverse=True)

    def _walk(self, priority: int, band: _Band) -> Iterator[JobEntry]:
        """One band's round-robin (module docstring), dropping the hidden jobs it meets."""
        heads, queues, hidden, entries, asleep = band.heads, band.queues, self._hidden, self._entries, self._asleep

        def drop(job_id: str, emptied: bool) -> None:
            _, owner, _, group = self._keys.pop(job_id)
            hidden.discard(job_id)
            del entries[job_id]
            if emptied:
                self._drop_list(band, priority, owner, group)

        active: list[_Cursor] = []
        at = 0
        while at < len(heads):  # round 0, in the owners' order
            oldest, owner = heads[at]
            cursor = _Cursor(queues[owner], asleep)
            item = cursor.next(hidden, drop)
            if item is None or item[0] != oldest:  # hidden jobs dropped: the owner moved (or left)
                self._refresh_head(band, owner)
                continue  # look at heads[at] again
            yield entries[item[1]]
            if cursor.more():
                active.append(cursor)
            at += 1
        while active:  # rounds 1, 2, … in the same order
            still = []
            for cursor in active:
                item = cursor.next(hidden, drop)
                if item is not None:
                    yield entries[item[1]]
                    if cursor.more():
                        still.append(cursor)
            active = still
