"""Msgpack codec of a kill marker, stored under ``kills/{job}`` (docs/CELLSTATE.md).

``{"v": SCHEMA_VERSION, "t": "kill", "job": id, "at": seconds}``: the job that is being (or
was) killed and when its kill began. ``kill_job`` puts it in its first txn; a placement that
writes no job record compares the key missing, so nothing is placed after a kill began. The
key is what guards; the value only says which job and when (``omega check``). Job ids are
never reused, so markers are never removed (a cell reset deletes them with the cell). Strict
like every cell value: a missing or unknown field or a wrong type raises ``CodecError``.
"""

from __future__ import annotations

from dataclasses import dataclass

from cellstate.codec import fields as fc
from cellstate.codec.envelope import SCHEMA_VERSION, encode, unpack

_FIELDS = ("job", "at")
_ALLOWED = frozenset(("v", "t") + _FIELDS)


@dataclass(frozen=True, slots=True)
class KillMarker:
    """Job ``job_id``'s kill began at ``at`` (seconds)."""

    job_id: str
    at: float


def encode_kill(marker: KillMarker) -> bytes:
    return encode(f"kill {getattr(marker, 'job_id', '?')}", marker, _to_map, _from_map)


def decode_kill(key: str, raw: bytes) -> KillMarker:
    return _from_map(key, unpack(key, raw, "kill"))


def _to_map(marker: KillMarker) -> dict:
    return {"v": SCHEMA_VERSION, "t": "kill", "job": marker.job_id, "at": marker.at}


def _from_map(key: str, d: dict) -> KillMarker:
    fc.require(key, "", d, _FIELDS)
    fc.no_unknown(key, "", d, _ALLOWED)
    return KillMarker(fc.ident(key, "job", d["job"]), fc.seconds(key, "at", d["at"]))
