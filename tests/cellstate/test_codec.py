"""The msgpack codec: round trips, strict rejection naming the field, fuzzing."""

from __future__ import annotations

import copy
import math

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import allocs, job_records, jobs, machines, resources

from cellstate.codec.records import (
    MAX_TASKS,
    SCHEMA_VERSION,
    CodecError,
    decode_alloc,
    decode_job,
    decode_job_record,
    decode_machine,
    encode_alloc,
    encode_job,
    encode_job_record,
    encode_machine,
    encode_resources,
    resources_from_map,
    validate_job,
)
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
from cellstate.resources import Resources

CODECS = {  # type tag -> (encode, decode)
    "machine": (encode_machine, decode_machine),
    "job": (encode_job_record, decode_job_record),
    "alloc": (encode_alloc, decode_alloc),
    "spec": (encode_job, decode_job),
}
VALUES = {"machine": machines(), "job": job_records(), "alloc": allocs(), "spec": jobs()}

# ------------------------------------------------------------------ round trips


@pytest.mark.parametrize("tag", list(CODECS), ids=list(CODECS))
@given(data=st.data())
def test_round_trip(tag, data):
    encode, decode = CODECS[tag]
    value = data.draw(VALUES[tag])
    raw = encode(value)
    assert decode(f"{tag}s/x", raw) == value
    stored = msgpack.unpackb(raw)
    assert (stored["v"], stored["t"]) == (SCHEMA_VERSION, tag)
    assert encode(decode("k", raw)) == raw, "encoding is deterministic"


@given(resources())
def test_resources_round_trip(r):
    assert resources_from_map(encode_resources(r)) == r


def test_resources_map_defaults_core_names_and_drops_zero_extras():
    assert resources_from_map({"gpu": 2, "fpga": 0, "cpu": 5}) == Resources.of(cpu=5, gpu=2)
    assert resources_from_map({}) == Resources()


def test_allocated_may_exceed_capacity():
    m = Machine("m1", Resources.of(1, 1, 1), allocated=Resources.of(5, 5, 5, gpu=1))
    assert decode_machine("machines/m1", encode_machine(m)) == m


def test_int_accepted_where_a_time_is_expected():
    raw = _pack({**ALLOC, "placed_at": 7})
    placed_at = decode_alloc("allocs/j1/0", raw).placed_at
    assert placed_at == 7.0 and type(placed_at) is float


def test_defaults_are_left_out_of_the_map():
    raw = encode_alloc(Alloc("j1", 0, "m1", Resources.of(1, 2, 3)))
    assert msgpack.unpackb(raw) == ALLOC


def test_error_message_names_key_and_field():
    with pytest.raises(CodecError) as caught:
        decode_machine("machines/m1", _pack(_with(MACHINE, {"capacity.cpu": -3})))
    err = caught.value
    assert isinstance(err, ValueError)
    assert (err.key, err.field) == ("machines/m1", "capacity.cpu")
    assert str(err) == "machines/m1: field 'capacity.cpu': expected a non-negative integer, got -3"


# ------------------------------------------------------- decoding: rejections

RES = {"cpu": 1, "memory": 2, "disk": 3}
MACHINE = {"v": 1, "t": "machine", "id": "m1", "capacity": RES}
SPEC = {"id": "j1", "kind": "batch", "tasks": 2, "request": RES}
RECORD = {"v": 1, "t": "job", "spec": SPEC, "tasks": "pp"}
ALLOC = {"v": 1, "t": "alloc", "job": "j1", "task": 0, "machine": "m1", "resources": RES}
BARE_SPEC = {"v": 1, "t": "spec", **SPEC}
DELETE = object()


def _with(base: dict, changes: dict) -> dict:
    """A deep copy of ``base`` with dotted paths set (or removed, for DELETE)."""
    out = copy.deepcopy(base)
    for path, value in changes.items():
        *parents, last = path.split(".")
        node = out
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if value is DELETE:
            del node[last]
        else:
            node[last] = value
    return out


