"""Job spec files: jobs written by people (TOML or JSON), validated before anything is stored.

A file holds one job (its fields at the top level), a list of jobs (``[[job]]`` tables in
TOML; ``{"job": [...]}`` or a bare list in JSON). Fields of a job:

    id            required: 1..253 characters of A-Z a-z 0-9 . _ - (job_id_problem)
    kind          required, "batch" or "service"
    tasks         required, integer 1..MAX_TASKS
    cpu           required, cores (> 0, int or float) -> stored as integer millicores
    memory        required, MiB (> 0) as a number or a string with a unit ("512Mi", "2Gi", "1Ti")
    disk          MiB like memory (>= 0), default 0
    gpu           whole GPUs, integer >= 0, default 0 (with gpu_milli: 1, or absent)
    gpu_milli     a share of one GPU, 1..1000 milli (the task gets that much of one device)
    gpu_models    list of GPU model names the task may run on (a gpu_model "in" constraint);
                  only with a GPU ask (gpu or gpu_milli)
    resources     map of further scalar resources, name -> integer >= 0
    priority      integer, default 0;   owner, package: strings
    constraints   list of {attribute, op (eq|in|not-in|exists), values}
    duration_s    seconds >= 0 (batch tasks); absent: runs until killed
    estimate_s    seconds >= 0: the run time asked for (a backfilling scheduler plans with it)
    gang, different_machine: booleans;  max_per_machine: integer >= 0
    scheduler     the scheduler class that serves it (e.g. "borg"); default: its kind's class

Every problem raises ``JobSpecError`` naming the file, the job (``job[2] 'web'``, index from
0) and the field. Unknown fields and duplicate ids within a file are rejected. Types and
bounds are declared on ``_JobSpec`` and checked by msgspec, whose errors are put in this
module's words (``_field_error``); units, finite numbers, names and cross-field rules are checked here.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from fractions import Fraction
from pathlib import Path
from typing import Annotated

import msgspec

from cellstate.codec.records import MAX_TASKS, validate_job
from cellstate.codec.fields import SHORT as _SHORT
from cellstate.codec.fields import CodecError
from cellstate.devices import MAX_DEVICES, MILLI, model_constraint
from cellstate.model import Constraint, ConstraintOp, Job, JobKind
from cellstate.resources import Resources

_CONSTRAINT_FIELDS = ("attribute", "op", "values")
_UNITS = {"": Fraction(1), "Ki": Fraction(1, 1024), "Mi": Fraction(1), "Gi": Fraction(1024),
          "Ti": Fraction(1024 ** 2)}
_QUANTITY = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(Ki|Mi|Gi|Ti)?\s*$")
_RESERVED_RESOURCES = frozenset(("cpu", "memory", "disk", "gpu"))
# Every integer of a job is stored as a msgpack int: signed 64 bits. Resources are integers too
# (millicores, MiB, counts), so cpu is bounded by what its millicores can hold.
INT64_MIN, INT64_MAX = -2 ** 63, 2 ** 63 - 1
MAX_CORES = INT64_MAX // 1000
_Int64 = Annotated[int, msgspec.Meta(ge=INT64_MIN, le=INT64_MAX)]
_UNSET = msgspec.UNSET  # a field left out (null is a wrong value, not an absent one)


class JobSpecError(ValueError):
    """An invalid job spec file: names the file, the job and the field."""

    def __init__(self, source: str, job: str, field: str, message: str):
        self.source, self.job, self.field, self.message = source, job, field, message
        parts = [source] + ([job] if job else []) + ([f"field {field!r}"] if field else [])
        super().__init__(": ".join(parts) + ": " + message)


class FieldError(ValueError):
    """A bad value of one field (before the file and job are known)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field, self.message = field, message


# ------------------------------------------------------------------------------- files


def load_jobs(path: str | Path) -> list[Job]:
    """The jobs of a ``.toml`` or ``.json`` file, all validated; JobSpecError otherwise."""
    path = Path(path)
    source = str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise JobSpecError(source, "", "", f"cannot read: {exc.strerror}") from None
    return parse_jobs(_decode_document(raw, path.suffix.lower(), source), source)


