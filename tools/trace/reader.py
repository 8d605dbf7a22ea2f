"""Reading an ``omega-trace`` file (``tools.trace.format`` states the format): ``read_trace``,
the streaming ``TraceReader`` that checks every record as it goes, and ``check_complete``."""

from __future__ import annotations

import gzip
import math
import os
import zlib

import msgpack

from cellstate.codec.fields import CodecError
from tools.trace.events import TraceEvent
from tools.trace.header import GZIP_MAGIC, TraceError, TraceHeader, header_from_record, record_error
from tools.trace.raw_logs import raw_log_error
from tools.trace.records import FORMAT_VERSION, _decoders, event_from_record
from tools.trace.truth import GroundTruth, truth_from_record

_CHUNK = 1 << 16


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
        gz = raw.read(2) == GZIP_MAGIC
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


class TraceReader:
    """Iterates the events of one trace file, checking every record as it goes."""

    def __init__(self, path):
        self._path = os.fspath(path)
        self.name = os.path.basename(self._path)
        raw = open(path, "rb")
        self._file = gzip.GzipFile(fileobj=raw) if raw.read(2) == GZIP_MAGIC else raw
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
            header = header_from_record("header", record)
        except CodecError as exc:
            raise raw_log_error(self._path, self.name) or record_error(self.name, 0, exc) from None
        except TraceError as exc:
            raise raw_log_error(self._path, self.name) or exc from None
        self._version = header.version
        self._decoders = _decoders(header.version)
        if header.ground_truth:
            record = self._next_record()
            try:
                self.truth = truth_from_record("truth", record)
            except CodecError as exc:
                raise record_error(self.name, self.index, exc) from None
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
                raise record_error(self.name, self.index, exc) from None
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
            raise record_error(self.name, self.index, exc) from None
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
_RECORD_KEY = "record"  # the key of a record's CodecError (its message, built by ``record_error``, names the index)