def _pack(obj) -> bytes:
    return msgpack.packb(obj)


def _eq(values):
    return [{"attribute": "zone", "op": "eq", "values": values}]


REJECTED = [
    # (id, decoder, raw bytes, field named by the error)
    ("not-msgpack", decode_machine, b"\xc1", ""),
    ("truncated", decode_alloc, _pack(ALLOC)[:-3], ""),
    ("trailing-bytes", decode_alloc, _pack(ALLOC) + b"\x00", ""),
    ("invalid-utf8", decode_alloc, b"\x81\xa1v\xa2\xff\xfe", ""),
    ("not-a-map", decode_machine, _pack([1, 2]), ""),
    ("empty", decode_machine, b"", ""),
    ("wrong-tag", decode_machine, _pack(ALLOC), "t"),
    ("record-as-spec", decode_job, _pack(RECORD), "t"),
    ("no-version", decode_machine, _pack(_with(MACHINE, {"v": DELETE})), "v"),
    ("future-version", decode_machine, _pack(_with(MACHINE, {"v": 2})), "v"),
    ("version-true", decode_alloc, _pack(_with(ALLOC, {"v": True})), "v"),
    ("version-float", decode_alloc, _pack(_with(ALLOC, {"v": 1.0})), "v"),
    ("machine-no-id", decode_machine, _pack(_with(MACHINE, {"id": DELETE})), "id"),
    ("machine-no-capacity", decode_machine, _pack(_with(MACHINE, {"capacity": DELETE})), "capacity"),
    ("machine-empty-id", decode_machine, _pack(_with(MACHINE, {"id": ""})), "id"),
    ("machine-id-slash", decode_machine, _pack(_with(MACHINE, {"id": "a/b"})), "id"),
    ("machine-id-int", decode_machine, _pack(_with(MACHINE, {"id": 7})), "id"),
    ("negative-cpu", decode_machine, _pack(_with(MACHINE, {"capacity.cpu": -3})), "capacity.cpu"),
    ("bool-cpu", decode_machine, _pack(_with(MACHINE, {"capacity.cpu": True})), "capacity.cpu"),
    ("float-memory", decode_machine, _pack(_with(MACHINE, {"capacity.memory": 1.5})), "capacity.memory"),
    ("negative-extra", decode_machine, _pack(_with(MACHINE, {"capacity.gpu": -1})), "capacity.gpu"),
    ("empty-resource-name", decode_machine, _pack(_with(MACHINE, {"capacity.": 1})), "capacity"),
    ("capacity-list", decode_machine, _pack(_with(MACHINE, {"capacity": [1, 2, 3]})), "capacity"),
    ("negative-allocated", decode_machine, _pack(_with(MACHINE, {"allocated": {"disk": -1}})),
     "allocated.disk"),
    ("unknown-state", decode_machine, _pack(_with(MACHINE, {"state": "broken"})), "state"),
    ("state-enum-name", decode_machine, _pack(_with(MACHINE, {"state": "UP"})), "state"),
    ("zone-bytes", decode_machine, _pack(_with(MACHINE, {"zone": b"z1"})), "zone"),
    ("packages-not-list", decode_machine, _pack(_with(MACHINE, {"packages": "pkg"})), "packages"),
    ("package-not-string", decode_machine, _pack(_with(MACHINE, {"packages": ["a", 1]})), "packages[1]"),
    ("duplicate-package", decode_machine, _pack(_with(MACHINE, {"packages": ["a", "a"]})), "packages"),
    ("labels-list", decode_machine, _pack(_with(MACHINE, {"labels": [["os", "linux"]]})), "labels"),
    ("label-value-int", decode_machine, _pack(_with(MACHINE, {"labels": {"os": 3}})), "labels.os"),
    ("label-shadows-zone", decode_machine, _pack(_with(MACHINE, {"labels": {"zone": "a"}})), "labels"),
    ("negative-task-count", decode_machine, _pack(_with(MACHINE, {"tasks": -1})), "tasks"),
    ("machine-unknown-field", decode_machine, _pack(_with(MACHINE, {"colour": "red"})), "colour"),
    ("record-no-spec", decode_job_record, _pack(_with(RECORD, {"spec": DELETE})), "spec"),
    ("record-spec-not-map", decode_job_record, _pack(_with(RECORD, {"spec": "j1"})), "spec"),
    ("record-no-states", decode_job_record, _pack(_with(RECORD, {"tasks": DELETE})), "tasks"),
    ("unknown-task-state", decode_job_record, _pack(_with(RECORD, {"tasks": "pq"})), "tasks"),
    ("too-few-states", decode_job_record, _pack(_with(RECORD, {"tasks": "p"})), "tasks"),
    ("too-many-states", decode_job_record, _pack(_with(RECORD, {"tasks": "ppp"})), "tasks"),
    ("states-not-string", decode_job_record, _pack(_with(RECORD, {"tasks": ["p", "p"]})), "tasks"),
    ("zero-tasks", decode_job_record, _pack(_with(RECORD, {"spec.tasks": 0, "tasks": ""})), "spec.tasks"),
    ("bool-tasks", decode_job_record, _pack(_with(RECORD, {"spec.tasks": True, "tasks": "p"})),
     "spec.tasks"),
    ("unknown-kind", decode_job_record, _pack(_with(RECORD, {"spec.kind": "cron"})), "spec.kind"),
    ("spec-id-slash", decode_job_record, _pack(_with(RECORD, {"spec.id": "a/b"})), "spec.id"),
    ("spec-no-request", decode_job_record, _pack(_with(RECORD, {"spec.request": DELETE})), "spec.request"),
    ("negative-request", decode_job_record, _pack(_with(RECORD, {"spec.request.cpu": -1})),
     "spec.request.cpu"),
    ("bool-priority", decode_job_record, _pack(_with(RECORD, {"spec.priority": True})), "spec.priority"),
    ("string-gang", decode_job_record, _pack(_with(RECORD, {"spec.gang": "yes"})), "spec.gang"),
    ("infinite-duration", decode_job_record, _pack(_with(RECORD, {"spec.duration_s": math.inf})),
     "spec.duration_s"),
    ("nan-duration", decode_job_record, _pack(_with(RECORD, {"spec.duration_s": math.nan})),
     "spec.duration_s"),
    ("unknown-op", decode_job_record,
     _pack(_with(RECORD, {"spec.constraints": [{"attribute": "zone", "op": "like", "values": ["a"]}]})),
     "spec.constraints[0].op"),
    ("eq-two-values", decode_job_record, _pack(_with(RECORD, {"spec.constraints": _eq(["a", "b"])})),
     "spec.constraints[0].values"),
    ("eq-no-values", decode_job_record, _pack(_with(RECORD, {"spec.constraints": _eq([])})),
     "spec.constraints[0].values"),
    ("constraint-value-int", decode_job_record, _pack(_with(RECORD, {"spec.constraints": _eq([1])})),
     "spec.constraints[0].values[0]"),
    ("constraint-unknown-field", decode_job_record,
     _pack(_with(RECORD, {"spec.constraints": [{"attribute": "a", "op": "exists", "why": 1}]})),
     "spec.constraints[0].why"),
    ("spec-unknown-field", decode_job_record, _pack(_with(RECORD, {"spec.owners": "x"})), "spec.owners"),
    ("negative-submitted", decode_job_record, _pack(_with(RECORD, {"submitted_at": -1.0})), "submitted_at"),
    ("int-killed", decode_job_record, _pack(_with(RECORD, {"killed": 1})), "killed"),
    ("string-placed-at", decode_job_record, _pack(_with(RECORD, {"placed_at": "now"})), "placed_at"),
    ("record-unknown-field", decode_job_record, _pack(_with(RECORD, {"state": "pending"})), "state"),
    ("bare-spec-zero-tasks", decode_job, _pack(_with(BARE_SPEC, {"tasks": 0})), "tasks"),
    ("bare-spec-huge-tasks", decode_job, _pack(_with(BARE_SPEC, {"tasks": 10**7})), "tasks"),
    ("alloc-no-machine", decode_alloc, _pack(_with(ALLOC, {"machine": DELETE})), "machine"),
    ("alloc-empty-job", decode_alloc, _pack(_with(ALLOC, {"job": ""})), "job"),
    ("alloc-job-slash", decode_alloc, _pack(_with(ALLOC, {"job": "a/b"})), "job"),
    ("alloc-machine-slash", decode_alloc, _pack(_with(ALLOC, {"machine": "/m"})), "machine"),
    ("negative-task", decode_alloc, _pack(_with(ALLOC, {"task": -1})), "task"),
    ("bool-task", decode_alloc, _pack(_with(ALLOC, {"task": False})), "task"),
    ("float-task", decode_alloc, _pack(_with(ALLOC, {"task": 1.0})), "task"),
    ("alloc-negative-disk", decode_alloc, _pack(_with(ALLOC, {"resources.disk": -5})), "resources.disk"),
    ("alloc-resources-nil", decode_alloc, _pack(_with(ALLOC, {"resources": None})), "resources"),
    ("nan-placed-at", decode_alloc, _pack(_with(ALLOC, {"placed_at": math.nan})), "placed_at"),
    ("inf-placed-at", decode_alloc, _pack(_with(ALLOC, {"placed_at": math.inf})), "placed_at"),
    ("negative-placed-at", decode_alloc, _pack(_with(ALLOC, {"placed_at": -0.5})), "placed_at"),
    ("int-running", decode_alloc, _pack(_with(ALLOC, {"running": 1})), "running"),
    ("float-priority", decode_alloc, _pack(_with(ALLOC, {"priority": 2.0})), "priority"),
    ("nil-scheduler", decode_alloc, _pack(_with(ALLOC, {"scheduler": None})), "scheduler"),
    ("alloc-unknown-field", decode_alloc, _pack(_with(ALLOC, {"node": "m1"})), "node"),
]