def _decode_document(raw: bytes, suffix: str, source: str):
    try:
        text = raw.decode("utf-8")
        if suffix == ".toml":
            return tomllib.loads(text)
        if suffix == ".json":
            return json.loads(text)
    except RecursionError:
        raise JobSpecError(source, "", "", f"not valid {suffix[1:].upper()}: nested too deeply") from None
    except ValueError as exc:  # UnicodeDecodeError, TOMLDecodeError, JSONDecodeError, an int of > 4300 digits
        raise JobSpecError(source, "", "", f"not valid {suffix[1:].upper()}: {exc}") from None
    raise JobSpecError(source, "", "", f"unknown file type {suffix or '(none)'!r}; expected .toml or .json")


def parse_jobs(document, source: str = "<jobs>") -> list[Job]:
    """The jobs of a decoded document (one job mapping, ``{"job": [...]}`` or a list)."""
    entries = _job_entries(document, source)
    if not entries:
        raise JobSpecError(source, "", "", "holds no jobs")
    jobs: list[Job] = []
    seen: dict[str, int] = {}
    for index, entry in enumerate(entries):
        job = job_from_mapping(entry, source, index)
        if job.id in seen:
            raise JobSpecError(source, _label(index, job.id), "id",
                               f"duplicate id (also job[{seen[job.id]}])")
        seen[job.id] = index
        jobs.append(job)
    return jobs


def _job_entries(document, source: str) -> list:
    if isinstance(document, list):
        return document
    if isinstance(document, dict):
        if "job" in document:
            if set(document) != {"job"}:
                extra = sorted(k for k in document if k != "job")
                raise JobSpecError(source, "", extra[0], "unknown top-level field beside the job list")
            jobs = document["job"]
            if not isinstance(jobs, list):
                raise JobSpecError(source, "", "job", f"must be a list of jobs, got {_show(jobs)}")
            return jobs
        return [document]
    raise JobSpecError(source, "", "", f"must hold a job or a list of jobs, got {_show(document)}")


def dump_jobs(jobs, path: str | Path) -> None:
    """Write jobs as a JSON job file that ``load_jobs`` reads back equal."""
    Path(path).write_text(json.dumps({"job": [job_to_mapping(j) for j in jobs]}, indent=1) + "\n")


def job_to_mapping(job: Job) -> dict:
    """The spec-file form of a job (cpu in cores, memory/disk in MiB); defaults left out."""
    d: dict = {"id": job.id, "kind": str(job.kind), "tasks": job.tasks,
               "cpu": job.request.cpu / 1000, "memory": job.request.memory}
    if job.request.disk:
        d["disk"] = job.request.disk
    extra = dict(job.request.extra)
    if "gpu" in extra:
        milli = extra.pop("gpu")
        if milli % MILLI:
            d["gpu_milli"] = milli
        else:
            d["gpu"] = milli // MILLI
    if extra:
        d["resources"] = extra
    for name, default in (("priority", 0), ("owner", ""), ("duration_s", None), ("gang", False),
                          ("package", ""), ("different_machine", False), ("max_per_machine", 0),
                          ("scheduler", ""), ("estimate_s", None)):
        if getattr(job, name) != default:
            d[name] = getattr(job, name)
    if job.constraints:
        d["constraints"] = [{"attribute": c.attribute, "op": str(c.op), "values": list(c.values)}
                            for c in job.constraints]
    return d


# -------------------------------------------------------------------------------- jobs


def job_from_mapping(entry, source: str = "<jobs>", index: int = 0) -> Job:
    """One validated Job from its spec mapping; JobSpecError naming job and field otherwise."""
    label = _label(index, entry.get("id") if isinstance(entry, dict) else None)
    try:
        job = _build_job(entry)
        validate_job(job)
    except FieldError as exc:
        raise JobSpecError(source, label, exc.field, exc.message) from None
    except CodecError as exc:  # backstop: whatever the codec would refuse to store
        raise JobSpecError(source, label, _spec_field(exc.field), exc.message) from None
    return job


def _label(index: int, job_id) -> str:
    """``job[2] 'web'``: the job's index and its id, escaped and cut to 60 characters."""
    if not isinstance(job_id, str) or not job_id:
        return f"job[{index}]"
    shown = repr(job_id[:61])
    return f"job[{index}] {shown if len(job_id) <= 60 else shown[:58] + '...' + shown[-1]}"


