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
written decodes; ``cellstate.codec.trusted`` gives the same bytes and errors for the
committer's ledgers and allocs, checking fields instead of decoding back. Resource maps
live in ``cellstate.codec.resources``, job specs and records in ``cellstate.codec.job``
(re-exported here), the envelope and the generic encoder in ``cellstate.codec.envelope``.
"""

from __future__ import annotations

import math

from cellstate.codec import fields as fc
from cellstate.codec.envelope import SCHEMA_VERSION, encode, encode_map, envelope, unpack
from cellstate.codec.fields import CodecError  # noqa: F401 (API)
from cellstate.codec.job import (  # noqa: F401 (API: the job half of the codec)
    RECORD_MEMO, decode_job, decode_job_record, encode_job, encode_job_record, job_from_map, job_to_map,
    validate_job,
)
from cellstate.codec.job_fast import MAX_TASKS  # noqa: F401 (API)
from cellstate.codec.memo import codec_memo
from cellstate.codec.resources import core_resources, encode_resources, resources_from_map  # noqa: F401 (API)
from cellstate.fastbuild import builder
from cellstate.model import Alloc, Machine, MachineState
from cellstate.resources import ZERO, Resources

_MACHINE_STATES = {s.value: s for s in MachineState}
_ATTRIBUTES = ("zone", "rack", "platform")
_MACHINE_FIELDS = frozenset(
    "v t id capacity zone rack platform packages labels state allocated tasks writer".split())
_ALLOC_FIELDS = frozenset("v t job task machine resources priority scheduler placed_at running".split())
# Decoded values are built without their dataclass __init__ (see cellstate.fastbuild).
_MACHINE, _ALLOC = builder(Machine), builder(Alloc)
# What recent bytes decode to, per type (cellstate.codec.memo): filled by decodes and trusted encodes
# once a MemoryStore woke them (dormant before: bytes from etcd are new objects and never hit).
MACHINE_MEMO, ALLOC_MEMO = codec_memo(), codec_memo()

# --------------------------------------------------------------------- machines


def _machine_map(m: Machine) -> dict:
    # Field by field, no getattr loop (every ledger a commit or a task end writes comes here).
    d = _machine_fixed_map(m)
    d.update(_machine_ledger_map(m))
    return d


def _machine_fixed_map(m: Machine) -> dict:
    """The leading entries of a machine's map: what a ledger write keeps (id to labels)."""
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
    return d


def _machine_ledger_map(m: Machine) -> dict:
    """The trailing entries of a machine's map: state, allocated, tasks, writer (each only
    when not its default)."""
    d = {}
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
    return encode(f"machine {getattr(m, 'id', '?')}", m, _machine_map, _machine_from_map)


def decode_machine(key: str, raw: bytes) -> Machine:
    """The Machine stored under ``key``; CodecError on any invalid content."""
    machine = MACHINE_MEMO.get(raw) if type(raw) is bytes else None
    if machine is None:
        machine = _machine_from_map(key, unpack(key, raw, "machine"))
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


# ----------------------------------------------------------------------- allocs


def _alloc_map(a: Alloc) -> dict:
    d = {"v": SCHEMA_VERSION, "t": "alloc", "job": a.job_id, "task": a.task_index, "machine": a.machine_id}
    d.update(_alloc_tail_map(a))
    return d


def _alloc_tail_map(a: Alloc) -> dict:
    """The entries of an alloc's map after its task and machine (the ones the claims of one
    commit share): resources, then priority, scheduler, placed_at, running unless default."""
    d = {"resources": encode_resources(a.resources)}
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
    return encode(label, a, _alloc_map, _alloc_from_map)


def decode_alloc(key: str, raw: bytes) -> Alloc:
    """The Alloc stored under ``key``; CodecError on any invalid content."""
    alloc = ALLOC_MEMO.get(raw) if type(raw) is bytes else None
    if alloc is None:
        alloc = _alloc_from_map(key, unpack(key, raw, "alloc"))
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


# ------------------------------------------------------- map forms (trace files)


def machine_to_map(m: Machine) -> dict:
    """The validated map form of a machine, exactly as ``encode_machine`` packs it."""
    return encode_map(f"machine {getattr(m, 'id', '?')}", m, _machine_map, _machine_from_map)


def machine_from_map(key: str, d) -> Machine:
    """The Machine whose map form (as ``machine_to_map`` gives it) is ``d``; CodecError if invalid."""
    return _machine_from_map(key, envelope(key, d, "machine"))
