"""The ``omega-trace`` file: a versioned stream of msgpack records (see docs/TRACE_FORMAT.md).

Record 0 is the header, records 1..N the events (non-decreasing ``t``), record N+1 the end
record ``{"type": "end", "events": N}``; a file without it was not closed cleanly and reads
as truncated. Machines and job specs are stored in the cell codec's map forms
(``cellstate.codec.records.machine_to_map`` / ``job_to_map``; ``tools.trace.records``). Files whose name ends ``.gz`` are
written gzip-compressed; the reader recognizes gzip by its magic bytes.

Any problem while reading raises ``TraceError`` naming the file and the record index. This
module writes traces (``TraceWriter``); ``tools.trace.reader`` reads them (``read_trace``,
re-exported here with the header's names, ``tools.trace.header``).
"""

from __future__ import annotations

import errno
import gzip
import os

import msgpack

from cellstate.codec.fields import CodecError
from tools.trace.events import TraceEvent
from tools.trace.header import (  # noqa: F401 (API)
    FORMAT_NAME, READ_VERSIONS, TIME_UNIT, TraceError, TraceHeader, header_record, record_error,
)
from tools.trace.raw_logs import raw_log_error, raw_log_kind  # noqa: F401 (API)
from tools.trace.reader import TraceReader, check_complete, read_trace  # noqa: F401 (API)
from tools.trace.records import FORMAT_VERSION, event_from_record, event_record  # noqa: F401 (FORMAT_VERSION: API)
from tools.trace.truth import GroundTruth, truth_from_record, truth_record

_CHUNK = 1 << 16


class TraceWriter:
    """Writes a trace: the header at once, then ``write(event)`` per event, the end record on
    ``close()``. A path ending ``.gz`` is gzip-compressed; an open binary file is written as
    is (and left open). ``truth`` (format version 3) is written as the record after the header,
    which announces it (``ground_truth``: the header's own text, else the truth's notes). Leaving the ``with`` block by an exception skips the end record, so
    the partial file reads as truncated; with ``atomic`` (a path only) the trace is written to
    a temporary file beside it, renamed to the path by a complete close and removed by an
    incomplete one, so a failed write leaves no file (and an older file at the path intact). A path
    that is a directory is an IsADirectoryError at once; one that exists and is not a regular file
    (``/dev/null``, ``/dev/full``, a pipe) is written in place, never renamed over."""

    def __init__(self, target, header: TraceHeader, atomic: bool = False, truth: GroundTruth | None = None):
        self.name = os.fspath(target) if isinstance(target, (str, os.PathLike)) else getattr(target, "name", "<stream>")
        self._temp = None
        if isinstance(target, (str, os.PathLike)):
            path = self.name
            if os.path.isdir(path):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
            if atomic and os.path.exists(path) and not os.path.isfile(path):
                atomic = False  # a device or a pipe: replacing it would remove it (as root, /dev/full)
            if atomic:
                head, tail = os.path.split(self.name)
                path = self._temp = os.path.join(head, f".{tail}.{os.getpid()}.tmp")
            try:
                self._file = gzip.open(path, "wb") if self.name.endswith(".gz") else open(path, "wb")
            except OSError as exc:
                if self._temp is not None and exc.filename == self._temp:
                    exc.filename = self.name  # the file asked for, not its temporary sibling
                raise
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
            self._pack(header_record(header))
            if truth is not None:
                try:
                    record = truth_record(truth)
                    truth_from_record("truth", record)  # checked as the reader will
                except CodecError as exc:
                    raise record_error(self.name, 1, exc) from None
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
            raise record_error(self.name, index, exc) from None
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
