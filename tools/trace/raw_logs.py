"""Raw workload logs (an SWF log, a Google cluster-data CSV part) given where an omega trace
is read: recognized by their first bytes and refused saying how to import them."""

from __future__ import annotations

import os
import zlib

from tools.trace.header import GZIP_MAGIC, TraceError

_SNIFF_BYTES = 1 << 16


def raw_log_kind(path) -> str | None:
    """"swf" or "google2011" when ``path`` (plain or gzip) holds a raw workload log rather than
    an omega trace: SWF's ``;`` header comments or lines of 18 numbers, or the CSV rows of a
    Google cluster-data part; else None (a trace, or unreadable). Reads at most 64 KiB."""
    try:
        with open(path, "rb") as raw:
            head = raw.read(_SNIFF_BYTES)
        if head[:2] == GZIP_MAGIC:
            head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, _SNIFF_BYTES)
    except (OSError, zlib.error):
        return None
    if not head or head[0] in _MSGPACK_MAP_MARKERS:
        return None
    lines = [line.strip() for line in head.decode("latin-1").splitlines()[:50] if line.strip()]
    lines = lines[:-1] if len(lines) > 1 else lines  # the last may be cut by the 64 KiB
    if not lines:
        return None
    if all(line.startswith(";") or _numbers(line.split()) == 18 for line in lines):
        return "swf"
    if all(line.count(",") >= 5 and _numbers(line.split(",")[:1]) == 1 for line in lines):
        return "google2011"
    return None


_MSGPACK_MAP_MARKERS = frozenset(range(0x80, 0x90)) | {0xDE, 0xDF}


def _numbers(fields: list[str], empty: bool = False) -> int:
    """How many of ``fields`` are numbers (or empty, with ``empty``)."""
    count = 0
    for field in fields:
        field = field.strip()
        if not field and empty:
            count += 1
            continue
        try:
            float(field)
            count += 1
        except ValueError:
            pass
    return count


_IMPORT_HINTS = {
    "swf": ("a raw SWF log", "omega import swf {path} --out {stem}.omt.gz"),
    "google2011": ("a raw Google cluster-data CSV part",
                   "omega import google2011 --task-events TASK_EVENTS --job-events JOB_EVENTS --out TRACE.omt.gz"),
}


def raw_log_error(path, name: str) -> TraceError | None:
    """The TraceError for a raw workload log given where an omega trace is read, saying how to
    import it; None when ``path`` is no raw log (``raw_log_kind``)."""
    kind = raw_log_kind(path)
    if kind is None:
        return None
    what, command = _IMPORT_HINTS[kind]
    path = os.fspath(path)
    stem = os.path.basename(path)
    for suffix in (".gz", ".swf", ".csv"):
        stem = stem.removesuffix(suffix)
    return TraceError(f"trace {name}: this is {what}, not an omega trace: import it first with "
                      f"`{command.format(path=path, stem=stem or 'trace')}`")