@pytest.mark.parametrize("decode, raw, field", [c[1:] for c in REJECTED], ids=[c[0] for c in REJECTED])
def test_decode_rejects(decode, raw, field):
    with pytest.raises(CodecError) as caught:
        decode("some/key", raw)
    assert caught.value.field == field, str(caught.value)
    assert caught.value.key == "some/key"
    assert str(caught.value).startswith("some/key: ")


@pytest.mark.parametrize("base", [MACHINE, RECORD, ALLOC, BARE_SPEC], ids=lambda b: b["t"])
def test_base_maps_of_rejection_table_are_valid(base):
    CODECS[base["t"]][1]("k", _pack(base))


# ------------------------------------------------------- encoding: rejections

JOB = Job("j1", JobKind.BATCH, 2, Resources.of(1, 2, 3))
M = Machine("m1", Resources.of(4, 4, 4))
A = Alloc("j1", 0, "m1", Resources.of(1, 1, 1))

ENCODE_REJECTED = [
    # (id, encoder, value, label (error key), field)
    ("negative-allocated", encode_machine, Machine("m1", Resources(4), allocated=Resources(-1)),
     "machine m1", "allocated.cpu"),
    ("duplicate-labels", encode_machine, Machine("m1", Resources(1), labels=(("a", "1"), ("a", "2"))),
     "machine m1", "labels"),
    ("unsorted-extras", encode_machine, Machine("m1", Resources(1, extra=(("b", 1), ("a", 1)))),
     "machine m1", "capacity"),
    ("zero-extra", encode_machine, Machine("m1", Resources(1, extra=(("gpu", 0),))), "machine m1", "capacity"),
    ("state-not-enum", encode_machine, Machine("m1", Resources(1), state="off"), "machine m1", "state"),
    ("capacity-not-resources", encode_machine, Machine("m1", {"cpu": 1}), "machine m1", ""),
    ("id-slash", encode_alloc, Alloc("j/1", 0, "m1", Resources(1)), "alloc j/1/0", "job"),
    ("nan-placed-at", encode_alloc, Alloc("j1", 0, "m1", Resources(1), placed_at=math.nan),
     "alloc j1/0", "placed_at"),
    ("int-beyond-msgpack", encode_alloc, Alloc("j1", 0, "m1", Resources(2**64)), "alloc j1/0", ""),
    ("states-length", encode_job_record, JobRecord(JOB, "p"), "job j1", "tasks"),
    ("none-submitted", encode_job_record, JobRecord(JOB, "pp", submitted_at=None), "job j1", "submitted_at"),
    ("spec-zero-tasks", encode_job, Job("j1", JobKind.BATCH, 0, Resources(1)), "job j1", "tasks"),
    ("spec-bool-priority", encode_job, Job("j1", JobKind.BATCH, 1, Resources(1), priority=True),
     "job j1", "priority"),
    ("spec-float-priority", encode_job, Job("j1", JobKind.BATCH, 1, Resources(1), priority=1.0),
     "job j1", "priority"),
]


