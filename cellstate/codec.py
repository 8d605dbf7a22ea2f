"""Schema-versioned msgpack codec for the cell's values, validating on the way in.

Every stored value is a msgpack map carrying ``"v": SCHEMA_VERSION`` and a type tag
``"t"``: ``"machine"``, ``"job"`` (a JobRecord, its spec nested under ``"spec"``),
``"alloc"``, or ``"spec"`` (a bare Job spec, as in trace files). Field names follow the
model, except ``Machine.task_count`` → ``tasks``, ``JobRecord.tasks`` (the task-state
string) → ``tasks`` beside ``spec``, and the ids of an alloc → ``job``/``task``/``machine``.
Fields equal to their model default are left out; fields without a default are
required. Resources are maps ``{"cpu", "memory", "disk", <extra names>…}``, labels a
map, packages a sorted list, constraints maps ``{"attribute", "op", "values"}``, enums
their string values; ``None`` times are left out.

Decoding is strict: any deviation raises ``CodecError(key, field, message)``, the field
named as stored (``capacity.cpu``, ``spec.constraints[0].op``): bytes that are not
msgpack, a wrong type tag, a missing or unknown schema version, a missing required
field, an **unknown extra field**, a wrong type (``True`` is not an int; an int is
accepted where a float is expected), a negative resource, a non-finite or negative
time, an unknown enum value, an id that is empty or contains "/", a task-state string
with characters outside ``TaskState`` or whose length is not the job's task count,
``tasks`` outside 1..MAX_TASKS, a constraint with the wrong number of values for its
operator. ``allocated > capacity`` is allowed (the checker reports it). Encoding
validates the same way (and checks the value decodes back equal), so whatever is
written decodes; ``cellstate.codec_trusted`` gives the same bytes and errors for the
committer's ledgers and allocs, checking fields instead of decoding back. Resource maps
live in ``cellstate.codec_resources``.
"""

from __future__ import annotations

import math
from dataclasses import fields

import msgpack

from cellstate import codec_fields as fc
from cellstate.codec_fields import CodecError
from cellstate.codec_job_fast import (  # noqa: F401 (MAX_TASKS: API)
    CONSTRAINT_FIELDS, MAX_TASKS, NOT_A_TASK_STATE, RECORD_FIELDS, SPEC_FIELDS, TASK_CHARS, fast_bare_spec,
    fast_record, record_shape_ok,
)
from cellstate.codec_memo import codec_memo
from cellstate.codec_resources import core_resources, encode_resources, resources_from_map  # noqa: F401 (API)
from cellstate.fastbuild import builder
from cellstate.model import (
    Alloc,
    Constraint,
    ConstraintOp,
    Job,
    JobKind,
    JobRecord,
    Machine,
    MachineState,
)
from cellstate.resources import ZERO, Resources

SCHEMA_VERSION = 1
_TASK_CHARS = TASK_CHARS
_MACHINE_STATES = {s.value: s for s in MachineState}
_JOB_KINDS = {k.value: k for k in JobKind}
_OPS = {o.value: o for o in ConstraintOp}
_ATTRIBUTES = ("zone", "rack", "platform")
_MACHINE_FIELDS = frozenset(
    "v t id capacity zone rack platform packages labels state allocated tasks writer".split())
_SPEC_FIELDS, _RECORD_FIELDS = SPEC_FIELDS, RECORD_FIELDS
_ALLOC_FIELDS = frozenset("v t job task machine resources priority scheduler placed_at running".split())
_CONSTRAINT_FIELDS = CONSTRAINT_FIELDS
# Decoded values are built without their dataclass __init__ (see cellstate.fastbuild).
_MACHINE, _ALLOC = builder(Machine), builder(Alloc)
# What recent bytes decode to, per type (cellstate.codec_memo): filled by decodes and trusted encodes
# once a MemoryStore woke them (dormant before: bytes from etcd are new objects and never hit).
MACHINE_MEMO, RECORD_MEMO, ALLOC_MEMO = codec_memo(), codec_memo(), codec_memo()

# ---------------------------------------------------------------------- envelope


def _unpack(key: str, raw: bytes, tag: str) -> dict:
    """The top-level map of a value, after checking its type tag and schema version."""
    try:
        d = msgpack.unpackb(raw, raw=False)
    except Exception as exc:  # msgpack raises many types (ValueError, StackError, TypeError…)
        raise CodecError(key, "", f"not a msgpack value ({type(exc).__name__}: {exc})") from None
    return _envelope(key, d, tag)


# --------------------------------------------------------------------- machines