def _spec_field(codec_field: str) -> str:
    return codec_field.removeprefix("request.")


class _ConstraintSpec(msgspec.Struct, forbid_unknown_fields=True):
    attribute: str = ""
    op: ConstraintOp | msgspec.UnsetType = _UNSET
    values: object = ()  # a string or a list of them (_constraint)


class _JobSpec(msgspec.Struct, forbid_unknown_fields=True):
    """The fields of a job spec, their types and bounds (msgspec checks them); an ``object``
    field takes more than one form and is checked by hand (units, finite numbers, names)."""

    id: object
    kind: JobKind
    tasks: Annotated[int, msgspec.Meta(ge=1, le=MAX_TASKS)]
    cpu: object
    memory: object
    disk: object = 0
    gpu: Annotated[int, msgspec.Meta(ge=0, le=MAX_DEVICES)] | msgspec.UnsetType = _UNSET
    gpu_milli: Annotated[int, msgspec.Meta(ge=1, le=MILLI)] | msgspec.UnsetType = _UNSET
    gpu_models: object = None
    resources: dict = {}
    priority: _Int64 = 0
    owner: str = ""
    constraints: list[_ConstraintSpec] = []
    duration_s: object = None
    estimate_s: object = None
    gang: bool = False
    package: str = ""
    different_machine: bool = False
    max_per_machine: Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)] = 0
    scheduler: str = ""


KNOWN_FIELDS = frozenset(_JobSpec.__struct_fields__)
_EXPECTED = {"int": "must be an integer", "str": "must be a string", "bool": "must be true or false",
             "array": "must be a list", "object": "must be a table/object of fields"}
_EXPECTED_AT = {"kind": f"must be one of {', '.join(JobKind)}", "resources": "must be a map of name -> amount",
                "constraints[]": "must be a table {attribute, op, values}",
                "constraints[].op": f"must be one of {', '.join(ConstraintOp)}"}
_VALIDATION = re.compile(r"^(?:Expected `(?P<type>[^`]+)`(?:, got `[^`]+`| (?P<bound>[<>]= -?\d+))"
                         r"|Object contains unknown field `(?P<unknown>[^`]+)`"
                         r"|Object missing required field `(?P<missing>[^`]+)`"
                         r"|Invalid enum value (?P<enum>.+?))(?: - at `\$(?P<path>[^`]*)`)?$")


def _build_job(d) -> Job:
    if not isinstance(d, dict):
        raise FieldError("", f"must be a table/object of fields, got {_show(d)}")
    try:
        spec = msgspec.convert(d, _JobSpec, strict=True)
    except msgspec.ValidationError as exc:
        raise _field_error(str(exc), d) from None
    request = _request(spec)
    if spec.gpu_models is not None and not request.get("gpu"):
        raise FieldError("gpu_models", "are the GPU models of a task that asks for a GPU (gpu or gpu_milli), and "
                                       "this one asks none; to keep a CPU task on machines of those models use "
                                       'constraints = [{ attribute = "gpu_model", op = "in", values = [...] }]')
    return Job(
        id=_ident(spec.id), kind=spec.kind, tasks=spec.tasks, request=request,
        priority=spec.priority, owner=spec.owner,
        constraints=tuple(_constraint(f"constraints[{i}]", c) for i, c in enumerate(spec.constraints))
        + _gpu_models(spec.gpu_models),
        duration_s=_duration(spec.duration_s), gang=spec.gang, package=spec.package,
        different_machine=spec.different_machine, max_per_machine=spec.max_per_machine,
        scheduler=_scheduler(spec.scheduler), estimate_s=_duration(spec.estimate_s, "estimate_s"),
    )