@pytest.mark.parametrize("encode, value, label, field", [c[1:] for c in ENCODE_REJECTED],
                         ids=[c[0] for c in ENCODE_REJECTED])
def test_encode_rejects(encode, value, label, field):
    with pytest.raises(CodecError) as caught:
        encode(value)
    assert (caught.value.key, caught.value.field) == (label, field), str(caught.value)


BAD_JOBS = [
    ("zero-tasks", Job("j1", JobKind.BATCH, 0, Resources(1)), "tasks"),
    ("empty-id", Job("", JobKind.BATCH, 1, Resources(1)), "id"),
    ("kind-string", Job("j1", "cron", 1, Resources(1)), "kind"),
    ("negative-request", Job("j1", JobKind.BATCH, 1, Resources(memory=-1)), "request.memory"),
    ("negative-duration", Job("j1", JobKind.BATCH, 1, Resources(1), duration_s=-1.0), "duration_s"),
    ("in-without-values", Job("j1", JobKind.BATCH, 1, Resources(1),
                              constraints=(Constraint("zone", ConstraintOp.IN),)), "constraints[0].values"),
    ("exists-with-value", Job("j1", JobKind.BATCH, 1, Resources(1),
                              constraints=(Constraint("ssd", ConstraintOp.EXISTS, ("y",)),)),
     "constraints[0].values"),
    ("empty-attribute", Job("j1", JobKind.BATCH, 1, Resources(1),
                            constraints=(Constraint("", ConstraintOp.EQ, ("a",)),)), "constraints[0].attribute"),
    ("negative-max-per-machine", Job("j1", JobKind.BATCH, 1, Resources(1), max_per_machine=-1),
     "max_per_machine"),
]