def _machine_map(m: Machine) -> dict:
    # Field by field, no getattr loop (every ledger a commit or a task end writes comes here).
    d = {"v": SCHEMA_VERSION, "t": "machine", "id": m.id, "capacity": encode_resources(m.capacity)}
    if m.zone:
        d["zone"] = m.zone
    if m.rack:
        d["rack"] = m.rack
    if m.platform:
        d["platform"] = m.platform
    if m.packages:
        d["packages"] = sorted(m.packages)
    if m.labels:
        d["labels"] = dict(m.labels)
    if m.state != MachineState.UP:
        d["state"] = str(m.state)
    allocated = m.allocated
    if type(allocated) is not Resources or allocated.cpu != 0 or allocated.memory != 0 or allocated.disk != 0 \
            or allocated.extra != ():  # ``allocated != ZERO`` without the dataclass __eq__
        d["allocated"] = encode_resources(allocated)
    if m.task_count:
        d["tasks"] = m.task_count
    if m.writer:
        d["writer"] = m.writer
    return d


def encode_machine(m: Machine) -> bytes:
    """Msgpack bytes of a machine ledger; CodecError if it would not decode."""
    return _encode(f"machine {getattr(m, 'id', '?')}", m, _machine_map, _machine_from_map)


def decode_machine(key: str, raw: bytes) -> Machine:
    """The Machine stored under ``key``; CodecError on any invalid content."""
    machine = MACHINE_MEMO.get(raw)
    if machine is None:
        machine = _machine_from_map(key, _unpack(key, raw, "machine"))
        MACHINE_MEMO.put(raw, machine)
    return machine


def _machine_from_map(key: str, d: dict) -> Machine:
    # Straight-line (checks in field order, the validators only to raise): every watch event
    # of a ledger decodes here.
    try:
        ident, capacity = d["id"], d["capacity"]
    except KeyError:
        fc.require(key, "", d, ("id", "capacity"))
        raise
    if not _MACHINE_FIELDS.issuperset(d):
        fc.no_unknown(key, "", d, _MACHINE_FIELDS)
    if type(ident) is not str or not ident or "/" in ident:
        fc.ident(key, "id", ident)
    capacity = resources_from_map(capacity, key, "capacity")
    get = d.get
    zone, rack, platform = get("zone", ""), get("rack", ""), get("platform", "")
    if type(zone) is not str or type(rack) is not str or type(platform) is not str:
        for name, value in (("zone", zone), ("rack", rack), ("platform", platform)):
            fc.text(key, name, value)
    packages, labels, state = get("packages"), get("labels"), get("state")
    packages = _NO_PACKAGES if packages is None else _packages(key, packages)
    labels = () if labels is None else _labels(key, labels)
    state = MachineState.UP if state is None else fc.member(key, "state", state, _MACHINE_STATES)
    allocated = get("allocated")
    allocated = ZERO if allocated is None else resources_from_map(allocated, key, "allocated")
    tasks, writer = get("tasks", 0), get("writer", "")
    if type(tasks) is not int or tasks < 0:
        fc.integer(key, "tasks", tasks)
    if type(writer) is not str:
        fc.text(key, "writer", writer)
    return _MACHINE(ident, capacity, zone, rack, platform, packages, labels, state, allocated, tasks, writer)


_NO_PACKAGES: frozenset[str] = frozenset()


def _packages(key: str, x) -> frozenset[str]:
    for i, name in enumerate(fc.sequence(key, "packages", x)):
        if type(name) is not str or not name:
            raise fc.expected(key, f"packages[{i}]", "a non-empty string", name)
    packages = frozenset(x)
    if len(packages) != len(x):
        raise CodecError(key, "packages", "duplicate package names")
    return packages


def _labels(key: str, x) -> tuple[tuple[str, str], ...]:
    for name, value in fc.mapping(key, "labels", x).items():
        if type(name) is not str or not name or name in _ATTRIBUTES:
            raise fc.expected(key, "labels", "label names that are non-empty strings other "
                              "than zone/rack/platform", name)
        fc.text(key, f"labels.{name}", value)
    return tuple(x.items())


# ------------------------------------------------------------------------- jobs


_SPEC_DEFAULTS = (("priority", 0), ("owner", ""), ("duration_s", None), ("gang", False),
                  ("package", ""), ("different_machine", False), ("max_per_machine", 0))


def _spec_map(job: Job) -> dict:
    d = {"id": job.id, "kind": str(job.kind), "tasks": job.tasks, "request": encode_resources(job.request)}
    for name, default in _SPEC_DEFAULTS:
        value = getattr(job, name)
        if value != default or type(value) is not type(default):
            d[name] = value
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
    return _encode(f"job {getattr(job, 'id', '?')}", job, _bare_spec_map, _bare_spec_from_map)


def decode_job(key: str, raw: bytes) -> Job:
    """A bare job spec (type tag ``"spec"``); CodecError on any invalid content."""
    return _bare_spec_from_map(key, _unpack(key, raw, "spec"))


