"""The ``omega-trace`` file: a versioned stream of msgpack records (see docs/TRACE_FORMAT.md).

Record 0 is the header, records 1..N the events (non-decreasing ``t``), record N+1 the end
record ``{"type": "end", "events": N}``; a file without it was not closed cleanly and reads
as truncated. Machines and job specs are stored in the cell codec's map forms
(``cellstate.codec.records.machine_to_map`` / ``job_to_map``; ``tools.trace.records``). Files whose name ends ``.gz`` are
written gzip-compressed; the reader recognizes gzip by its magic bytes.

Any problem while reading raises ``TraceError`` naming the file and the record index.
"""

from __future__ import annotations

import gzip
import math
import os
import zlib
from dataclasses import dataclass

import msgpack

from cellstate.codec import fields as fc
from cellstate.codec.fields import CodecError
from tools.trace.events import TraceEvent
from tools.trace.records import FORMAT_VERSION, _decoders, event_from_record, event_record
from tools.trace.truth import GroundTruth, truth_from_record, truth_record

FORMAT_NAME = "omega-trace"
READ_VERSIONS = (1, 2, 3)
TIME_UNIT = "s"
_HEADER_FIELDS = frozenset("format version source created_at capacity_model cell time_unit notes".split())
_HEADER_FIELDS_V3 = _HEADER_FIELDS | {"ground_truth"}
_CHUNK = 1 << 16
_GZIP_MAGIC = b"\x1f\x8b"


class TraceError(ValueError):
    """A trace file that cannot be written or read; the message names file and record."""


@dataclass(frozen=True, slots=True)
class TraceHeader:
    """What a trace is: where it came from and the assumptions made turning it into events."""

    source: str
    created_at: str  # ISO 8601, UTC
    capacity_model: str  # how machine capacities were chosen, in words and numbers
    cell: str = ""
    notes: str = ""
    version: int = FORMAT_VERSION
    """The file's format version (read); a writer always writes FORMAT_VERSION."""
    ground_truth: str = ""
    """Version 3: what the truth record after the header holds, in words ("" = no truth record).
    A writer given a ``truth`` fills it from the truth's notes when empty."""


# ---------------------------------------------------------------- record maps


def _header_record(h: TraceHeader) -> dict:
    return {"format": FORMAT_NAME, "version": FORMAT_VERSION, "source": h.source, "created_at": h.created_at,
            "capacity_model": h.capacity_model, "cell": h.cell, "time_unit": TIME_UNIT, "notes": h.notes,
            "ground_truth": h.ground_truth}


def _header_from_record(key: str, d) -> TraceHeader:
    fc.mapping(key, "", d)
    if d.get("format") != FORMAT_NAME:
        raise CodecError(key, "format", f"not an {FORMAT_NAME} file (format {d.get('format')!r})")
    if d.get("version") not in READ_VERSIONS or type(d.get("version")) is not int:
        raise CodecError(key, "version", f"unknown version {d.get('version')!r} "
                         f"(this reader reads {', '.join(map(str, READ_VERSIONS))})")
    fields = _HEADER_FIELDS_V3 if d["version"] >= 3 else _HEADER_FIELDS
    fc.require(key, "", d, tuple(sorted(fields)))
    fc.no_unknown(key, "", d, fields)
    if d["time_unit"] != TIME_UNIT:
        raise fc.expected(key, "time_unit", repr(TIME_UNIT), d["time_unit"])
    return TraceHeader(*(fc.text(key, name, d[name])
                         for name in ("source", "created_at", "capacity_model", "cell", "notes")),
                       version=d["version"], ground_truth=fc.text(key, "ground_truth", d.get("ground_truth", "")))


def _error(name: str, index: int, exc: CodecError) -> TraceError:
    where = f" field {exc.field!r}:" if exc.field else ""
    return TraceError(f"trace {name}: record {index}:{where} {exc.message}")


# --------------------------------------------------------------------- writer