def _field_error(message: str, d: dict) -> FieldError:
    """The FieldError for msgspec's ValidationError ``message`` on the spec mapping ``d``: the
    field by its path, the message in this module's words (msgspec's own for any other)."""
    match = _VALIDATION.match(message)
    if match is None:
        return FieldError("", message)
    path = (match["path"] or "").lstrip(".")
    if match["unknown"]:
        known = _CONSTRAINT_FIELDS if path else sorted(KNOWN_FIELDS)
        return FieldError(".".join(filter(None, (path, match["unknown"]))), f"unknown field (known: {', '.join(known)})")
    if match["missing"]:
        return FieldError(".".join(filter(None, (path, match["missing"]))), "missing required field")
    if match["bound"]:
        limit = {f"<= {INT64_MAX}": f"at most {INT64_MAX}", f">= {INT64_MIN}": f"at least {INT64_MIN}"}.get(match["bound"])
        expected = f"must be {limit} (a 64-bit integer)" if limit else f"must be {match['bound']}"
    else:
        expected = _EXPECTED_AT.get(re.sub(r"\[\d+\]", "[]", path)) or _EXPECTED.get(match["type"], f"must be {match['type']}")
    return FieldError(path, f"{expected}, got {_show(_at(d, path))}")


def _at(d, path: str):
    """The value at a msgspec path (``constraints[0].op``) of ``d``; None when absent."""
    for part in re.findall(r"\w+|\[\d+\]", path):
        try:
            d = d[int(part[1:-1])] if part.startswith("[") else d.get(part)
        except (AttributeError, IndexError, TypeError):
            return None
    return d


def _scheduler(x) -> str:
    """The scheduler class that serves the job: empty (its kind's class) or a name without "/"."""
    if not isinstance(x, str) or "/" in x or len(x) > 253:
        raise FieldError("scheduler", f'must be a scheduler class name (a string without "/"), got {_show(x)}')
    return x


def _request(spec: _JobSpec) -> Resources:
    cpu = _number("cpu", spec.cpu)
    if cpu <= 0:
        raise FieldError("cpu", f"must be > 0, got {_show(spec.cpu)}")
    if cpu > MAX_CORES:
        raise FieldError("cpu", f"must be at most {MAX_CORES} cores (its millicores are a 64-bit integer), "
                                f"got {_show(spec.cpu)}")
    millicores = round(cpu * 1000)
    if millicores < 1:
        raise FieldError("cpu", f"must be at least 0.001 cores, got {_show(spec.cpu)}")
    memory = mebibytes("memory", spec.memory)
    if memory <= 0:
        raise FieldError("memory", f"must be > 0, got {_show(spec.memory)}")
    extra = dict(_extra_resources(spec.resources))
    extra["gpu"] = _gpu(spec)
    return Resources.of(millicores, memory, mebibytes("disk", spec.disk), **extra)


def _gpu(spec: _JobSpec) -> int:
    """The request's ``gpu`` amount in milli (cellstate.devices): ``gpu`` whole GPUs, or a
    ``gpu_milli`` share of one (for gpu = 1 or gpu absent)."""
    if spec.gpu_milli is _UNSET:
        return (spec.gpu or 0) * MILLI
    if spec.gpu not in (_UNSET, 1):
        raise FieldError("gpu_milli", f"a share of a GPU is for gpu = 1 (or gpu absent), got gpu = {spec.gpu}")
    return spec.gpu_milli


def _gpu_models(x) -> tuple[Constraint, ...]:
    if x is None:
        return ()
    if isinstance(x, str):
        x = [x]
    if not isinstance(x, list) or not x or not all(isinstance(m, str) and m for m in x):
        raise FieldError("gpu_models", f"must be a non-empty list of GPU model names, got {_show(x)}")
    return (model_constraint(dict.fromkeys(x)),)


def mebibytes(field: str, value) -> int:
    """A size in whole MiB from a number (MiB) or a string with a binary unit (Ki/Mi/Gi/Ti),
    computed exactly; at most INT64_MAX MiB."""
    if isinstance(value, str):
        match = _QUANTITY.match(value)
        if not match:
            raise FieldError(field, f'must be MiB or a size like "512Mi" or "2Gi", got {_show(value)}')
        try:
            amount = Fraction(match.group(1)) * _UNITS[match.group(2) or ""]
        except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits)
            raise FieldError(field, f"has too many digits, got {_show(value)}") from None
    else:
        amount = Fraction(_number(field, value))
    if amount < 0:
        raise FieldError(field, f"must be >= 0, got {_show(value)}")
    if amount > INT64_MAX:
        raise FieldError(field, f"must be at most {INT64_MAX} MiB (a 64-bit integer), got {_show(value)}")
    if amount.denominator != 1:
        raise FieldError(field, f"must be a whole number of MiB, got {_show(value)} ({float(amount):g} MiB)")
    return int(amount)


