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
    gpu_models    list of GPU model names the task may run on (a gpu_model "in" constraint)
    resources     map of further scalar resources, name -> integer >= 0
    priority      integer, default 0;   owner, package: strings
    constraints   list of {attribute, op (eq|in|not-in|exists), values}
    duration_s    seconds >= 0 (batch tasks); absent: runs until killed
    estimate_s    seconds >= 0: the run time asked for (a backfilling scheduler plans with it)
    gang, different_machine: booleans;  max_per_machine: integer >= 0
    scheduler     the scheduler class that serves it (e.g. "borg"); default: its kind's class

Every problem raises ``JobSpecError`` naming the file, the job (``job[2] 'web'``, index from
0) and the field. Unknown fields and duplicate ids within a file are rejected.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from fractions import Fraction
from pathlib import Path

from cellstate.codec.records import MAX_TASKS, validate_job
from cellstate.codec.fields import SHORT as _SHORT
from cellstate.codec.fields import CodecError
from cellstate.devices import MAX_DEVICES, MILLI, model_constraint
from cellstate.model import Constraint, ConstraintOp, Job, JobKind
from cellstate.resources import Resources

KNOWN_FIELDS = frozenset(
    "id kind tasks cpu memory disk gpu resources priority owner constraints duration_s gang "
    "package different_machine max_per_machine scheduler estimate_s gpu_milli gpu_models".split())
REQUIRED_FIELDS = ("id", "kind", "tasks", "cpu", "memory")
_CONSTRAINT_FIELDS = frozenset(("attribute", "op", "values"))
_UNITS = {"": Fraction(1), "Ki": Fraction(1, 1024), "Mi": Fraction(1), "Gi": Fraction(1024),
          "Ti": Fraction(1024 ** 2)}
_QUANTITY = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(Ki|Mi|Gi|Ti)?\s*$")
_RESERVED_RESOURCES = frozenset(("cpu", "memory", "disk", "gpu"))
# Every integer of a job is stored as a msgpack int: signed 64 bits. Resources are integers too
# (millicores, MiB, counts), so cpu is bounded by what its millicores can hold.
INT64_MIN, INT64_MAX = -2 ** 63, 2 ** 63 - 1
MAX_CORES = INT64_MAX // 1000


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


def _build_job(d) -> Job:
    if not isinstance(d, dict):
        raise FieldError("", f"must be a table/object of fields, got {_show(d)}")
    unknown = sorted(str(k) for k in d if k not in KNOWN_FIELDS)
    if unknown:
        raise FieldError(unknown[0], f"unknown field (known: {', '.join(sorted(KNOWN_FIELDS))})")
    for name in REQUIRED_FIELDS:
        if name not in d:
            raise FieldError(name, "missing required field")
    return Job(
        id=_ident(d["id"]),
        kind=_kind(d["kind"]),
        tasks=_integer("tasks", d["tasks"], 1, MAX_TASKS),
        request=_request(d),
        priority=_integer("priority", d.get("priority", 0), None),
        owner=_text("owner", d.get("owner", "")),
        constraints=_constraints(d.get("constraints", [])) + _gpu_models(d.get("gpu_models")),
        duration_s=_duration(d.get("duration_s")),
        gang=_flag("gang", d.get("gang", False)),
        package=_text("package", d.get("package", "")),
        different_machine=_flag("different_machine", d.get("different_machine", False)),
        max_per_machine=_integer("max_per_machine", d.get("max_per_machine", 0), 0),
        scheduler=_scheduler(d.get("scheduler", "")),
        estimate_s=_duration(d.get("estimate_s"), "estimate_s"),
    )


def _scheduler(x) -> str:
    """The scheduler class that serves the job: empty (its kind's class) or a name without "/"."""
    if not isinstance(x, str) or "/" in x or len(x) > 253:
        raise FieldError("scheduler", f'must be a scheduler class name (a string without "/"), got {_show(x)}')
    return x


