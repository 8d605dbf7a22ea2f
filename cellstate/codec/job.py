"""Job specs and job records of the cell's codec (``cellstate.codec.records`` states the format).

A record's spec is nested under ``"spec"``; a bare spec (as in trace files) carries the
type tag ``"spec"``. Records and specs of the common shape take the straight-line paths of
``cellstate.codec.job_fast``; anything else the generic, field-by-field path, which gives
the value or raises the precise ``CodecError``.
"""

from __future__ import annotations

from cellstate.codec import fields as fc
from cellstate.codec.envelope import SCHEMA_VERSION, encode, encode_map, envelope, pack_plain, unpack
from cellstate.codec.fields import CodecError
from cellstate.codec.job_fast import (
    CONSTRAINT_FIELDS, MAX_TASKS, NOT_A_TASK_STATE, RECORD_FIELDS, SPEC_FIELDS, TASK_CHARS, compress_states,
    expand_states, fast_bare_spec, fast_record, record_fields_ok, shaped_spec_map,
)
from cellstate.codec.memo import codec_memo
from cellstate.codec.resources import encode_resources, resources_from_map
from cellstate.model import Constraint, ConstraintOp, Job, JobKind, JobRecord

_JOB_KINDS = {k.value: k for k in JobKind}
_OPS = {o.value: o for o in ConstraintOp}
# What recent bytes of records decode to (cellstate.codec.memo), filled by decodes and encodes.
RECORD_MEMO = codec_memo()

# ------------------------------------------------------------------------- specs


_SPEC_DEFAULTS = (("priority", 0), ("owner", ""), ("duration_s", None), ("gang", False),
                  ("package", ""), ("different_machine", False), ("max_per_machine", 0),
                  ("scheduler", ""), ("estimate_s", None))


def _spec_map(job: Job) -> dict:
    d = {"id": job.id, "kind": str(job.kind), "tasks": job.tasks, "request": encode_resources(job.request)}
    for name, default in _SPEC_DEFAULTS:
        value = getattr(job, name)
        if value != default or type(value) is not type(default):
            d[name] = value
    if job.constraints:
        d["constraints"] = [_constraint_map(c) for c in job.constraints]
    return d


def _shaped_spec_map(job: Job) -> dict:
    """``_spec_map(job)`` for a spec of the common shape (``codec_job_fast._spec_shape_ok``:
    a JobKind, core resources only, each field of its exact type), field by field."""
    request = job.request
    d = {"id": job.id, "kind": job.kind._value_, "tasks": job.tasks,
         "request": {"cpu": request.cpu, "memory": request.memory, "disk": request.disk}}
    if job.priority:
        d["priority"] = job.priority
    if job.owner:
        d["owner"] = job.owner
    if job.duration_s is not None:
        d["duration_s"] = job.duration_s
    if job.gang:
        d["gang"] = True
    if job.package:
        d["package"] = job.package
    if job.different_machine:
        d["different_machine"] = True
    if job.max_per_machine:
        d["max_per_machine"] = job.max_per_machine
    if job.scheduler:
        d["scheduler"] = job.scheduler
    if job.estimate_s is not None:
        d["estimate_s"] = job.estimate_s
    if job.constraints:
        d["constraints"] = [_constraint_map(c) for c in job.constraints]
    return d


def _constraint_map(c: Constraint) -> dict:
    d = {"attribute": c.attribute, "op": str(c.op)}
    if c.values:
        d["values"] = list(c.values)
    return d


def _bare_spec_map(job: Job) -> dict:
    return {"v": SCHEMA_VERSION, "t": "spec", **_spec_map(job)}


def encode_job(job: Job) -> bytes:
    """Msgpack bytes of a bare job spec (type tag ``"spec"``); CodecError if invalid."""
    return encode(f"job {getattr(job, 'id', '?')}", job, _bare_spec_map, _bare_spec_from_map)


def decode_job(key: str, raw: bytes) -> Job:
    """A bare job spec (type tag ``"spec"``); CodecError on any invalid content."""
    return _bare_spec_from_map(key, unpack(key, raw, "spec"))