def _extra_resources(m) -> list[tuple[str, int]]:
    if not isinstance(m, dict):
        raise FieldError("resources", f"must be a map of name -> amount, got {_show(m)}")
    out = []
    for name, amount in m.items():
        if not name or name in _RESERVED_RESOURCES or name.startswith("gpu."):
            raise FieldError("resources", f"resource name {name!r} is not allowed here "
                              "(cpu, memory, disk and gpu have their own fields; devices are bound at placement)")
        out.append((name, _integer(f"resources.{name}", amount, 0)))
    return out


def _constraint(field: str, c: _ConstraintSpec) -> Constraint:
    if not c.attribute:
        raise FieldError(f"{field}.attribute", "missing or empty attribute name")
    if c.op is _UNSET:
        raise FieldError(f"{field}.op", f"must be one of {', '.join(ConstraintOp)}, got null")
    values = [c.values] if isinstance(c.values, str) else c.values
    if not isinstance(values, (list, tuple)) or not all(isinstance(v, str) for v in values):
        raise FieldError(f"{field}.values", f"must be a list of strings, got {_show(c.values)}")
    return Constraint(c.attribute, c.op, tuple(values))


# ----------------------------------------------------------------------- field checks


def _ident(x) -> str:
    problem = job_id_problem(x)
    if problem:
        raise FieldError("id", f"{problem}, got {_show(x)}")
    return x


# Job ids people submit: a safe character set (no "/", which separates keys, and nothing a
# terminal interprets: a newline would forge a `job list` row, ESC clear the screen), at most
# as long as a Kubernetes object name.
MAX_ID_LENGTH = 253
_SAFE_ID = re.compile(r"[A-Za-z0-9._-]+")


def job_id_problem(x) -> str | None:
    """Why ``x`` is not a job id people may submit (None: it is one): a non-empty string of at
    most MAX_ID_LENGTH characters from ``A-Z a-z 0-9 . _ -``."""
    if not isinstance(x, str) or not x:
        return "must be a non-empty string"
    if len(x) > MAX_ID_LENGTH:
        return f"must be at most {MAX_ID_LENGTH} characters (it has {len(x)})"
    if not _SAFE_ID.fullmatch(x):
        bad = next(c for c in x if not _SAFE_ID.fullmatch(c))
        return f"may hold only letters, digits, '.', '_' and '-' (found {ascii(bad)})"
    return None


def _integer(field: str, x, low: int) -> int:
    """An int (not a bool) >= low, and a signed 64-bit one (what msgpack holds)."""
    if type(x) is not int:
        raise FieldError(field, f"must be an integer, got {_show(x)}")
    if x < low:
        raise FieldError(field, f"must be >= {low}, got {_show(x)}")
    if x > INT64_MAX:
        raise FieldError(field, f"must be at most {INT64_MAX} (a 64-bit integer), got {_show(x)}")
    return x


def _number(field: str, x) -> int | float:
    """An int (any size: callers bound it) or a finite float."""
    if type(x) is int or (type(x) is float and math.isfinite(x)):
        return x
    raise FieldError(field, f"must be a finite number, got {_show(x)}")


def _duration(x, field: str = "duration_s") -> float | None:
    if x is None:
        return None
    if _number(field, x) < 0:
        raise FieldError(field, f"must be >= 0, got {_show(x)}")
    try:
        return float(x)
    except OverflowError:  # an int beyond any float
        raise FieldError(field, f"must be a finite number, got {_show(x)}") from None


def _show(x) -> str:
    """``x`` for a message: short, whatever it is (an int too long to print, deep nesting)."""
    if type(x) is int and x.bit_length() > 128:
        return f"an integer of {x.bit_length()} bits"
    if isinstance(x, str) and len(x) > 60:
        x = x[:70]  # before json.dumps: a string may be megabytes long
    try:
        text = json.dumps(x) if isinstance(x, (int, float, str, bool, type(None))) else _SHORT.repr(x)
    except (RecursionError, ValueError):
        text = f"a {type(x).__name__}"
    return text if len(text) <= 60 else text[:57] + "..."