def _request(d: dict) -> Resources:
    cpu = _number("cpu", d["cpu"])
    if cpu <= 0:
        raise FieldError("cpu", f"must be > 0, got {_show(d['cpu'])}")
    if cpu > MAX_CORES:
        raise FieldError("cpu", f"must be at most {MAX_CORES} cores (its millicores are a 64-bit integer), "
                                f"got {_show(d['cpu'])}")
    millicores = round(cpu * 1000)
    if millicores < 1:
        raise FieldError("cpu", f"must be at least 0.001 cores, got {_show(d['cpu'])}")
    memory = mebibytes("memory", d["memory"])
    if memory <= 0:
        raise FieldError("memory", f"must be > 0, got {_show(d['memory'])}")
    extra = dict(_extra_resources(d.get("resources", {})))
    extra["gpu"] = _gpu(d)
    return Resources.of(millicores, memory, mebibytes("disk", d.get("disk", 0)), **extra)


def _gpu(d: dict) -> int:
    """The request's ``gpu`` amount in milli (cellstate.devices): ``gpu`` whole GPUs, or a
    ``gpu_milli`` share of one."""
    count = _integer("gpu", d.get("gpu", 0), 0, MAX_DEVICES)
    if "gpu_milli" not in d:
        return count * MILLI
    milli = _integer("gpu_milli", d["gpu_milli"], 1, MILLI)
    if "gpu" in d and count != 1:
        raise FieldError("gpu_milli", f"a share of a GPU is for gpu = 1 (or gpu absent), got gpu = {count}")
    return milli


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


def _constraints(x) -> tuple[Constraint, ...]:
    if not isinstance(x, list):
        raise FieldError("constraints", f"must be a list, got {_show(x)}")
    return tuple(_constraint(f"constraints[{i}]", c) for i, c in enumerate(x))


def _constraint(field: str, c) -> Constraint:
    if not isinstance(c, dict):
        raise FieldError(field, f"must be a table {{attribute, op, values}}, got {_show(c)}")
    unknown = sorted(str(k) for k in c if k not in _CONSTRAINT_FIELDS)
    if unknown:
        raise FieldError(f"{field}.{unknown[0]}", "unknown field (known: attribute, op, values)")
    attribute = _text(f"{field}.attribute", c.get("attribute", ""))
    if not attribute:
        raise FieldError(f"{field}.attribute", "missing or empty attribute name")
    ops = {o.value: o for o in ConstraintOp}
    op = ops.get(c.get("op")) if isinstance(c.get("op"), str) else None
    if op is None:
        raise FieldError(f"{field}.op", f"must be one of {', '.join(ops)}, got {_show(c.get('op'))}")
    values = c.get("values", [])
    if isinstance(values, str):
        values = [values]
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise FieldError(f"{field}.values", f"must be a list of strings, got {_show(values)}")
    return Constraint(attribute, op, tuple(values))


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


def _kind(x) -> JobKind:
    kinds = {k.value: k for k in JobKind}
    if not isinstance(x, str) or x not in kinds:
        raise FieldError("kind", f"must be one of {', '.join(kinds)}, got {_show(x)}")
    return kinds[x]


def _integer(field: str, x, low: int | None, high: int | None = None) -> int:
    """An int (not a bool) in [low, high], and always a signed 64-bit one (what msgpack holds)."""
    if type(x) is not int:
        raise FieldError(field, f"must be an integer, got {_show(x)}")
    if low is not None and x < low:
        raise FieldError(field, f"must be >= {low}, got {_show(x)}")
    if high is not None and x > high:
        raise FieldError(field, f"must be <= {high}, got {_show(x)}")
    if x > INT64_MAX:
        raise FieldError(field, f"must be at most {INT64_MAX} (a 64-bit integer), got {_show(x)}")
    if x < INT64_MIN:
        raise FieldError(field, f"must be at least {INT64_MIN} (a 64-bit integer), got {_show(x)}")
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


def _text(field: str, x) -> str:
    if not isinstance(x, str):
        raise FieldError(field, f"must be a string, got {_show(x)}")
    return x


def _flag(field: str, x) -> bool:
    if type(x) is not bool:
        raise FieldError(field, f"must be true or false, got {_show(x)}")
    return x


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
