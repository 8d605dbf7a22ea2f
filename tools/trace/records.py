"""The record forms of trace events (``tools.trace.format``'s files, docs/TRACE_FORMAT.md):
``event_record(event)`` gives an event's record map, ``event_from_record(key, d, version)``
the event of a record map, raising ``CodecError`` naming the field if it is invalid or of a
type that version does not have. Machines and job specs are stored in the cell codec's map
forms; records are decoded straight-line (the validators run only to raise their message)
and events built without their dataclass ``__init__``."""

from __future__ import annotations

import math

from cellstate.codec import fields as fc
from cellstate.codec.records import job_from_map, job_to_map, machine_from_map, machine_to_map
from cellstate.codec.fields import CodecError
from cellstate.fastbuild import builder
from tools.trace.events import (
    EVENT_TYPES,
    JobKill,
    JobSubmit,
    MachineAdd,
    MachineFail,
    MachineRemove,
    TaskEnd,
    TaskEndStatus,
    TaskPlaced,
    TraceEvent,
)

FORMAT_VERSION = 3
# Event types a version's files may hold (version 2 added task_placed; version 3 adds no event type:
# its header may announce a ground-truth record, tools.trace.truth).
_V1_TYPES = frozenset(("machine_add", "machine_remove", "machine_fail", "job_submit", "task_end", "job_kill"))
_STATUSES = {s.value: s for s in TaskEndStatus}


def event_record(ev: TraceEvent) -> dict:
    """The record map of an event (its payload validated by the cell codec)."""
    kind = EVENT_TYPES.get(type(ev))
    if kind is None:
        raise TypeError(f"not a trace event: {ev!r}")
    d = {"type": kind, "t": ev.t}
    if isinstance(ev, MachineAdd):
        d["machine"] = machine_to_map(ev.machine)
    elif isinstance(ev, JobSubmit):
        d["job"] = job_to_map(ev.job)
    elif isinstance(ev, (MachineRemove, MachineFail)):
        d["machine"] = ev.machine_id
    elif isinstance(ev, TaskEnd):
        d.update(job=ev.job_id, task=ev.task, status=str(ev.status))
    elif isinstance(ev, TaskPlaced):
        d.update(job=ev.job_id, task=ev.task, machine=ev.machine_id)
    else:
        d["job"] = ev.job_id
    return d


def _nested(key: str, field: str, decode, value):
    """``decode(key, value)`` with CodecError fields prefixed by ``field``."""
    try:
        return decode(key, value)
    except CodecError as exc:
        raise CodecError(key, f"{field}.{exc.field}" if exc.field else field, exc.message) from None


def _machine_id(key, d):
    return fc.ident(key, "machine", d["machine"])


def _job_id(key, d):
    return fc.ident(key, "job", d["job"])


def _check_task(k: str, job, task) -> None:
    """Straight-line checks of a task event's job id and task index (the validators only to
    raise, in the order they ran): most events are task ends."""
    if type(job) is not str or not job or "/" in job:
        fc.ident(k, "job", job)
    if type(task) is not int or task < 0:
        fc.integer(k, "task", task)


def _task_end(k: str, d: dict, t: float) -> TaskEnd:
    job, task, status = d["job"], d["task"], d["status"]
    _check_task(k, job, task)
    member = _STATUSES.get(status) if type(status) is str else None
    return _TASK_END(t, job, task, fc.member(k, "status", status, _STATUSES) if member is None else member)


def _task_placed(k: str, d: dict, t: float) -> TaskPlaced:
    job, task, machine = d["job"], d["task"], d["machine"]
    _check_task(k, job, task)
    if type(machine) is not str or not machine or "/" in machine:
        fc.ident(k, "machine", machine)
    return _TASK_PLACED(t, job, task, machine)


def _job_submit(k: str, d: dict, t: float) -> JobSubmit:
    # ``job_from_map`` decodes a spec of the common shape straight-line (``codec_job_fast``)
    # and any other map field by field, raising the precise error.
    return _JOB_SUBMIT(t, _nested(k, "job", job_from_map, d["job"]))


# Events are built without their dataclass __init__ (cellstate.fastbuild): a trace holds millions.
_TASK_END, _TASK_PLACED, _JOB_SUBMIT = builder(TaskEnd), builder(TaskPlaced), builder(JobSubmit)
_MACHINE_ADD, _MACHINE_REMOVE, _MACHINE_FAIL = builder(MachineAdd), builder(MachineRemove), builder(MachineFail)
_JOB_KILL = builder(JobKill)
# type tag -> (payload fields, builder(key, d, t))
_DECODERS = {
    "machine_add": (("machine",), lambda k, d, t: _MACHINE_ADD(t, _nested(k, "machine", machine_from_map,
                                                                           d["machine"]))),
    "machine_remove": (("machine",), lambda k, d, t: _MACHINE_REMOVE(t, _machine_id(k, d))),
    "machine_fail": (("machine",), lambda k, d, t: _MACHINE_FAIL(t, _machine_id(k, d))),
    "job_submit": (("job",), _job_submit),
    "task_end": (("job", "task", "status"), _task_end),
    "task_placed": (("job", "task", "machine"), _task_placed),
    "job_kill": (("job",), lambda k, d, t: _JOB_KILL(t, _job_id(k, d))),
}
_FIELDS = {kind: frozenset(("type", "t") + payload) for kind, (payload, _) in _DECODERS.items()}


def _decoders(version: int) -> dict[str, tuple[int, frozenset, object]]:
    """type tag → (number of fields, the fields, builder) of the event types of a ``version`` file."""
    return {kind: (len(_FIELDS[kind]), _FIELDS[kind], build) for kind, (_, build) in _DECODERS.items()
            if version > 1 or kind in _V1_TYPES}


def event_from_record(key: str, d, version: int = FORMAT_VERSION) -> TraceEvent:
    """The event a record map of a ``version`` file describes; CodecError naming the field if
    it is invalid (or of a type that version does not have)."""
    if type(d) is not dict:
        fc.mapping(key, "", d)
    kind = d.get("type")
    entry = _DECODERS.get(kind) if type(kind) is str and (version > 1 or kind in _V1_TYPES) else None
    if entry is None:
        raise fc.expected(key, "type", "an event type (" + ", ".join(_DECODERS) + ")", kind)
    payload, build = entry
    fields = _FIELDS[kind]
    if len(d) != len(fields) or not fields.issuperset(d):  # else exactly the fields: nothing to report
        fc.require(key, "", d, ("t",) + payload)
        fc.no_unknown(key, "", d, fields)
    t = d["t"]
    if type(t) is not float or not 0.0 <= t < math.inf:
        t = fc.seconds(key, "t", t)
    return build(key, d, t)
