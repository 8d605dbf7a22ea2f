"""``pack_job_record``: ``codec.encode_job_record`` for records built by the cell's own code
(submissions, agents' task ends, kills, the fauxmaster's recorded state), without the
decode-back self-check when cheap field checks prove the record valid.

``codec.encode_job_record`` builds the map, decodes it back (the whole spec: a dozen field
validators and a ``Job`` built by keyword) and compares: most of a record's encoding time.
Here straight-line checks of every field's exact type and range accept the common shape: a
``JobRecord`` of a ``Job`` with an id without "/", a ``JobKind``, 1..MAX_TASKS tasks, a
core-only request of non-negative ints, an int priority, str owner and package, no
constraints, bool flags, a non-negative int per-machine limit, float times (or None where
allowed) that are finite and non-negative, and a task-state string of the spec's length
in ``TaskState`` characters (times: no ``-0.0``, which decodes as ``0.0``). Each condition is
sufficient for the record to decode back equal with the same types, so an accepted record packs
exactly as the codec packs it, and is remembered in ``codec.RECORD_MEMO`` as what its bytes
decode to (as ``encode_job_record`` does): the replicas that apply the write skip its decode. Anything else (an int
time, constraints, extra resources, any invalid field) goes through the codec, which
encodes it or raises its precise ``CodecError``: the same bytes and errors, just faster.
(The same scheme as ``cellstate.codec_trusted`` for ledgers and allocs.)
"""

from __future__ import annotations

import math

import msgpack

from cellstate.codec import _TASK_CHARS, MAX_TASKS, RECORD_MEMO, _record_map, encode_job_record
from cellstate.model import Job, JobKind, JobRecord
from cellstate.resources import Resources

__all__ = ["pack_job_record"]

_PACK_ERRORS = (OverflowError, ValueError, TypeError)  # e.g. an int beyond 64 bits
# Deletes every TaskState character: what is left is not a task state. (``str.translate``
# deleting ASCII runs ~20x faster than ``str.strip`` with a character set, and jobs have
# thousands of tasks.)
_NOT_A_TASK_STATE = str.maketrans("", "", _TASK_CHARS)


def pack_job_record(r: JobRecord) -> bytes:
    """``codec.encode_job_record(r)`` (same bytes, same errors), checking fields instead of
    decoding back when ``r`` has the common shape."""
    if _record_ok(r):
        try:
            raw = msgpack.packb(_record_map(r))
        except _PACK_ERRORS:
            pass  # the codec's encoder names the problem
        else:
            RECORD_MEMO.put(raw, r)  # decodes back equal, same types: decoders may answer with r
            return raw
    return encode_job_record(r)


def _time_ok(t) -> bool:
    """A finite float >= 0 that is not -0.0."""
    return type(t) is float and (0.0 < t < math.inf or (t == 0.0 and math.copysign(1.0, t) > 0))


def _record_ok(r) -> bool:
    if type(r) is not JobRecord:
        return False
    job = r.job
    if _CHECKED_JOBS.get(id(job)) is not job:
        if not _job_ok(job):
            return False
        if len(_CHECKED_JOBS) >= _CHECKED_MAX:
            _CHECKED_JOBS.clear()
        _CHECKED_JOBS[id(job)] = job
    tasks = r.tasks
    if type(tasks) is not str or len(tasks) != r.job.tasks or tasks.translate(_NOT_A_TASK_STATE):
        return False
    if not _time_ok(r.submitted_at) or type(r.reason) is not str or (r.killed is not True and r.killed is not False):
        return False
    first, placed = r.first_attempt_at, r.placed_at
    return (first is None or _time_ok(first)) and (placed is None or _time_ok(placed))


# Job specs that passed ``_job_ok``, by identity (each entry holds its Job, so the id is not
# reused while it is here): the records of one job share its (frozen) spec, and a task end or
# kill packs a record of a spec packed before. Cleared when full.
_CHECKED_JOBS: dict[int, Job] = {}
_CHECKED_MAX = 1 << 16


def _job_ok(j) -> bool:
    if type(j) is not Job or type(j.id) is not str or not j.id or "/" in j.id:
        return False
    if type(j.kind) is not JobKind or type(j.tasks) is not int or not 1 <= j.tasks <= MAX_TASKS:
        return False
    request = j.request
    if (type(request) is not Resources or request.extra != () or type(request.cpu) is not int or request.cpu < 0
            or type(request.memory) is not int or request.memory < 0
            or type(request.disk) is not int or request.disk < 0):
        return False
    if type(j.priority) is not int or type(j.owner) is not str or type(j.package) is not str:
        return False
    if type(j.constraints) is not tuple or j.constraints or not (j.duration_s is None or _time_ok(j.duration_s)):
        return False
    if type(j.max_per_machine) is not int or j.max_per_machine < 0:
        return False
    return (j.gang is True or j.gang is False) and (j.different_machine is True or j.different_machine is False)
