"""Ground truth a trace carries (format version 3, docs/TRACE_FORMAT.md): what the real cell did
with the workload, so a replay can be checked against it (``tools.fauxmaster.fidelity``).

``GroundTruth``:

- ``unit``: ``"task"`` (a delay per task of each job: Google-2011) or ``"job"`` (one delay per
  job, all its tasks placed together: SWF gangs);
- ``horizon``: the last trace time the truth covers (the recorded window's end): a task not
  scheduled by then is "never" (censored by the window);
- ``submitted``: job id → its submission time (trace seconds; only jobs submitted at t > 0, in
  the window, with a known outcome);
- ``delays``: job id → one entry per task (``unit="task"``) or one entry (``unit="job"``): seconds
  from submission to the real cell's scheduling of it, or ``None`` when the real cell did not
  schedule it by ``horizon``;
- ``occupancy``: the real cell's allocation over time (``Occupancy``: sums of the requests of the
  tasks it ran, sampled), or None when the source does not say;
- ``notes``: how it was derived, in words;
- ``windows``: the imported parts' spans, one ``Window`` per part in time order (``[]``: the
  trace was not made of parts, or was written before parts were recorded: one window, the whole);
- ``occupancy_lower_bound``: the trace opens after its source's start (a later part imported
  alone): tasks that ran throughout without a row in the rows read cannot be seen, so the
  occupancy is a lower bound of the real cell's.

Both last fields are optional in the record (older version 3 files read with their defaults).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cellstate.codec import fields as fc
from cellstate.codec.fields import CodecError

UNITS = ("task", "job")
_FIELDS = frozenset(("type", "unit", "horizon", "submitted", "delays", "occupancy", "notes"))
_OPTIONAL_FIELDS = frozenset(("windows", "occupancy_lower_bound"))
_WINDOW_FIELDS = frozenset(("part", "start", "end"))
_OCCUPANCY_FIELDS = frozenset(("t", "cpu", "memory", "tasks", "capacity_cpu", "capacity_memory"))


@dataclass(frozen=True)
class Occupancy:
    """The real cell's allocation sampled at times ``t`` (ascending): cpu millicores and memory MiB
    requested by its running tasks, the tasks running, and the capacity the allocation is set
    against (the trace's machines under its capacity model)."""

    t: list[float]
    cpu: list[int]
    memory: list[int]
    tasks: list[int]
    capacity_cpu: int
    capacity_memory: int

    def fractions(self) -> tuple[list[float], list[float]]:
        """cpu and memory occupancy as fractions of the capacity (may exceed 1: overcommit)."""
        c, m = self.capacity_cpu, self.capacity_memory
        return ([x / c if c else 0.0 for x in self.cpu], [x / m if m else 0.0 for x in self.memory])


@dataclass(frozen=True)
class Window:
    """One imported part's span of trace time: ``part`` (its number in the source, e.g. 1 for
    ``part-00001-of-00500``), ``start`` and ``end`` seconds (the first window starts at 0)."""

    part: int
    start: float
    end: float


@dataclass(frozen=True)
class GroundTruth:
    unit: str
    horizon: float
    submitted: dict[str, float]
    delays: dict[str, list[float | None]]
    occupancy: Occupancy | None = None
    notes: str = ""
    windows: tuple[Window, ...] = ()
    occupancy_lower_bound: bool = False

    def __post_init__(self):
        if self.unit not in UNITS:
            raise ValueError(f"ground truth unit must be one of {UNITS}, got {self.unit!r}")
        if set(self.submitted) != set(self.delays):
            raise ValueError("ground truth: submitted and delays must name the same jobs")
        last = 0.0
        for w in self.windows:
            if not last <= w.start <= w.end:
                raise ValueError(f"ground truth: window of part {w.part} ({w.start}..{w.end} s) is not after "
                                 f"the previous one's end ({last} s)")
            last = w.end

    def tasks(self) -> int:
        return sum(map(len, self.delays.values()))


def truth_record(truth: GroundTruth) -> dict:
    occ = truth.occupancy
    return {"type": "truth", "unit": truth.unit, "horizon": float(truth.horizon),
            "submitted": {k: float(v) for k, v in truth.submitted.items()},
            "delays": {k: [None if d is None else float(d) for d in v] for k, v in truth.delays.items()},
            "occupancy": None if occ is None else {
                "t": [float(x) for x in occ.t], "cpu": list(occ.cpu), "memory": list(occ.memory),
                "tasks": list(occ.tasks), "capacity_cpu": occ.capacity_cpu, "capacity_memory": occ.capacity_memory},
            "notes": truth.notes,
            "windows": [{"part": w.part, "start": float(w.start), "end": float(w.end)} for w in truth.windows],
            "occupancy_lower_bound": truth.occupancy_lower_bound}


def _seconds(key: str, name: str, value) -> float:
    if type(value) is not float or not 0.0 <= value < math.inf:
        return fc.seconds(key, name, value)
    return value


def truth_from_record(key: str, d) -> GroundTruth:
    """The ground truth of a truth record map; CodecError naming the field if invalid."""
    fc.mapping(key, "", d)
    if d.get("type") != "truth":
        raise fc.expected(key, "type", "'truth' (the header announces ground truth)", d.get("type"))
    fc.require(key, "", d, tuple(sorted(_FIELDS - {"type"})))
    fc.no_unknown(key, "", d, _FIELDS | _OPTIONAL_FIELDS)
    unit = fc.member(key, "unit", d["unit"], {u: u for u in UNITS})
    horizon = _seconds(key, "horizon", d["horizon"])
    submitted, delays = d["submitted"], d["delays"]
    fc.mapping(key, "submitted", submitted)
    fc.mapping(key, "delays", delays)
    if len(submitted) != len(delays) or not all(k in submitted for k in delays):
        raise CodecError(key, "delays", "must name exactly the jobs of 'submitted'")
    for job, t in submitted.items():
        if type(job) is not str or not job or "/" in job:
            fc.ident(key, "submitted", job)
        if type(t) is not float or not 0.0 <= t < math.inf:
            _seconds(key, f"submitted.{job}", t)
        entries = delays[job]
        if type(entries) is not list or not entries or (unit == "job" and len(entries) != 1):
            raise CodecError(key, f"delays.{job}", "expected a non-empty list (one entry per job for unit 'job')")
        for x in entries:
            if x is not None and (type(x) is not float or not 0.0 <= x < math.inf):
                raise CodecError(key, f"delays.{job}", f"expected seconds >= 0 or nil, got {x!r}")
    occupancy = None
    if d["occupancy"] is not None:
        o = d["occupancy"]
        fc.mapping(key, "occupancy", o)
        fc.require(key, "occupancy.", o, tuple(sorted(_OCCUPANCY_FIELDS)))
        fc.no_unknown(key, "occupancy.", o, _OCCUPANCY_FIELDS)
        series = [o[name] for name in ("t", "cpu", "memory", "tasks")]
        if not all(type(s) is list for s in series) or len({len(s) for s in series}) != 1:
            raise CodecError(key, "occupancy", "t, cpu, memory and tasks must be lists of one length")
        last = 0.0
        for t in o["t"]:
            _seconds(key, "occupancy.t", t)
            if t < last:
                raise CodecError(key, "occupancy.t", "times must be ascending")
            last = t
        for name in ("cpu", "memory", "tasks"):
            if not all(type(x) is int and x >= 0 for x in o[name]):
                raise CodecError(key, f"occupancy.{name}", "expected integers >= 0")
        for name in ("capacity_cpu", "capacity_memory"):
            fc.integer(key, f"occupancy.{name}", o[name])
        occupancy = Occupancy(o["t"], o["cpu"], o["memory"], o["tasks"], o["capacity_cpu"], o["capacity_memory"])
    windows = _windows(key, d.get("windows", []))
    lower = d.get("occupancy_lower_bound", False)
    if type(lower) is not bool:
        raise fc.expected(key, "occupancy_lower_bound", "true or false", lower)
    try:
        return GroundTruth(unit, horizon, submitted, delays, occupancy, fc.text(key, "notes", d["notes"]),
                           windows, lower)
    except ValueError as exc:
        raise CodecError(key, "windows", str(exc).removeprefix("ground truth: ")) from None


def _windows(key: str, value) -> tuple[Window, ...]:
    if type(value) is not list:
        raise fc.expected(key, "windows", "a list of {part, start, end} maps", value)
    out = []
    for i, w in enumerate(value):
        fc.mapping(key, f"windows.{i}", w)
        fc.require(key, f"windows.{i}.", w, tuple(sorted(_WINDOW_FIELDS)))
        fc.no_unknown(key, f"windows.{i}.", w, _WINDOW_FIELDS)
        if type(w["part"]) is not int or w["part"] < 0:
            raise fc.expected(key, f"windows.{i}.part", "a part number >= 0", w["part"])
        out.append(Window(w["part"], _seconds(key, f"windows.{i}.start", w["start"]),
                          _seconds(key, f"windows.{i}.end", w["end"])))
    return tuple(out)


def sample_steps(start: float, end: float, changes: list[tuple[float, int, int, int]], initial=(0, 0, 0),
                 max_points: int = 1000, min_step: float = 60.0) -> tuple[list[float], list[list[int]]]:
    """Sample a step function: ``changes`` = (t, d_cpu, d_memory, d_tasks) in time order applied
    to ``initial``; samples every ``max(min_step, (end - start) / max_points)`` s from ``start``
    to ``end`` (inclusive), each the value after every change at or before its time."""
    step = max(min_step, (end - start) / max_points) if end > start else min_step
    times, values = [], [[], [], []]
    cur = list(initial)
    i, n = 0, len(changes)
    k = 0
    while True:
        t = start + k * step
        if t > end:
            t = end
        while i < n and changes[i][0] <= t:
            _, a, b, c = changes[i]
            cur[0] += a
            cur[1] += b
            cur[2] += c
            i += 1
        times.append(t)
        for v, x in zip(values, cur):
            v.append(x)
        if t >= end:
            break
        k += 1
    return times, values
