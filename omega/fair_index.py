"""``FairIndex``: a set of pending jobs held in ``fair_order``, updated one job at a time.

``fair_order`` sorts every job it is given: fine for one round, costly when a scheduler with
a backlog of tens of thousands of jobs orders it again for every few jobs it takes. The index
keeps the order's structure between rounds instead — per priority band, each owner's jobs
sorted by (submission time, id) and the owners sorted by their oldest job — so adding,
updating or removing a job costs a few binary searches (jobs added behind their owner's
oldest are sorted in together when the queue is next read), and iterating yields exactly
``fair_order``'s sequence lazily: a caller that stops after k jobs pays for about k.

Why the lazy round-robin is ``fair_order``'s: round r of the turn-taking visits, in the
owners' initial order, every owner with more than r jobs (an owner that runs out leaves the
turn; the others keep their relative order), handing out each one's (r+1)-th oldest job.

``hide`` removes lazily: the job stays in its owner's queue, marked, and putting it back
before a walk reached it costs nothing more (a replayed scheduler's candidates come and go
in waves as room frees and fills: most of them deep in the order). A walk drops the hidden
jobs it meets: an owner whose oldest job is hidden is re-sorted by its oldest job left (its
turn only comes later, so the walk meets it again in the right place), and a hidden job
further down an owner's queue is dropped when its round comes. ``discard`` removes at once
(a job that is gone).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from typing import Iterator

from omega.protocols import JobEntry

_Key = tuple[int, str, float]  # (priority, owner, submitted_at)


class _Band:
    """The jobs of one priority: per owner (submitted_at, id) sorted, owners by oldest job.
    A job added behind its owner's oldest waits in ``arriving`` until the owner's queue is
    read or shrunk (``settle``): many jobs put back into a long queue cost one sort, not one
    list insertion each."""

    __slots__ = ("queues", "heads", "arriving")

    def __init__(self) -> None:
        self.queues: dict[str, list[tuple[float, str]]] = {}
        self.heads: list[tuple[float, str]] = []  # (oldest submitted_at, owner), sorted
        self.arriving: dict[str, list[tuple[float, str]]] = {}  # owner → items > queues[owner][0]

    def add(self, owner: str, item: tuple[float, str]) -> None:
        queue = self.queues.get(owner)
        if queue is None:
            self.queues[owner] = [item]
            insort(self.heads, (item[0], owner))
            return
        if item < queue[0]:
            self._move_head(owner, queue[0][0], item[0])
            queue.insert(0, item)
            return
        arriving = self.arriving.get(owner)
        if arriving is None:
            self.arriving[owner] = [item]
        else:
            arriving.append(item)

    def settle(self, owner: str | None = None) -> None:
        """Sort the arriving jobs of ``owner`` (None: every owner) into their queues."""
        if owner is None:
            for waiting, items in self.arriving.items():
                self._merge(self.queues[waiting], items)
            self.arriving.clear()
        else:
            items = self.arriving.pop(owner, None)
            if items is not None:
                self._merge(self.queues[owner], items)

    @staticmethod
    def _merge(queue: list[tuple[float, str]], items: list[tuple[float, str]]) -> None:
        if len(items) == 1:
            insort(queue, items[0])
        else:
            queue.extend(items)
            queue.sort()  # one long sorted run and a short tail: Timsort sorts the tail and merges once

    def remove(self, owner: str, item: tuple[float, str]) -> None:
        self.settle(owner)
        queue = self.queues[owner]
        at = bisect_left(queue, item)
        if at == len(queue) or queue[at] != item:
            raise KeyError(f"job {item[1]!r} is not in owner {owner!r}'s queue")
        del queue[at]
        if at:
            return
        if queue:
            self._move_head(owner, item[0], queue[0][0])
        else:
            del self.queues[owner]
            del self.heads[bisect_left(self.heads, (item[0], owner))]

    def _move_head(self, owner: str, old: float, new: float) -> None:
        if old == new:
            return
        del self.heads[bisect_left(self.heads, (old, owner))]
        insort(self.heads, (new, owner))


class FairIndex:
    """Pending jobs kept in ``omega.queue.fair_order`` (see the module docstring). Iterating
    while the index changes is not supported."""

    def __init__(self) -> None:
        self._entries: dict[str, JobEntry] = {}  # placed in the bands, hidden or not
        self._keys: dict[str, _Key] = {}
        self._bands: dict[int, _Band] = {}
        self._priorities: list[int] = []  # high first
        self._hidden: set[str] = set()  # discarded, not yet removed from the bands

    def __len__(self) -> int:
        return len(self._entries) - len(self._hidden)

    def __contains__(self, job_id: str) -> bool:
        return job_id in self._entries and job_id not in self._hidden

    def put(self, entry: JobEntry) -> None:
        """Add ``entry``, or replace the job's entry (moving it if its priority, owner or
        submission time changed)."""
        record = entry.record
        spec = record.job
        job_id = spec.id
        key = (spec.priority, spec.owner, record.submitted_at)
        self._hidden.discard(job_id)
        self._entries[job_id] = entry
        old = self._keys.get(job_id)
        if old == key:
            return
        if old is not None:
            self._unplace(job_id, old)
        self._keys[job_id] = key
        band = self._bands.get(key[0])
        if band is None:
            self._bands[key[0]] = band = _Band()
            self._priorities = sorted(self._bands, reverse=True)
        band.add(key[1], (key[2], job_id))

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

    def _unplace(self, job_id: str, key: _Key) -> None:
        band = self._bands[key[0]]
        band.remove(key[1], (key[2], job_id))
        if not band.queues:
            del self._bands[key[0]]
            self._priorities = sorted(self._bands, reverse=True)

    def __iter__(self) -> Iterator[JobEntry]:
        """The held jobs in fair order, lazily (hidden jobs met on the way are dropped)."""
        for priority in list(self._priorities):
            band = self._bands.get(priority)
            if band is not None:
                yield from self._walk(band)
                if not band.queues and self._bands.get(priority) is band:
                    del self._bands[priority]
                    self._priorities = sorted(self._bands, reverse=True)

    def _walk(self, band: _Band) -> Iterator[JobEntry]:
        """One band's round-robin (module docstring), dropping the hidden jobs it meets."""
        band.settle()
        heads, queues, hidden, entries = band.heads, band.queues, self._hidden, self._entries
        active = []
        at = 0
        while at < len(heads):  # round 0, in the owners' order
            owner = heads[at][1]
            queue = queues[owner]
            if queue[0][1] in hidden:
                self._drop_oldest(band, owner)  # the owner moves later (or leaves): look at heads[at] again
                continue
            yield entries[queue[0][1]]
            if len(queue) > 1:
                active.append(owner)
            at += 1
        depth = 1
        while active:
            still = []
            for owner in active:
                queue = queues[owner]
                while len(queue) > depth and queue[depth][1] in hidden:
                    self._forget(queue.pop(depth)[1])
                if len(queue) > depth:
                    yield entries[queue[depth][1]]
                    if len(queue) > depth + 1:
                        still.append(owner)
            active, depth = still, depth + 1

    def _drop_oldest(self, band: _Band, owner: str) -> None:
        """Drop the hidden jobs at the front of ``owner``'s queue and re-sort the owner."""
        queue = band.queues[owner]
        oldest = queue[0][0]
        count = 0
        while count < len(queue) and queue[count][1] in self._hidden:
            self._forget(queue[count][1])
            count += 1
        del queue[:count]
        if queue:
            band._move_head(owner, oldest, queue[0][0])
        else:
            del band.queues[owner]
            del band.heads[bisect_left(band.heads, (oldest, owner))]

    def _forget(self, job_id: str) -> None:
        """A hidden job dropped from its queue by a walk: forget the rest of it."""
        self._hidden.discard(job_id)
        del self._entries[job_id]
        del self._keys[job_id]