@pytest.mark.parametrize("job, field", [c[1:] for c in BAD_JOBS], ids=[c[0] for c in BAD_JOBS])
def test_validate_job_rejects(job, field):
    with pytest.raises(CodecError) as caught:
        validate_job(job)
    assert (caught.value.key, caught.value.field) == (f"job {job.id}", field), str(caught.value)


@given(jobs())
def test_validate_job_accepts_valid_jobs(job):
    validate_job(job)


# ---------------------------------------------------------------------- fuzzing

msgpack_objects = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats()
    | st.text(st.characters(exclude_categories=("Cs",)), max_size=6) | st.binary(max_size=6)
    | st.sampled_from(["", "v", "t", "id", "p", "up", "batch", "eq", "cpu", "/"]),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(["v", "t", "id", "cpu", "x"]) | st.text(max_size=3), inner, max_size=4),
    max_leaves=12,
)


TRICKY = [True, False, 0, 1, -1, 2**64 - 1, 10**7, 1.0, -0.5, math.nan, math.inf, "", "/", "a/b", "p",
          "pz", "ppp", "up", "eq", "exists", "batch", None, [], ["a", "a"], {}, [""], {"": 1}, {"zone": "z"}, b"x"]
garbage = st.sampled_from(TRICKY) | msgpack_objects
FIELD_NAMES = sorted({"colour", "node"} | {k for base in (MACHINE, SPEC, ALLOC) for k in base}
                     | {"zone", "rack", "platform", "packages", "labels", "state", "allocated",
                        "priority", "owner", "constraints", "duration_s", "gang", "package",
                        "different_machine", "max_per_machine", "submitted_at", "reason",
                        "killed", "first_attempt_at", "placed_at", "scheduler", "running"})


