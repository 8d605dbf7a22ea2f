"""Text from the cell made safe to print on a terminal (tables, the monitor's screen)."""

from __future__ import annotations


def printable(text: str) -> str:
    """``text`` with every character that is not printable (a newline that would forge a row,
    an ESC that would clear the screen) written as its escape (``\\n``, ``\\x1b``). Job ids
    submitted now cannot hold one (cellstate.jobspec); records stored before may."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
