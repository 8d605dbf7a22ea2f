"""Straight-line fast paths of the job-record codec (``cellstate.codec.job``), for the common shape.

Every write of a job record (a commit, a task end, a submission) encodes one, and every
replica decodes it: the generic path validates field by field through ``codec_fields``,
builds the dataclasses through their ``__init__`` and, when encoding, decodes the map back
and compares. Here one pass of exact type and range checks accepts the common shape and
returns ``None`` for anything else, and the codec then takes its generic path, which
gives the value or raises its precise ``CodecError``. So:

- ``fast_record(d)`` returns exactly what ``codec_job._record_from_map`` returns (an equal
  ``JobRecord``, built without ``__init__``) for every map it accepts, and accepts only
  maps that the generic decoder accepts; ``fast_spec(d)`` likewise for a spec map
  (``codec_job._spec_from_map``: job records' specs and a trace's bare specs, the latter through
  ``fast_bare_spec``, which also marks the spec as of the common shape);
- ``shaped_spec_map(job, …)`` and ``record_fields_ok(r)`` accept only records whose map form
  decodes back equal
  (exact types: ``str``, ``int``, ``float`` times, ``bool`` flags, enum members, tuples of
  ``Constraint``; core-only resources of non-negative ints; no ``-0.0``), so encoding them needs no
  decode-back to be as safe as the generic encoder. The bytes are the same either way
  (``_record_map`` builds the map in both).

Nothing here imports ``cellstate.codec.job`` (it imports this module).
"""

from __future__ import annotations

import math
from zlib import compress as _compress, decompressobj as _decompressobj, error as _ZlibError
from math import copysign

from cellstate.codec.resources import core_resources
from cellstate.fastbuild import builder
from cellstate.model import Constraint, ConstraintOp, Job, JobKind, JobRecord, TaskState
from cellstate.resources import Resources

MAX_TASKS = 1_000_000
TASK_CHARS = "".join(s.value for s in TaskState)
# Deletes every TaskState character, so what is left is not a task state (the generic path).
NOT_A_TASK_STATE = str.maketrans("", "", TASK_CHARS)
_TASK_BYTES = TASK_CHARS.encode()
SPEC_FIELDS = frozenset(
    "id kind tasks request priority owner constraints duration_s gang package "
    "different_machine max_per_machine scheduler estimate_s".split())
RECORD_FIELDS = frozenset(
    "v t spec tasks tasks_z submitted_at reason killed first_attempt_at placed_at".split())
STATES_Z_MIN_TASKS = 4096
"""A record of at least this many tasks stores its task states deflated (``tasks_z``, zlib
bytes) when that is under half the plain string's length: a placement then rewrites bytes that
follow the states' entropy (a huge job being placed, ``a…ap…p``, compresses ~1000x), not one
byte per task. Smaller records keep the plain ``tasks`` string (the same bytes as before): at
most 4 KiB of states per write, next to a commit's allocs and ledgers, and deflating records of
1,024+ tasks cost a Google replay ~2 % of its CPU for no gain in etcd's quota."""
CONSTRAINT_FIELDS = frozenset(("attribute", "op", "values"))
_JOB_KINDS = {k.value: k for k in JobKind}
_OPS = {o.value: o for o in ConstraintOp}
_EQ, _EXISTS = ConstraintOp.EQ, ConstraintOp.EXISTS
_INF = math.inf
_JOB, _RECORD, _CONSTRAINT = builder(Job), builder(JobRecord), builder(Constraint)


# ------------------------------------------------------------------------------ decode


def fast_record(d: dict) -> JobRecord | None:
    """The JobRecord of an enveloped record map in the common shape, or None (the caller
    then decodes it the generic way, which raises the precise error if it is invalid)."""
    if not RECORD_FIELDS.issuperset(d):
        return None
    spec, states = d.get("spec"), d.get("tasks")
    if "tasks_z" in d:
        if states is not None:
            return None  # both: the generic path names the problem
        states = expand_states(d["tasks_z"])
    if type(spec) is not dict or type(states) is not str:
        return None
    job = fast_spec(spec)
    if job is None or len(states) != job.tasks or not task_states_ok(states):
        return None
    get = d.get
    submitted, reason, killed = get("submitted_at", 0.0), get("reason", ""), get("killed", False)
    first, placed = get("first_attempt_at"), get("placed_at")
    t = type(submitted)
    if (t is not float and t is not int) or not 0 <= submitted < _INF:
        return None
    if type(reason) is not str or (killed is not False and killed is not True):
        return None
    if first is not None:
        t = type(first)
        if (t is not float and t is not int) or not 0 <= first < _INF:
            return None
        first = float(first)
    if placed is not None:
        t = type(placed)
        if (t is not float and t is not int) or not 0 <= placed < _INF:
            return None
        placed = float(placed)
    return _RECORD(job, states, float(submitted), reason, killed, first, placed)