class TraceWriter:
    """Writes a trace: the header at once, then ``write(event)`` per event, the end record on
    ``close()``. A path ending ``.gz`` is gzip-compressed; an open binary file is written as
    is (and left open). ``truth`` (format version 3) is written as the record after the header,
    which announces it (``ground_truth``: the header's own text, else the truth's notes). Leaving the ``with`` block by an exception skips the end record, so
    the partial file reads as truncated; with ``atomic`` (a path only) the trace is written to
    a temporary file beside it, renamed to the path by a complete close and removed by an
    incomplete one, so a failed write leaves no file (and an older file at the path intact)."""

    def __init__(self, target, header: TraceHeader, atomic: bool = False, truth: GroundTruth | None = None):
        self.name = os.fspath(target) if isinstance(target, (str, os.PathLike)) else getattr(target, "name", "<stream>")
        self._temp = None
        if isinstance(target, (str, os.PathLike)):
            path = self.name
            if atomic:
                head, tail = os.path.split(self.name)
                path = self._temp = os.path.join(head, f".{tail}.{os.getpid()}.tmp")
            self._file = gzip.open(path, "wb") if self.name.endswith(".gz") else open(path, "wb")
            self._owned = True
        elif atomic:
            raise ValueError("an atomic TraceWriter needs a path, not an open file")
        else:
            self._file, self._owned = target, False
        self._packer = msgpack.Packer()
        self._buffer = bytearray()
        self.events = 0
        self._last_t = 0.0
        self._closed = False
        try:
            if truth is not None:
                from dataclasses import replace
                header = replace(header, ground_truth=header.ground_truth or truth.notes or "ground truth")
            elif header.ground_truth:
                raise TraceError(f"trace {self.name}: the header announces ground truth but none was given")
            self._pack(_header_record(header))
            if truth is not None:
                try:
                    record = truth_record(truth)
                    truth_from_record("truth", record)  # checked as the reader will
                except CodecError as exc:
                    raise _error(self.name, 1, exc) from None
                self._pack(record)
        except BaseException:
            self.close(complete=False)
            raise

    def write(self, event: TraceEvent) -> None:
        """Append an event; TraceError if its time goes backwards or it does not encode."""
        index = self.events + 1
        if event.t < self._last_t:
            raise TraceError(f"trace {self.name}: record {index}: field 't': time goes backwards "
                             f"({event.t!r} < previous {self._last_t!r})")
        try:
            record = event_record(event)
            event_from_record(f"record {index}", record)  # t and ids checked as the reader will
            packed = msgpack.packb(record)
        except CodecError as exc:
            raise _error(self.name, index, exc) from None
        except (OverflowError, ValueError, TypeError) as exc:  # e.g. an integer beyond 64 bits
            raise TraceError(f"trace {self.name}: record {index}: cannot pack: {exc}") from None
        self._buffer += packed
        if len(self._buffer) >= _CHUNK:
            self._flush()
        self._last_t = event.t
        self.events += 1

    def _pack(self, record: dict) -> None:
        self._buffer += self._packer.pack(record)
        if len(self._buffer) >= _CHUNK:
            self._flush()

    def _flush(self) -> None:
        self._file.write(self._buffer)
        self._buffer.clear()

    def close(self, complete: bool = True) -> None:
        """Write the end record (unless ``complete`` is False) and close an owned file."""
        if self._closed:
            return
        self._closed = True
        done = False
        try:
            if complete:
                self._pack({"type": "end", "events": self.events})
            self._flush()
            done = complete
        finally:
            if self._owned:
                self._file.close()
            if self._temp is not None:
                try:
                    if done:
                        os.replace(self._temp, self.name)
                finally:
                    if os.path.lexists(self._temp):  # not renamed: incomplete, or the rename failed
                        os.unlink(self._temp)

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(complete=exc_type is None)


# --------------------------------------------------------------------- reader


def read_trace(path) -> tuple[TraceHeader, TraceReader]:
    """The header of the trace at ``path`` and a streaming iterator over its events (also a
    context manager that closes the file). TraceError on any invalid content."""
    reader = TraceReader(path)
    try:
        header = reader.read_header()
    except BaseException:
        reader.close()
        raise
    return header, reader


_END_PREFIX = msgpack.packb({"type": "end", "events": 0})[:-1]  # the end record up to its count


def check_complete(path) -> None:
    """TraceError naming the file unless it is readable to its end and ends with an end record:
    a cut gzip stream (decompressed to its end, without parsing) or a file cut before its end
    record is refused before a replay starts, not after it ran for minutes (or, with ``until``,
    not at all). The records themselves are checked as they are read."""
    name = os.path.basename(os.fspath(path))
    with open(path, "rb") as raw:
        gz = raw.read(2) == _GZIP_MAGIC
        raw.seek(0)
        if gz:
            tail = b""
            try:
                with gzip.GzipFile(fileobj=raw) as f:
                    while chunk := f.read1(1 << 20):
                        tail = (tail + chunk)[-32:]
            except EOFError:
                raise TraceError(f"trace {name}: truncated (compressed stream ends early)") from None
            except (OSError, zlib.error) as exc:
                raise TraceError(f"trace {name}: corrupt compressed data ({exc})") from None
        else:
            raw.seek(0, os.SEEK_END)
            raw.seek(max(0, raw.tell() - 32))
            tail = raw.read()
    at = tail.rfind(_END_PREFIX)
    if at < 0:
        raise raw_log_error(path, name) or TraceError(f"trace {name}: truncated (it does not end with an end record)")
    try:
        count = msgpack.unpackb(tail[at:])  # exactly the end record, nothing after it
    except Exception:
        count = None
    if not (type(count) is dict and count.get("type") == "end"):
        raise TraceError(f"trace {name}: truncated (it does not end with an end record)")


