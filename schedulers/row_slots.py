"""``RowSlots``: rows of numpy columns for a changing set of keys, and ``with_row`` to grow the
columns. A held key keeps its row; the row of a released key goes to the next new key, so the
columns never need more rows than keys were ever held at once. ``sorted_distinct`` lists a
column's distinct values."""

from __future__ import annotations

from typing import Generic, Hashable, TypeVar

import numpy as np

K = TypeVar("K", bound=Hashable)


class RowSlots(Generic[K]):
    """``row[key]``: the row of a held key; ``keys[row]``: the key of a row (None: spare)."""

    def __init__(self) -> None:
        self.row: dict[K, int] = {}
        self.keys: list[K | None] = []
        self._spare: list[int] = []

    def __len__(self) -> int:
        return len(self.row)

    def __contains__(self, key: K) -> bool:
        return key in self.row

    def take(self, key: K) -> int:
        """A row for ``key``, which must not be held: a spare one, else a new last row."""
        if self._spare:
            row = self._spare.pop()
            self.keys[row] = key
        else:
            row = len(self.keys)
            self.keys.append(key)
        self.row[key] = row
        return row

    def release(self, key: K) -> int:
        """Free ``key``'s row (KeyError if not held) and return it."""
        row = self.row.pop(key)
        self.keys[row] = None
        self._spare.append(row)
        return row


def with_row(column: np.ndarray, row: int, fill) -> np.ndarray:
    """``column`` if it has ``row``, else a copy twice as long, the new rows set to ``fill``."""
    if row < len(column):
        return column
    grown = np.full((2 * len(column),) + column.shape[1:], fill, dtype=column.dtype)
    grown[:len(column)] = column
    return grown


def sorted_distinct(values: np.ndarray) -> list[int]:
    """The distinct values of ``values``, ascending (``np.unique``, without its sort when they
    are all equal: e.g. a spread job's one task per machine)."""
    if not len(values):
        return []
    low = values.min()
    if low == values.max():
        return [int(low)]
    return np.unique(values).tolist()
