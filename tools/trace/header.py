"""The ``omega-trace`` header (record 0), the format's names and its error (docs/TRACE_FORMAT.md);
``tools.trace.format`` writes traces, ``tools.trace.reader`` reads them."""

from __future__ import annotations

from dataclasses import dataclass

from cellstate.codec import fields as fc
from cellstate.codec.fields import CodecError
from tools.trace.records import FORMAT_VERSION

FORMAT_NAME = "omega-trace"
READ_VERSIONS = (1, 2, 3)
TIME_UNIT = "s"
_HEADER_FIELDS = frozenset("format version source created_at capacity_model cell time_unit notes".split())
_HEADER_FIELDS_V3 = _HEADER_FIELDS | {"ground_truth"}
_HEADER_OPTIONAL = frozenset({"submit_latency_s"})  # version 3, absent in older files (then 0)
GZIP_MAGIC = b"\x1f\x8b"  # how a gzip-compressed trace begins


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
    submit_latency_s: float = 0.0
    """The source cell's seconds from a job's submission to its schedulers seeing it: a model
    constant the importer states (Google-2011: calibrated on part 0, docs/EXPERIMENTS.md); a
    replay applies it unless given its own (``ReplayConfig.submit_latency_s``)."""


# ---------------------------------------------------------------- record maps


def header_record(h: TraceHeader) -> dict:
    """Record 0 of a trace with header ``h`` (written in this format's version)."""
    return {"format": FORMAT_NAME, "version": FORMAT_VERSION, "source": h.source, "created_at": h.created_at,
            "capacity_model": h.capacity_model, "cell": h.cell, "time_unit": TIME_UNIT, "notes": h.notes,
            "ground_truth": h.ground_truth, **({"submit_latency_s": h.submit_latency_s} if h.submit_latency_s else {})}


def header_from_record(key: str, d) -> TraceHeader:
    """The header of record 0 ``d``; CodecError naming the field otherwise."""
    fc.mapping(key, "", d)
    if d.get("format") != FORMAT_NAME:
        raise CodecError(key, "format", f"not an {FORMAT_NAME} file (format {d.get('format')!r})")
    if d.get("version") not in READ_VERSIONS or type(d.get("version")) is not int:
        raise CodecError(key, "version", f"unknown version {d.get('version')!r} "
                         f"(this reader reads {', '.join(map(str, READ_VERSIONS))})")
    fields = _HEADER_FIELDS_V3 if d["version"] >= 3 else _HEADER_FIELDS
    fc.require(key, "", d, tuple(sorted(fields)))
    fc.no_unknown(key, "", d, fields | _HEADER_OPTIONAL if d["version"] >= 3 else fields)
    if d["time_unit"] != TIME_UNIT:
        raise fc.expected(key, "time_unit", repr(TIME_UNIT), d["time_unit"])
    return TraceHeader(*(fc.text(key, name, d[name])
                         for name in ("source", "created_at", "capacity_model", "cell", "notes")),
                       version=d["version"], ground_truth=fc.text(key, "ground_truth", d.get("ground_truth", "")),
                       submit_latency_s=_latency(key, d.get("submit_latency_s", 0.0)))


def _latency(key: str, value) -> float:
    if type(value) not in (int, float) or not 0 <= value < float("inf"):
        raise CodecError(key, "submit_latency_s", f"expected a finite number of seconds >= 0, got {value!r}")
    return float(value)


def record_error(name: str, index: int, exc: CodecError) -> TraceError:
    """The TraceError of trace ``name``'s record ``index`` for the codec's ``exc``."""
    where = f" field {exc.field!r}:" if exc.field else ""
    return TraceError(f"trace {name}: record {index}:{where} {exc.message}")
