"""Field checks of the codec: each returns the value or raises ``CodecError`` naming the field.

Checks are strict about types: ``True`` is not an integer, bytes are not a string.
"""

from __future__ import annotations

import math
import reprlib

SHORT = reprlib.Repr()
SHORT.maxlevel, SHORT.maxstring, SHORT.maxother = 3, 40, 40


class CodecError(ValueError):
    """A value that cannot be encoded or decoded; names the key and the field."""

    def __init__(self, key: str, field: str, message: str):
        self.key, self.field, self.message = key, field, message
        where = f" field {field!r}:" if field else ""
        super().__init__(f"{key}:{where} {message}")


def expected(key: str, field: str, what: str, got) -> CodecError:
    """The error for a field whose value ``got`` is not ``what`` it should be."""
    return CodecError(key, field, f"expected {what}, got {SHORT.repr(got)}")


def integer(key: str, field: str, x, low: int | None = 0) -> int:
    """An int (not a bool) of at least ``low`` (None: any)."""
    if type(x) is not int or (low is not None and x < low):
        what = "an integer" if low is None else ("a non-negative integer" if low == 0 else f"an integer >= {low}")
        raise expected(key, field, what, x)
    return x


def seconds(key: str, field: str, x) -> float:
    """A non-negative finite number (seconds), as a float."""
    t = type(x)
    if (t is not float and t is not int) or not (0 <= x < math.inf):
        raise expected(key, field, "a non-negative finite number", x)
    return float(x)


def text(key: str, field: str, x) -> str:
    """A str (not bytes)."""
    if type(x) is not str:
        raise expected(key, field, "a string", x)
    return x


def flag(key: str, field: str, x) -> bool:
    if x is not True and x is not False:
        raise expected(key, field, "a boolean", x)
    return x


def ident(key: str, field: str, x) -> str:
    """An id: a non-empty str without "/" (ids are parts of keys)."""
    if type(x) is not str or not x or "/" in x:
        raise expected(key, field, 'a non-empty id without "/"', x)
    return x


def member(key: str, field: str, x, table: dict):
    """The enum member whose string value is ``x``."""
    value = table.get(x) if type(x) is str else None
    if value is None:
        raise expected(key, field, "one of " + ", ".join(map(repr, table)), x)
    return value


def mapping(key: str, field: str, x) -> dict:
    if type(x) is not dict:
        raise expected(key, field, "a map", x)
    return x


def sequence(key: str, field: str, x) -> list:
    if type(x) is not list:
        raise expected(key, field, "a list", x)
    return x


def require(key: str, prefix: str, d: dict, names: tuple[str, ...]) -> None:
    """Reject the first of ``names`` missing from ``d``."""
    for name in names:
        if name not in d:
            raise CodecError(key, prefix + name, "missing required field")


def no_unknown(key: str, prefix: str, d: dict, allowed: frozenset) -> None:
    """Reject the first field of ``d`` not in ``allowed``."""
    if not allowed.issuperset(d):
        extra = sorted(repr(k) for k in d if k not in allowed)
        raise CodecError(key, prefix + str(next(k for k in d if k not in allowed)),
                         f"unknown field(s) {', '.join(extra)} (the schema is strict)")