def fast_spec(d: dict) -> Job | None:
    """A spec map's Job in the common shape (see ``fast_record``), or None."""
    # Straight-line, one check per field: every job record a replica applies comes here.
    if not SPEC_FIELDS.issuperset(d):
        return None
    try:
        ident, kind, tasks, request = d["id"], d["kind"], d["tasks"], d["request"]
    except KeyError:
        return None
    if type(ident) is not str or not ident or "/" in ident or type(kind) is not str:
        return None
    kind = _JOB_KINDS.get(kind)
    if kind is None or type(tasks) is not int or not 1 <= tasks <= MAX_TASKS:
        return None
    if type(request) is not dict or len(request) != 3:
        return None
    cpu, memory, disk = request.get("cpu"), request.get("memory"), request.get("disk")
    if type(cpu) is not int or cpu < 0 or type(memory) is not int or memory < 0 or type(disk) is not int \
            or disk < 0:
        return None
    get = d.get
    priority, owner, constraints = get("priority", 0), get("owner", ""), get("constraints")
    duration, gang, package = get("duration_s"), get("gang", False), get("package", "")
    different, most = get("different_machine", False), get("max_per_machine", 0)
    scheduler = get("scheduler", "")
    if type(scheduler) is not str or "/" in scheduler:
        return None
    if type(priority) is not int or type(owner) is not str or type(package) is not str:
        return None
    if (gang is not False and gang is not True) or (different is not False and different is not True):
        return None
    if type(most) is not int or most < 0:
        return None
    if duration is not None:
        t = type(duration)
        if (t is not float and t is not int) or not 0 <= duration < _INF:
            return None
        duration = float(duration)
    estimate = get("estimate_s")
    if estimate is not None:
        t = type(estimate)
        if (t is not float and t is not int) or not 0 <= estimate < _INF:
            return None
        estimate = float(estimate)
    if constraints is None:
        constraints = ()
    else:
        constraints = _fast_constraints(constraints)
        if constraints is None:
            return None
    return _JOB(ident, kind, tasks, core_resources(cpu, memory, disk), priority, owner, constraints,
                duration, gang, package, different, most, scheduler, estimate)


def fast_bare_spec(d: dict) -> Job | None:
    """``fast_spec(d)``, with the Job it builds remembered as shape-checked when it passes
    ``_spec_shape_ok`` (every field but a ``-0.0`` duration or estimate was checked while building it):
    a trace's submission is encoded into its first record right after, and that encoding
    then skips the spec's check (``shaped_spec_map``)."""
    job = fast_spec(d)
    if job is not None and _time_ok(job.duration_s) and _time_ok(job.estimate_s):
        _remember_shaped(job, None)
    return job


def _fast_constraints(x) -> tuple[Constraint, ...] | None:
    if type(x) is not list:
        return None
    out = []
    for c in x:
        if type(c) is not dict or not CONSTRAINT_FIELDS.issuperset(c):
            return None
        attribute, op, values = c.get("attribute"), c.get("op"), c.get("values", [])
        if type(attribute) is not str or not attribute or type(op) is not str or type(values) is not list:
            return None
        op = _OPS.get(op)
        if op is None or not _values_fit(op, values):
            return None
        out.append(_CONSTRAINT(attribute, op, tuple(values)))
    return tuple(out)


def _values_fit(op: ConstraintOp, values) -> bool:
    """str values, as many as the operator takes (eq one, exists none, in/not-in some)."""
    for value in values:
        if type(value) is not str:
            return False
    count = len(values)
    return count == 1 if op is _EQ else (count == 0 if op is _EXISTS else count > 0)


# ------------------------------------------------------------------------------ encode


def shaped_spec_map(job, to_map) -> dict | None:
    """``to_map(job)`` when ``job`` is a spec of the common shape (``_spec_shape_ok``: its map
    form provably decodes back equal), remembered by the spec's identity; None otherwise (the
    generic encoder decides). The records of one job share its spec, and a task end or kill
    encodes a record of a spec encoded before; the map is only read, by the packer."""
    held = _SHAPED_SPECS.get(id(job))
    if held is not None and held[0] is job:
        if held[1] is not None:
            return held[1]
    elif not _spec_shape_ok(job):
        return None
    d = to_map(job)
    _remember_shaped(job, d)
    return d


