"""Msgpack codec of a gang reservation record, stored under ``gangs/{job}`` (a leased key).

``{"v": SCHEMA_VERSION, "t": "gang", "job": id, "scheduler": name, "reserved": count,
"started_at": seconds}``: the scheduler reserving the job's tasks, how many allocations it has
reserved so far and when it began. The key's lease (the reserving scheduler's) is what makes a
reservation die with its scheduler; the value only says who and how far (monitor, ``omega
check``). Strict like every cell value: a missing or unknown field or a wrong type raises
``CodecError``; encoding checks the value decodes back equal.
"""

from __future__ import annotations

from dataclasses import dataclass

from cellstate.codec import fields as fc
from cellstate.codec.envelope import SCHEMA_VERSION, encode, unpack

_FIELDS = ("job", "scheduler", "reserved", "started_at")
_ALLOWED = frozenset(("v", "t") + _FIELDS)


@dataclass(frozen=True, slots=True)
class GangRecord:
    """A reservation in progress: ``reserved`` allocations of job ``job_id`` by ``scheduler``."""

    job_id: str
    scheduler: str
    reserved: int
    started_at: float


def encode_gang(record: GangRecord) -> bytes:
    return encode(f"gang {getattr(record, 'job_id', '?')}", record, _to_map, _from_map)


def decode_gang(key: str, raw: bytes) -> GangRecord:
    return _from_map(key, unpack(key, raw, "gang"))


def _to_map(record: GangRecord) -> dict:
    return {"v": SCHEMA_VERSION, "t": "gang", "job": record.job_id, "scheduler": record.scheduler,
            "reserved": record.reserved, "started_at": record.started_at}


def _from_map(key: str, d: dict) -> GangRecord:
    fc.require(key, "", d, _FIELDS)
    fc.no_unknown(key, "", d, _ALLOWED)
    return GangRecord(fc.ident(key, "job", d["job"]), fc.ident(key, "scheduler", d["scheduler"]),
                      fc.integer(key, "reserved", d["reserved"]), fc.seconds(key, "started_at", d["started_at"]))
