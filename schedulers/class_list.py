"""``ClassList``: the service index's machines of one zone and capacity class, sorted by their
exact load key, with their free amounts as numpy columns in list order (the search compares a
list's free amounts in one step). Changes may be staged and applied when the list is read
(``staged``, ``apply``): many at once rebuild the list in one sort."""

from __future__ import annotations

import bisect
from operator import itemgetter, mul

import numpy as np

SortKey = tuple  # (-load key, machine id, free of each least_loaded resource…): ascending = most free first
_LOWEST, _HIGHEST = -(2 ** 62), 2 ** 62  # loads a ClassList's load row holds
_SPARE = 2 ** 63 - 1  # a ClassList's spare columns' load: above every key's
_SLIDE = 24  # a key shifted by a slice copy costs about as many as it costs in a list memmove
_REBUILD = 32  # changes are applied by one rebuild when more than 1/_REBUILD of the list (and 8)


class ClassList(list):
    """The sort keys of one zone and capacity class, ascending, and ``table``: column i holds
    key i's first item, its negated load (row 0), and its free amounts (rows 1…, the least_loaded
    resources), kept in step with the keys. ``weights``: the class's load weights (a key's load
    is Σ free_r · weight_r). While the loads fit int64 (``by_load``), a key's place is found in
    the load row (no tuple compares but among keys of equal load); its spare columns hold a
    load above every key's. ``staged``: changes not applied yet, machine id → its key in the
    list as it stands (None: not in it); the owner applies them (``apply``) before reading."""

    __slots__ = ("table", "weights", "by_load", "staged", "_loads", "_rows")

    def __init__(self, width: int, weights: tuple[int, ...] | None = None, by_load: bool = False) -> None:
        super().__init__()
        self.weights = weights if weights is not None else (0,) * width
        self.by_load = by_load
        self.staged: dict[str, SortKey | None] = {}
        self._grow(np.zeros((width + 1, 0), dtype=np.int64))

    def _grow(self, table: np.ndarray) -> None:
        """Take ``table`` with as many spare columns again as it has (16 at least)."""
        grown = np.zeros((len(table), max(16, 2 * table.shape[1])), dtype=np.int64)
        grown[:, :table.shape[1]] = table
        self._take(grown, table.shape[1])

    def _take(self, table: np.ndarray, used: int) -> None:
        """Use ``table``, whose columns past ``used`` are spare."""
        table[0, used:] = _SPARE if self.by_load else 0
        self.table, self._loads, self._rows = table, table[0], tuple(table)

    @property
    def free(self) -> np.ndarray:
        """Row i: the free amounts of key i."""
        return self.table[1:, :len(self)].T

    def find(self, key: tuple, right: bool = False) -> int:
        """Where ``key`` goes: ``bisect_left`` of the keys (``bisect_right`` if ``right``)."""
        split = bisect.bisect_right if right else bisect.bisect_left
        if not self.by_load:
            return split(self, key)
        first = key[0]
        if not _LOWEST < first < _HIGHEST:
            return 0 if first <= _LOWEST else len(self)
        lo = int(self._loads.searchsorted(first))
        n = len(self)
        if lo < n and self[lo][0] == first:
            hi = lo + 1
            if hi < n and self[hi][0] == first:  # more keys of this load: rare
                hi = int(self._loads.searchsorted(first, "right"))
            return split(self, key, lo, hi)
        return lo

    def end_of_room(self, need: tuple[int, ...]) -> int:
        """A position past which no key has room for ``need`` (its free amounts, the weights
        being non-negative, would give a load of at least Σ need_r · weight_r)."""
        first = 1 - sum(map(mul, need, self.weights))
        if self.by_load and _LOWEST < first < _HIGHEST:  # a 1-tuple sorts before keys of its load
            return int(self._loads.searchsorted(first))
        return self.find((first,))

    def apply(self, changes: list[tuple[SortKey | None, SortKey | None]]) -> None:
        """Replace each listed old key by its new one (old None: add; new None: remove), the
        free amounts being a key's items past the id; one by one, or by one rebuild if many."""
        if len(changes) <= 8 or len(changes) * _REBUILD <= len(self):
            for old, key in changes:
                if old is None:
                    self.add(key, key[2:])
                elif key is None:
                    self.remove(old)
                else:
                    self.move(old, key, key[2:])
            return
        gone = {old for old, _ in changes if old is not None}
        new = [key for _, key in changes if key is not None]
        for key in new:
            self._check_load(key)
        keys = [key for key in self if key not in gone] if gone else list(self)
        keys += new
        keys.sort()
        self[:] = keys
        self._fill(keys)

    def _fill(self, keys: list[SortKey]) -> None:
        """A new table for ``keys`` (the list's keys, in order)."""
        n = len(keys)
        table = np.zeros((len(self.table), max(16, n + n // 2)), dtype=np.int64)
        if self.by_load:
            table[0, :n] = np.fromiter(map(itemgetter(0), keys), dtype=np.int64, count=n)
        for row in range(1, len(table)):
            table[row, :n] = np.fromiter(map(itemgetter(row + 1), keys), dtype=np.int64, count=n)
        self._take(table, n)

    def add(self, key: SortKey, frees: tuple[int, ...]) -> None:
        """Insert ``key`` (not listed yet) in order, with its free amounts."""
        self._check_load(key)
        j = self.find(key)
        n = len(self)
        if n == self.table.shape[1]:
            self._grow(self.table)
        if j < n:
            self._shift(j + 1, j, n - j)
        self._set_column(j, key, frees)
        self.insert(j, key)

    def move(self, old: SortKey, key: SortKey, frees: tuple[int, ...]) -> None:
        """Replace listed ``old`` by ``key`` (shifting only the columns between their places)."""
        if self.by_load and not _LOWEST < key[0] < _HIGHEST:
            self._check_load(key)
        j = self.find(old)
        k = self.find(key)
        if k > j:
            k -= 1  # its place once ``old`` is out
            self._shift(j, j + 1, k - j)
        elif k < j:
            self._shift(k + 1, k, j - k)
        if k != j:
            self._slide(j, k)
        self[k] = key
        self._set_column(k, key, frees)

    def _slide(self, j: int, k: int) -> None:
        """Move key ``j`` to place ``k``, the keys between one step towards ``j``: by a slice
        copy of those keys when fewer than the ones two list memmoves would shift, by ``del``
        and ``insert`` otherwise (a slice copies a key ~_SLIDE times as slowly)."""
        if abs(k - j) * _SLIDE >= 2 * len(self) - j - k:
            self.insert(k, self.pop(j))
        elif k > j:
            self[j:k] = self[j + 1:k + 1]
        else:
            self[k + 1:j + 1] = self[k:j]

    def _set_column(self, k: int, key: SortKey, frees: tuple[int, ...]) -> None:
        """Column ``k`` holds ``key``'s load (if ``by_load``) and ``frees`` (scalar writes per
        row: cheaper than one column write of a tuple)."""
        rows = self._rows
        rows[0][k] = key[0] if self.by_load else 0
        for row, amount in zip(rows[1:], frees):
            row[k] = amount

    def remove(self, key: SortKey) -> None:
        """Remove ``key`` (listed) and its free amounts."""
        j = self.find(key)
        del self[j]
        n = len(self)
        table = self.table
        if j < n:
            self._shift(j, j + 1, n - j)
        if self.by_load:
            table[0, n] = _SPARE

    def _shift(self, to: int, start: int, count: int) -> None:
        """Copy ``count`` columns from ``start`` to ``to`` (row by row: faster than one 2-D
        copy of overlapping slices; numpy copies those safely)."""
        for row in self._rows:
            row[to:to + count] = row[start:start + count]

    def _check_load(self, key: SortKey) -> None:
        """Keys are found by bisect alone once a load does not fit the load row."""
        if self.by_load and not _LOWEST < key[0] < _HIGHEST:
            self.by_load = False
            self.table[0] = 0