def record_fields_ok(r: JobRecord) -> bool:
    """True when the fields of ``r`` beside its spec are of the common shape (see the module
    docstring); False says nothing (the generic encoder decides)."""
    states = r.tasks
    if type(states) is not str or len(states) != r.job.tasks or not task_states_ok(states):
        return False
    submitted, first, placed = r.submitted_at, r.first_attempt_at, r.placed_at
    if type(submitted) is not float or not (0.0 < submitted < _INF or _time_ok(submitted)):
        return False
    if type(r.reason) is not str or (r.killed is not False and r.killed is not True):
        return False
    # _time_ok of each, its usual answers without the call
    return (first is None or (type(first) is float and 0.0 < first < _INF) or _time_ok(first)) and (
        placed is None or (type(placed) is float and 0.0 < placed < _INF) or _time_ok(placed))


def compress_states(states: str) -> bytes | None:
    """``states`` deflated (zlib, level 1) when it has at least ``STATES_Z_MIN_TASKS`` tasks and
    that takes less than half its length; None otherwise (store it plain)."""
    n = len(states)
    if n < STATES_Z_MIN_TASKS:
        return None
    packed = _compress(states.encode(), 1)
    return packed if len(packed) < n // 2 else None


def expand_states(packed) -> str | None:
    """The task-state string of a ``tasks_z`` value, or None when it is not a zlib stream of at
    most ``MAX_TASKS`` ASCII characters (the caller checks them and the length)."""
    if type(packed) is not bytes or not packed:
        return None
    inflate = _decompressobj()
    try:
        raw = inflate.decompress(packed, MAX_TASKS + 1)
    except _ZlibError:
        return None
    if len(raw) > MAX_TASKS or not inflate.eof or inflate.unused_data or not raw.isascii():
        return None
    return raw.decode()


def task_states_ok(states: str) -> bool:
    """True when every character of ``states`` is a ``TaskState``'s (``bytes.translate``
    deleting them runs several times faster than ``str.translate`` on thousands of tasks)."""
    return states.isascii() and not states.encode().translate(None, _TASK_BYTES)


# Specs that passed ``_spec_shape_ok`` by identity, with their map form once an encode asked
# for it (each entry holds its Job, so its id is not reused while it is here; a Job is frozen).
# Cleared when full.
_SHAPED_SPECS: dict[int, tuple[Job, dict | None]] = {}
_SHAPED_MAX = 1 << 16


def _remember_shaped(job: Job, spec_map: dict | None) -> None:
    if len(_SHAPED_SPECS) >= _SHAPED_MAX:
        _SHAPED_SPECS.clear()
    _SHAPED_SPECS[id(job)] = (job, spec_map)


def _time_ok(x) -> bool:
    """None or a finite float >= 0 that is not -0.0 (which would decode as 0.0)."""
    return x is None or (type(x) is float and (0.0 < x < _INF or (x == 0.0 and copysign(1.0, x) > 0)))


def _spec_shape_ok(job) -> bool:
    if type(job) is not Job:
        return False
    ident, tasks, request = job.id, job.tasks, job.request
    if type(ident) is not str or not ident or "/" in ident or type(job.kind) is not JobKind:
        return False
    if type(tasks) is not int or not 1 <= tasks <= MAX_TASKS:
        return False
    if (type(request) is not Resources or request.extra != () or type(request.cpu) is not int or request.cpu < 0
            or type(request.memory) is not int or request.memory < 0
            or type(request.disk) is not int or request.disk < 0):
        return False
    if type(job.priority) is not int or type(job.owner) is not str or type(job.package) is not str:
        return False
    if type(job.scheduler) is not str or "/" in job.scheduler:
        return False
    if job.gang is not False and job.gang is not True:
        return False
    if job.different_machine is not False and job.different_machine is not True:
        return False
    if type(job.max_per_machine) is not int or job.max_per_machine < 0 or not _time_ok(job.duration_s):
        return False
    if not _time_ok(job.estimate_s):
        return False
    constraints = job.constraints
    if type(constraints) is not tuple:
        return False
    for c in constraints:
        if (type(c) is not Constraint or type(c.attribute) is not str or not c.attribute
                or type(c.op) is not ConstraintOp or type(c.values) is not tuple or not _values_fit(c.op, c.values)):
            return False
    return True
