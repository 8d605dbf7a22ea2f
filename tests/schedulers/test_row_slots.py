"""RowSlots and with_row: rows handed out, released and reused; columns grown with a fill."""

from __future__ import annotations

import numpy as np
import pytest

from schedulers.row_slots import RowSlots, with_row


def test_released_rows_are_reused_and_keys_name_their_rows():
    slots = RowSlots()
    assert [slots.take(k) for k in "abc"] == [0, 1, 2]
    assert slots.release("b") == 1 and "b" not in slots and slots.keys == ["a", None, "c"]
    assert slots.take("d") == 1 and slots.keys == ["a", "d", "c"] and slots.row == {"a": 0, "d": 1, "c": 2}
    assert slots.take("e") == 3 and len(slots) == 4
    with pytest.raises(KeyError):
        slots.release("b")


def test_with_row_doubles_a_column_that_lacks_the_row_and_fills_the_new_rows():
    column = np.array([[1, 2], [3, 4]])
    assert with_row(column, 1, -1) is column
    grown = with_row(column, 2, -1)
    assert grown.tolist() == [[1, 2], [3, 4], [-1, -1], [-1, -1]] and grown.dtype == column.dtype