def validate_job(job: Job) -> None:
    """Raise CodecError(key="job <id>", …) unless ``job`` is a valid, storable spec (packed too:
    an integer beyond msgpack's 64 bits is refused here, not when the job is stored)."""
    encode(f"job {getattr(job, 'id', '?')}", job, _spec_map, _spec_from_map)


def job_to_map(job: Job) -> dict:
    """The validated map form of a bare job spec, exactly as ``encode_job`` packs it."""
    return encode_map(f"job {getattr(job, 'id', '?')}", job, _bare_spec_map, _bare_spec_from_map)


def job_from_map(key: str, d) -> Job:
    """The Job whose map form (as ``job_to_map`` gives it) is ``d``; CodecError if invalid."""
    return _bare_spec_from_map(key, envelope(key, d, "spec"))


def _bare_spec_from_map(key: str, d: dict) -> Job:
    d = dict(d)
    del d["v"], d["t"]
    return fast_bare_spec(d) or _spec_from_map(key, d)  # a trace's every submission: the common shape first


def _spec_from_map(key: str, d, prefix: str = "") -> Job:
    fc.mapping(key, prefix.rstrip("."), d)
    fc.require(key, prefix, d, ("id", "kind", "tasks", "request"))
    fc.no_unknown(key, prefix, d, SPEC_FIELDS)
    tasks = fc.integer(key, prefix + "tasks", d["tasks"], 1)
    if tasks > MAX_TASKS:
        raise fc.expected(key, prefix + "tasks", f"at most {MAX_TASKS} tasks", tasks)
    duration, estimate = d.get("duration_s"), d.get("estimate_s")
    constraints = d.get("constraints")
    return Job(
        id=fc.ident(key, prefix + "id", d["id"]),
        kind=fc.member(key, prefix + "kind", d["kind"], _JOB_KINDS),
        tasks=tasks,
        request=resources_from_map(d["request"], key, prefix + "request"),
        priority=fc.integer(key, prefix + "priority", d.get("priority", 0), None),
        owner=fc.text(key, prefix + "owner", d.get("owner", "")),
        constraints=() if constraints is None else _constraints(key, prefix + "constraints", constraints),
        duration_s=None if duration is None else fc.seconds(key, prefix + "duration_s", duration),
        gang=fc.flag(key, prefix + "gang", d.get("gang", False)),
        package=fc.text(key, prefix + "package", d.get("package", "")),
        different_machine=fc.flag(key, prefix + "different_machine", d.get("different_machine", False)),
        max_per_machine=fc.integer(key, prefix + "max_per_machine", d.get("max_per_machine", 0)),
        scheduler=_scheduler_class(key, prefix + "scheduler", d.get("scheduler", "")),
        estimate_s=None if estimate is None else fc.seconds(key, prefix + "estimate_s", estimate),
    )


def _scheduler_class(key: str, field: str, x) -> str:
    """Empty (the kind's class) or a scheduler class name: an id (no \"/\")."""
    return "" if x == "" and type(x) is str else fc.ident(key, field, x)


def _constraints(key: str, field: str, x) -> tuple[Constraint, ...]:
    return tuple(_constraint(key, f"{field}[{i}]", c) for i, c in enumerate(fc.sequence(key, field, x)))


def _constraint(key: str, field: str, c) -> Constraint:
    """eq takes one value, in/not-in at least one, exists none."""
    fc.mapping(key, field, c)
    fc.require(key, field + ".", c, ("attribute", "op"))
    fc.no_unknown(key, field + ".", c, CONSTRAINT_FIELDS)
    attribute = fc.text(key, field + ".attribute", c["attribute"])
    if not attribute:
        raise fc.expected(key, field + ".attribute", "a non-empty attribute name", attribute)
    op = fc.member(key, field + ".op", c["op"], _OPS)
    values = fc.sequence(key, field + ".values", c.get("values", []))
    for i, value in enumerate(values):
        fc.text(key, f"{field}.values[{i}]", value)
    count = len(values)
    if (op is ConstraintOp.EQ and count != 1) or (op is ConstraintOp.EXISTS and count) or (
            op in (ConstraintOp.IN, ConstraintOp.NOT_IN) and not count):
        need = {"eq": "exactly one value", "exists": "no values"}.get(op.value, "at least one value")
        raise CodecError(key, field + ".values", f"operator {op.value!r} takes {need}, got {count}")
    return Constraint(attribute, op, tuple(values))