def _is_id(x) -> bool:
    return type(x) is str and x != "" and "/" not in x


def _is_count(x, low: int = 0) -> bool:
    return type(x) is int and x >= low


def _is_time(x) -> bool:
    return type(x) is float and math.isfinite(x) and x >= 0


def _is_resources(r) -> bool:
    extra_ok = all(type(k) is str and k and k not in ("cpu", "memory", "disk") and _is_count(v, 1)
                   for k, v in r.extra) and list(r.extra) == sorted(dict(r.extra).items())
    return type(r) is Resources and all(map(_is_count, (r.cpu, r.memory, r.disk))) and extra_ok


def _is_constraint(c) -> bool:
    n = len(c.values)
    count_ok = {"eq": n == 1, "exists": n == 0}.get(c.op, n >= 1)
    return (type(c.attribute) is str and c.attribute != "" and type(c.op) is ConstraintOp and count_ok
            and type(c.values) is tuple and all(type(v) is str for v in c.values))


def _is_job(j) -> bool:
    return (_is_id(j.id) and type(j.kind) is JobKind and _is_count(j.tasks, 1) and j.tasks <= MAX_TASKS and _is_resources(j.request)
            and type(j.priority) is int and type(j.owner) is str and type(j.constraints) is tuple
            and all(map(_is_constraint, j.constraints)) and (j.duration_s is None or _is_time(j.duration_s))
            and type(j.gang) is bool and type(j.package) is str and type(j.different_machine) is bool
            and _is_count(j.max_per_machine))


def _is_valid(value) -> bool:
    """The model's types and invariants, checked independently of the codec."""
    if type(value) is Machine:
        labels = dict(value.labels)
        return (_is_id(value.id) and _is_resources(value.capacity) and _is_resources(value.allocated)
                and all(type(getattr(value, a)) is str for a in ("zone", "rack", "platform"))
                and type(value.packages) is frozenset and all(type(p) is str and p for p in value.packages)
                and len(labels) == len(value.labels) and not labels.keys() & {"zone", "rack", "platform"}
                and all(type(k) is str and k and type(v) is str for k, v in labels.items())
                and type(value.state) is MachineState and _is_count(value.task_count))
    if type(value) is JobRecord:
        times = [value.submitted_at] + [t for t in (value.first_attempt_at, value.placed_at) if t is not None]
        return (_is_job(value.job) and type(value.tasks) is str and len(value.tasks) == value.job.tasks
                and set(value.tasks) <= set("parfxk") and all(map(_is_time, times))
                and type(value.reason) is str and type(value.killed) is bool)
    if type(value) is Alloc:
        return (_is_id(value.job_id) and _is_count(value.task_index) and _is_id(value.machine_id)
                and _is_resources(value.resources) and type(value.priority) is int
                and type(value.scheduler) is str and _is_time(value.placed_at) and type(value.running) is bool)
    return type(value) is Job and _is_job(value)


@pytest.mark.parametrize("tag", list(CODECS), ids=list(CODECS))
@given(data=st.data())
def test_validity_oracle_accepts_generated_values(tag, data):
    assert _is_valid(data.draw(VALUES[tag]))