_SNIFF_BYTES = 1 << 16


def raw_log_kind(path) -> str | None:
    """"swf" or "google2011" when ``path`` (plain or gzip) holds a raw workload log rather than
    an omega trace: SWF's ``;`` header comments or lines of 18 numbers, or the CSV rows of a
    Google cluster-data part; else None (a trace, or unreadable). Reads at most 64 KiB."""
    try:
        with open(path, "rb") as raw:
            head = raw.read(_SNIFF_BYTES)
        if head[:2] == _GZIP_MAGIC:
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


class TraceReader:
    """Iterates the events of one trace file, checking every record as it goes."""

    def __init__(self, path):
        self._path = os.fspath(path)
        self.name = os.path.basename(self._path)
        raw = open(path, "rb")
        self._file = gzip.GzipFile(fileobj=raw) if raw.read(2) == _GZIP_MAGIC else raw
        self._raw = raw
        raw.seek(0)
        self._unpacker = msgpack.Unpacker(raw=False)
        self.index = -1  # index of the last record read
        self._version = FORMAT_VERSION
        self._decoders = _decoders(FORMAT_VERSION)
        self._last_t = 0.0
        self._not_events = 1  # records before the events: the header, and a truth record
        self.truth: GroundTruth | None = None
        """The file's ground truth (format version 3, when its header announces one)."""

    def read_header(self) -> TraceHeader:
        """The header, and the truth record it announces (``self.truth``). A raw workload log
        (SWF, a Google CSV part) is refused saying how to import it (``raw_log_error``)."""
        try:
            record = self._next_record()
            header = _header_from_record("header", record)
        except CodecError as exc:
            raise raw_log_error(self._path, self.name) or _error(self.name, 0, exc) from None
        except TraceError as exc:
            raise raw_log_error(self._path, self.name) or exc from None
        self._version = header.version
        self._decoders = _decoders(header.version)
        if header.ground_truth:
            record = self._next_record()
            try:
                self.truth = truth_from_record("truth", record)
            except CodecError as exc:
                raise _error(self.name, self.index, exc) from None
            self._not_events = 2
        return header

    def __iter__(self):
        return self

    def __next__(self) -> TraceEvent:
        # The hot path, one pass per event: a record the unpacker holds whole, of a known type
        # with exactly its fields and a valid time, is built here; any other goes the long way
        # (``_next_record``, ``_event``: the same event, or the error naming the record).
        if self._file is None:
            raise StopIteration
        unpacker = self._unpacker
        try:
            record = unpacker.unpack()
        except msgpack.OutOfData:
            return self._event(self._next_record())
        except Exception as exc:
            raise self._not_msgpack(exc) from None
        self.index += 1
        kind = record.get("type") if type(record) is dict else None
        entry = self._decoders.get(kind) if type(kind) is str else None
        if (entry is not None and len(record) == entry[0] and entry[1].issuperset(record)
                and type(t := record["t"]) is float and self._last_t <= t < math.inf):
            try:
                event = entry[2](_RECORD_KEY, record, t)
            except CodecError as exc:
                raise _error(self.name, self.index, exc) from None
            self._last_t = t
            return event
        return self._event(record)

    def read_placements(self, into: list) -> TraceEvent | None:
        """Append ``(job, task, machine)`` of each ``task_placed`` record that comes next at the
        time of the last event read to ``into`` (checked as ``__next__`` checks them, without
        building their events); return the event after them, or None at the end of the trace."""
        if self._file is None:
            return None
        try:
            while (record := self._fed_placements(into)) is _OUT_OF_DATA:
                if not self._feed():
                    record = self._next_record()  # at the end of the file: raises
                    break
            return self._event(record)
        except StopIteration:
            return None

    def _fed_placements(self, into: list):
        """``read_placements`` over the records the unpacker holds whole: the first record that
        is not such a placement, or _OUT_OF_DATA."""
        t, append, index = self._last_t, into.append, self.index
        placed = "task_placed" in self._decoders
        try:
            for record in self._unpacker:
                index += 1
                if placed and type(record) is dict and len(record) == 5:
                    try:  # the five fields, or a KeyError
                        if record["type"] == "task_placed" and type(rt := record["t"]) is float and rt == t:
                            job, task, machine = record["job"], record["task"], record["machine"]
                            if (type(job) is str and job and "/" not in job and type(task) is int and task >= 0
                                    and type(machine) is str and machine and "/" not in machine):
                                append((job, task, machine))
                                continue
                    except KeyError:
                        pass
                break
            else:
                record = _OUT_OF_DATA
        except Exception as exc:
            self.index = index
            raise self._not_msgpack(exc) from None
        self.index = index
        return record

    def _event(self, record) -> TraceEvent:
        """The event of ``record`` (StopIteration after the end record)."""
        if type(record) is dict and record.get("type") == "end":
            self._check_end(record)
            self.close()
            raise StopIteration
        try:
            event = event_from_record(_RECORD_KEY, record, self._version)  # errors name self.index
        except CodecError as exc:
            raise _error(self.name, self.index, exc) from None
        if event.t < self._last_t:
            raise TraceError(f"trace {self.name}: record {self.index}: field 't': time goes backwards "
                             f"({event.t!r} < previous {self._last_t!r})")
        self._last_t = event.t
        return event

    def _check_end(self, record: dict) -> None:
        events = record.get("events")
        read = self.index - self._not_events
        if set(record) != {"type", "events"} or events != read or type(events) is not int:
            raise TraceError(f"trace {self.name}: record {self.index}: end record says "
                             f"{events!r} events, read {read}")
        if self._unpack_next() is not _EOF:
            raise TraceError(f"trace {self.name}: record {self.index + 1}: data after the end record")

    def _next_record(self):
        if self._file is None:
            raise StopIteration
        unpacker = self._unpacker
        try:  # a record already fed whole (most), else ``_unpack_next`` feeds on
            record = unpacker.unpack()
        except msgpack.OutOfData:
            record = self._unpack_next()
        except Exception as exc:
            raise self._not_msgpack(exc) from None
        if record is _EOF:
            self.close()
            raise TraceError(f"trace {self.name}: truncated {self._after()} (no end record)")
        self.index += 1
        return record

    def _unpack_next(self):
        """The next record as a msgpack object, or _EOF after the last; TraceError for bytes
        that are not msgpack or a record the file cuts short."""
        unpacker = self._unpacker
        while True:
            try:
                return unpacker.unpack()
            except msgpack.OutOfData:
                if not self._feed():
                    break
            except Exception as exc:
                raise self._not_msgpack(exc) from None
        if self._holds_part_of_record():
            raise TraceError(f"trace {self.name}: truncated {self._after()} "
                             f"(record {self.index + 1} is incomplete)")
        return _EOF

    def _feed(self) -> bool:
        """Feed the unpacker the file's next chunk; False at the end of the file."""
        chunk = self._read_chunk()
        if chunk:
            self._unpacker.feed(chunk)
        return bool(chunk)

    def _holds_part_of_record(self) -> bool:
        """True if the unpacker, out of data, holds part of a record: a lone nil fed after
        whole records unpacks as None, after part of one it does not (or not at all)."""
        self._unpacker.feed(_NIL)
        try:
            return self._unpacker.unpack() is not None
        except Exception:  # OutOfData, or no valid msgpack with the nil in it
            return True

    def _not_msgpack(self, exc: Exception) -> TraceError:
        """The error for the next record's bytes (msgpack raises many types: FormatError,
        StackError, ValueError…)."""
        return TraceError(f"trace {self.name}: record {self.index + 1}: not msgpack "
                          f"({type(exc).__name__}: {exc})")

    def _read_chunk(self) -> bytes:
        try:
            return self._file.read1(_CHUNK)
        except EOFError:
            raise TraceError(f"trace {self.name}: truncated {self._after()} "
                             "(compressed stream ends early)") from None
        except (OSError, zlib.error) as exc:  # BadGzipFile is an OSError
            raise TraceError(f"trace {self.name}: corrupt compressed data {self._after()} "
                             f"({exc})") from None

    def _after(self) -> str:
        """``after record N``, or ``before its first record``."""
        return f"after record {self.index}" if self.index >= 0 else "before its first record"

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._raw.close()
            self._file = None

    def __enter__(self) -> TraceReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_EOF = object()
_OUT_OF_DATA = object()  # the unpacker holds no further whole record
_NIL = msgpack.packb(None)
_RECORD_KEY = "record"  # the key of a record's CodecError (its message, built by ``_error``, names the index)