# ------------------------------------------------------------------ job records


def _record_map(r: JobRecord, spec: dict | None = None) -> dict:
    """The map form of ``r``; ``spec``: its spec's map form, when the caller has it."""
    packed = compress_states(r.tasks) if type(r.tasks) is str else None
    d = {"v": SCHEMA_VERSION, "t": "job", "spec": _spec_map(r.job) if spec is None else spec}
    if packed is None:
        d["tasks"] = r.tasks
    else:
        d["tasks_z"] = packed
    if r.submitted_at:
        d["submitted_at"] = r.submitted_at
    if r.reason:
        d["reason"] = r.reason
    if r.killed:
        d["killed"] = r.killed
    if r.first_attempt_at is not None:
        d["first_attempt_at"] = r.first_attempt_at
    if r.placed_at is not None:
        d["placed_at"] = r.placed_at
    return d


def encode_job_record(r: JobRecord) -> bytes:
    """Msgpack bytes of a job record (type tag ``"job"``); CodecError if invalid. A record of
    the common shape is packed without the decode-back check (``codec_job_fast``: same bytes)."""
    spec = _common_spec_map(r)
    if spec is not None:
        try:
            raw = pack_plain(_record_map(r, spec))
        except (OverflowError, ValueError, TypeError):
            pass  # the generic path names the problem
        else:
            RECORD_MEMO.put(raw, r)
            return raw
    job_id = getattr(getattr(r, "job", None), "id", "?")
    return encode(f"job {job_id}", r, _record_map, _record_from_map)


def _common_spec_map(r) -> dict | None:
    """The map form of the spec of ``r`` when ``r`` is a JobRecord of the common shape
    (``codec_job_fast``: its map form provably decodes back equal); None says nothing."""
    if type(r) is not JobRecord:
        return None
    spec = shaped_spec_map(r.job, _shaped_spec_map)
    return spec if spec is not None and record_fields_ok(r) else None


def decode_job_record(key: str, raw: bytes) -> JobRecord:
    """The JobRecord stored under ``key``; CodecError on any invalid content."""
    record = RECORD_MEMO.get(raw) if type(raw) is bytes else None
    if record is None:
        d = unpack(key, raw, "job")
        record = fast_record(d) or _record_from_map(key, d)
        RECORD_MEMO.put(raw, record)
    return record


def _record_from_map(key: str, d: dict) -> JobRecord:
    fc.require(key, "", d, ("spec",))
    fc.no_unknown(key, "", d, RECORD_FIELDS)
    job = _spec_from_map(key, d["spec"], "spec.")
    if ("tasks" in d) == ("tasks_z" in d):
        raise CodecError(key, "tasks", "expected exactly one of tasks and tasks_z")
    if "tasks" in d:
        states = fc.text(key, "tasks", d["tasks"])
    else:
        states = expand_states(d["tasks_z"])
        if states is None:
            raise fc.expected(key, "tasks_z", f"zlib bytes of at most {MAX_TASKS} task states", d["tasks_z"])
    if len(states) != job.tasks:
        raise CodecError(key, "tasks", f"expected {job.tasks} task states (spec.tasks), got {len(states)}")
    if states.translate(NOT_A_TASK_STATE):
        bad = sorted(set(states) - set(TASK_CHARS))
        raise CodecError(key, "tasks", f"unknown task state(s) {bad}; expected characters of {TASK_CHARS!r}")
    first, placed = d.get("first_attempt_at"), d.get("placed_at")
    return JobRecord(
        job=job,
        tasks=states,
        submitted_at=fc.seconds(key, "submitted_at", d.get("submitted_at", 0.0)),
        reason=fc.text(key, "reason", d.get("reason", "")),
        killed=fc.flag(key, "killed", d.get("killed", False)),
        first_attempt_at=None if first is None else fc.seconds(key, "first_attempt_at", first),
        placed_at=None if placed is None else fc.seconds(key, "placed_at", placed),
    )