def _rejects_or_is_valid(tag: str, raw: bytes) -> None:
    """Decoding raises CodecError, or yields a valid value that re-encodes and decodes equal."""
    encode, decode = CODECS[tag]
    try:
        value = decode("fuzz/key", raw)
    except CodecError:
        return
    assert _is_valid(value), value
    assert decode("fuzz/key", encode(value)) == value


@pytest.mark.parametrize("tag", list(CODECS), ids=list(CODECS))
@given(raw=st.binary(max_size=64))
def test_random_bytes(tag, raw):
    _rejects_or_is_valid(tag, raw)


@pytest.mark.parametrize("tag", list(CODECS), ids=list(CODECS))
@given(obj=msgpack_objects, versioned=st.booleans())
def test_random_msgpack_objects(tag, obj, versioned):
    if versioned and isinstance(obj, dict):
        obj = {**obj, "v": 1, "t": tag}  # get past the envelope checks
    _rejects_or_is_valid(tag, msgpack.packb(obj))


def _paths(node, prefix=()):
    """Every path to a map entry or list item inside ``node``."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for k, child in items:
        yield prefix + (k,)
        yield from _paths(child, prefix + (k,))


@pytest.mark.parametrize("tag", list(CODECS), ids=list(CODECS))
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_valid_values(tag, data):
    """One entry of a valid value replaced, removed or added: rejected or still valid."""
    stored = msgpack.unpackb(CODECS[tag][0](data.draw(VALUES[tag])))
    path = data.draw(st.sampled_from(list(_paths(stored))))
    parent = stored
    for part in path[:-1]:
        parent = parent[part]
    action = data.draw(st.sampled_from(["replace", "delete", "add"]))
    if action == "delete":
        del parent[path[-1]]
    elif action == "add" and isinstance(parent, dict):
        parent[data.draw(st.sampled_from(FIELD_NAMES) | st.text(max_size=4))] = data.draw(garbage)
    else:
        parent[path[-1]] = data.draw(garbage)
    _rejects_or_is_valid(tag, msgpack.packb(stored))


FULL_JOB = Job("j1", JobKind.SERVICE, 3, Resources.of(1, 2, 3, gpu=1), priority=5, owner="ann",
               constraints=(Constraint("zone", ConstraintOp.IN, ("a", "b")),
                            Constraint("ssd", ConstraintOp.EXISTS)),
               duration_s=9.5, gang=True, package="pkg", different_machine=True, max_per_machine=2)
FULL = {  # every optional field present, so every field gets mutated below
    "machine": Machine("m1", Resources.of(8, 8, 8, gpu=2), zone="z", rack="r", platform="p",
                       packages=frozenset({"a", "b"}), labels=(("os", "linux"),),
                       state=MachineState.DRAINING, allocated=Resources.of(1, 1, 1), task_count=1),
    "job": JobRecord(FULL_JOB, "paf", submitted_at=1.0, reason="why", killed=True,
                     first_attempt_at=2.0, placed_at=3.0),
    "alloc": Alloc("j1", 2, "m1", Resources.of(1, 2, 3, gpu=1), priority=3, scheduler="batch",
                   placed_at=4.0, running=True),
    "spec": FULL_JOB,
}


@pytest.mark.parametrize("tag", list(CODECS), ids=list(CODECS))
def test_every_entry_replaced_by_tricky_values(tag):
    """Each entry of a full value, at every depth, removed or set to each tricky value."""
    encode, decode = CODECS[tag]
    stored = msgpack.unpackb(encode(FULL[tag]))
    assert decode("k", msgpack.packb(stored)) == FULL[tag]
    for path in _paths(stored):
        for replacement in [DELETE, *TRICKY]:
            mutated = copy.deepcopy(stored)
            parent = mutated
            for part in path[:-1]:
                parent = parent[part]
            if replacement is DELETE:
                del parent[path[-1]]
            else:
                parent[path[-1]] = replacement
            _rejects_or_is_valid(tag, msgpack.packb(mutated))


def test_core_vectors_are_shared_and_their_cache_is_bounded(monkeypatch):
    from cellstate.codec import resources as codec_resources

    first = resources_from_map({"cpu": 250, "memory": 512, "disk": 0})
    assert resources_from_map({"cpu": 250, "memory": 512, "disk": 0}) is first == Resources(250, 512)
    monkeypatch.setattr(codec_resources, "_INTERNED_MAX", 4)
    monkeypatch.setattr(codec_resources, "_INTERNED", {})
    for cpu in range(10):
        assert codec_resources.core_resources(cpu, 1, 1) == Resources(cpu, 1, 1)
        assert len(codec_resources._INTERNED) <= 4


@pytest.mark.parametrize("bad", ["a/b", 5, None, b"borg"], ids=["slash", "int", "none", "bytes"])
def test_a_job_naming_a_bad_scheduler_class_is_refused(bad):
    from dataclasses import replace as _replace

    from cellstate.codec.job import validate_job
    from cellstate.model import Job, JobKind
    from cellstate.resources import Resources

    job = _replace(Job("j", JobKind.BATCH, 1, Resources.of(1, 1)), scheduler=bad)
    with pytest.raises(CodecError, match="scheduler"):
        validate_job(job)


def _big_record(states: str):
    from cellstate.model import Job, JobKind, JobRecord
    from cellstate.resources import Resources

    job = Job("big", JobKind.BATCH, len(states), Resources.of(1, 1))
    return JobRecord(job, states, submitted_at=1.0)


@pytest.mark.parametrize("states", [
    "a" * 5000 + "p" * 995_000,                       # a million tasks being placed
    "p" * 4096,                                       # the smallest record stored deflated
    "r" * 2700 + "a" * 300 + "f" * 24 + "x" + "k" + "p" * 1070,
    "ar" * 2048,                                      # fragmented states deflate too
], ids=["million", "threshold", "every-state", "fragmented"])
def test_a_big_record_stores_its_task_states_deflated_and_decodes_back(states):
    import msgpack

    from cellstate.codec.job import decode_job_record, encode_job_record
    from cellstate.codec.job_fast import fast_record

    record = _big_record(states)
    raw = encode_job_record(record)
    stored = msgpack.unpackb(raw)
    assert "tasks" not in stored and type(stored["tasks_z"]) is bytes
    assert len(raw) < 200 + len(states) // 8  # bytes follow the states' entropy, not one per task
    assert decode_job_record("k", bytes(raw)) == record  # a fresh bytes object: no memo
    assert fast_record(stored) == record


def test_records_below_the_threshold_stay_plain():
    import msgpack

    from cellstate.codec.job import encode_job_record
    from cellstate.codec.job_fast import STATES_Z_MIN_TASKS

    assert STATES_Z_MIN_TASKS == 4096  # the figures in docs/CELLSTATE.md and BENCHMARKS.md

    states = "p" * (STATES_Z_MIN_TASKS - 1)
    assert msgpack.unpackb(encode_job_record(_big_record(states)))["tasks"] == states


@pytest.mark.parametrize("packed, problem", [
    (b"not zlib", "zlib"), (__import__("zlib").compress(b"p" * 4095), "4096 task states"),
    (__import__("zlib").compress(b"q" * 4096), "unknown task state"), (b"", "zlib"), ("text", "zlib"),
    (__import__("zlib").compress(b"p" * 4096) + b"x", "zlib"),
])
def test_bad_deflated_task_states_are_refused(packed, problem):
    import msgpack

    from cellstate.codec.job import decode_job_record, encode_job_record

    good = msgpack.unpackb(encode_job_record(_big_record("p" * 4096)))
    bad = dict(good, tasks_z=packed)
    with pytest.raises(CodecError, match=problem):
        decode_job_record("k", msgpack.packb(bad))
    both = dict(good, tasks="p" * 4096)
    with pytest.raises(CodecError, match="exactly one of tasks and tasks_z"):
        decode_job_record("k", msgpack.packb(both))