def validate_job(job: Job) -> None:
    """Raise CodecError(key="job <id>", …) unless ``job`` is a valid, storable spec (packed too:
    an integer beyond msgpack's 64 bits is refused here, not when the job is stored)."""
    _encode(f"job {getattr(job, 'id', '?')}", job, _spec_map, _spec_from_map)


def _bare_spec_from_map(key: str, d: dict) -> Job:
    d = dict(d)
    del d["v"], d["t"]
    return fast_bare_spec(d) or _spec_from_map(key, d)  # a trace's every submission: the common shape first


def _spec_from_map(key: str, d, prefix: str = "") -> Job:
    fc.mapping(key, prefix.rstrip("."), d)
    fc.require(key, prefix, d, ("id", "kind", "tasks", "request"))
    fc.no_unknown(key, prefix, d, _SPEC_FIELDS)
    tasks = fc.integer(key, prefix + "tasks", d["tasks"], 1)
    if tasks > MAX_TASKS:
        raise fc.expected(key, prefix + "tasks", f"at most {MAX_TASKS} tasks", tasks)
    duration = d.get("duration_s")
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
    )


def _constraints(key: str, field: str, x) -> tuple[Constraint, ...]:
    return tuple(_constraint(key, f"{field}[{i}]", c) for i, c in enumerate(fc.sequence(key, field, x)))


def _constraint(key: str, field: str, c) -> Constraint:
    """eq takes one value, in/not-in at least one, exists none."""
    fc.mapping(key, field, c)
    fc.require(key, field + ".", c, ("attribute", "op"))
    fc.no_unknown(key, field + ".", c, _CONSTRAINT_FIELDS)
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


def _record_map(r: JobRecord, spec_map=_spec_map) -> dict:
    d = {"v": SCHEMA_VERSION, "t": "job", "spec": spec_map(r.job), "tasks": r.tasks}
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
    if record_shape_ok(r):
        try:
            raw = msgpack.packb(_record_map(r, _shaped_spec_map))
        except (OverflowError, ValueError, TypeError):
            pass  # the generic path names the problem
        else:
            RECORD_MEMO.put(raw, r)
            return raw
    job_id = getattr(getattr(r, "job", None), "id", "?")
    return _encode(f"job {job_id}", r, _record_map, _record_from_map)


def _shaped_spec_map(job: Job) -> dict:
    """``_spec_map`` of a spec ``record_shape_ok`` accepted, remembered by the spec's identity
    (a frozen Job of plain fields: every record of a job shares it and maps it the same; the
    map is only read, by the packer)."""
    held = _SPEC_MAPS.get(id(job))
    if held is not None and held[0] is job:
        return held[1]
    if len(_SPEC_MAPS) >= _SPEC_MAPS_MAX:
        _SPEC_MAPS.clear()
    d = _spec_map(job)
    _SPEC_MAPS[id(job)] = (job, d)
    return d


_SPEC_MAPS: dict[int, tuple[Job, dict]] = {}  # each entry holds its Job: the id is not reused while here
_SPEC_MAPS_MAX = 1 << 16


def decode_job_record(key: str, raw: bytes) -> JobRecord:
    """The JobRecord stored under ``key``; CodecError on any invalid content."""
    record = RECORD_MEMO.get(raw)
    if record is None:
        d = _unpack(key, raw, "job")
        record = fast_record(d) or _record_from_map(key, d)
        RECORD_MEMO.put(raw, record)
    return record


def _record_from_map(key: str, d: dict) -> JobRecord:
    fc.require(key, "", d, ("spec", "tasks"))
    fc.no_unknown(key, "", d, _RECORD_FIELDS)
    job = _spec_from_map(key, d["spec"], "spec.")
    states = fc.text(key, "tasks", d["tasks"])
    if len(states) != job.tasks:
        raise CodecError(key, "tasks", f"expected {job.tasks} task states (spec.tasks), got {len(states)}")
    if states.translate(NOT_A_TASK_STATE):
        bad = sorted(set(states) - set(_TASK_CHARS))
        raise CodecError(key, "tasks", f"unknown task state(s) {bad}; expected characters of {_TASK_CHARS!r}")
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


# ----------------------------------------------------------------------- allocs


def _alloc_map(a: Alloc) -> dict:
    d = {"v": SCHEMA_VERSION, "t": "alloc", "job": a.job_id, "task": a.task_index,
         "machine": a.machine_id, "resources": encode_resources(a.resources)}
    if a.priority:
        d["priority"] = a.priority
    if a.scheduler:
        d["scheduler"] = a.scheduler
    if a.placed_at:
        d["placed_at"] = a.placed_at
    if a.running:
        d["running"] = a.running
    return d


def encode_alloc(a: Alloc) -> bytes:
    """Msgpack bytes of an allocation; CodecError if invalid."""
    label = f"alloc {getattr(a, 'job_id', '?')}/{getattr(a, 'task_index', '?')}"
    return _encode(label, a, _alloc_map, _alloc_from_map)


def decode_alloc(key: str, raw: bytes) -> Alloc:
    """The Alloc stored under ``key``; CodecError on any invalid content."""
    alloc = ALLOC_MEMO.get(raw)
    if alloc is None:
        alloc = _alloc_from_map(key, _unpack(key, raw, "alloc"))
        ALLOC_MEMO.put(raw, alloc)
    return alloc


def _alloc_from_map(key: str, d: dict) -> Alloc:
    # Straight-line: this runs once per allocation when a replica lists the cell.
    try:
        job_id, task, machine_id, res = d["job"], d["task"], d["machine"], d["resources"]
    except KeyError:
        fc.require(key, "", d, ("job", "task", "machine", "resources"))
        raise
    if not _ALLOC_FIELDS.issuperset(d):
        fc.no_unknown(key, "", d, _ALLOC_FIELDS)
    if type(job_id) is not str or not job_id or "/" in job_id:
        fc.ident(key, "job", job_id)
    if type(task) is not int or task < 0:
        fc.integer(key, "task", task)
    if type(machine_id) is not str or not machine_id or "/" in machine_id:
        fc.ident(key, "machine", machine_id)
    priority = d.get("priority", 0)
    if type(priority) is not int:
        fc.integer(key, "priority", priority, None)
    scheduler = d.get("scheduler", "")
    if type(scheduler) is not str:
        fc.text(key, "scheduler", scheduler)
    placed_at = d.get("placed_at", 0.0)
    if type(placed_at) is not float or not (0.0 <= placed_at < math.inf):
        placed_at = fc.seconds(key, "placed_at", placed_at)
    running = d.get("running", False)
    if running is not False and running is not True:
        fc.flag(key, "running", running)
    return _ALLOC(job_id, task, machine_id, resources_from_map(res, key, "resources"),
                  priority, scheduler, placed_at, running)


# ---------------------------------------------------------------------- encoding


def _encode_map(label: str, value, to_map, from_map) -> dict:
    """The map form of ``value`` after checking it decodes back to an equal value."""
    try:
        d = to_map(value)
    except (AttributeError, TypeError, ValueError) as exc:
        raise CodecError(label, "", f"not a valid {type(value).__name__}: {exc}") from None
    back = from_map(label, d)
    if back != value:
        field = next((f.name for f in fields(value) if getattr(back, f.name) != getattr(value, f.name)), "")
        raise CodecError(label, field, "value does not survive encoding (duplicate, unordered or "
                         "zero-amount entries, or a wrong type)")
    return d


def _encode(label: str, value, to_map, from_map) -> bytes:
    d = _encode_map(label, value, to_map, from_map)
    try:
        return msgpack.packb(d)
    except (OverflowError, ValueError, TypeError) as exc:
        raise CodecError(label, "", f"cannot pack: {exc}") from None


# ------------------------------------------------------- map forms (trace files)


def machine_to_map(m: Machine) -> dict:
    """The validated map form of a machine, exactly as ``encode_machine`` packs it."""
    return _encode_map(f"machine {getattr(m, 'id', '?')}", m, _machine_map, _machine_from_map)


def machine_from_map(key: str, d) -> Machine:
    """The Machine whose map form (as ``machine_to_map`` gives it) is ``d``; CodecError if invalid."""
    return _machine_from_map(key, _envelope(key, d, "machine"))


def job_to_map(job: Job) -> dict:
    """The validated map form of a bare job spec, exactly as ``encode_job`` packs it."""
    return _encode_map(f"job {getattr(job, 'id', '?')}", job, _bare_spec_map, _bare_spec_from_map)


def job_from_map(key: str, d) -> Job:
    """The Job whose map form (as ``job_to_map`` gives it) is ``d``; CodecError if invalid."""
    return _bare_spec_from_map(key, _envelope(key, d, "spec"))


def _envelope(key: str, d, tag: str) -> dict:
    """``d`` after checking it is a map with this codec's schema version and type tag."""
    if type(d) is not dict:
        raise fc.expected(key, "", "a msgpack map", d)
    v = d.get("v")
    if type(v) is not int or v != SCHEMA_VERSION:
        raise CodecError(key, "v", "missing schema version" if v is None else
                         f"unknown schema version {v!r} (this codec reads {SCHEMA_VERSION})")
    if d.get("t") != tag:
        raise CodecError(key, "t", f"expected type tag {tag!r}, got {d.get('t')!r}")
    return d
