"""Sweep specs: a TOML file naming traces, a grid of replay settings and seeds, expanded into runs.

```toml
[sweep]
traces = ["../../tests/data/traces/sweep/tiny-a.omt.gz"]   # relative to the spec file
seeds = [0, 1]

[grid]          # each key one value or a list of values; the runs are every combination
schedulers = ["batch:batch,service:service", [{name = "b", kind = "borg"}]]
t_job = [0.1, 1.0]
```

A ``[[sweep.synthetic]]`` table (``tools.fauxmaster.experiments.synthetic.SyntheticSpec``'s
``machines``, ``cores``, ``memory_gib``, ``duration_s``, ``seed``, ``service_lifetime_s``) adds a
seeded synthetic trace: the cell and workload. A ``[[sweep.google2011]]`` table adds the import
of Google-2011 part files (``omega import google2011``: ``task_events``, ``job_events``,
``cell_model``, ``capacity_model``, ``seed``, ``limit``); a list of cell models is one trace each. ``schedulers`` takes what ``omega replay
--schedulers`` takes (a ``NAME:KIND[:CONFLICT[:COMMIT]]`` list) or a list of scheduler config
tables (``SchedulerConfig``'s fields: ``plugins`` and ``options`` carry policy chains);
``GRID_KEYS`` lists the rest. Every run is checked by building its ``ReplayConfig`` while the
spec is read, so a bad value fails before any replay starts (``SpecError``, one line naming the
key). A run's id is a stable hash of its trace's content, its settings and its seed.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any


class SpecError(ValueError):
    """A sweep spec that does not parse or validate: one line naming the file and the key."""


SCHEDULER_KEYS = ("t_job", "t_task", "conflict_mode", "commit_mode", "order")
"""Grid keys that fill every scheduler config that names none of its own."""
REPLAY_KEYS = ("decision_commits", "unplaced_charge", "initial_state", "max_txn_ops", "until",
               "sample_every_s", "skip_nothing_fits", "check", "submit_latency_s")
"""Grid keys that are ``ReplayConfig`` fields."""
GRID_KEYS = ("schedulers", *SCHEDULER_KEYS, *REPLAY_KEYS)
SWEEP_KEYS = ("name", "traces", "synthetic", "google2011", "seeds")
SYNTHETIC_KEYS = ("name", "machines", "cores", "memory_gib", "duration_s", "seed", "service_lifetime_s")
GOOGLE_KEYS = ("name", "task_events", "job_events", "cell_model", "capacity_model", "seed", "limit")
DEFAULT_SCHEDULERS = "batch:batch,service:service"
_TYPES = {"t_job": (int, float), "t_task": (int, float), "conflict_mode": str, "commit_mode": str, "order": str,
          "decision_commits": str, "unplaced_charge": str, "initial_state": str, "max_txn_ops": int,
          "until": (int, float), "sample_every_s": (int, float), "skip_nothing_fits": bool, "check": bool,
          "submit_latency_s": (int, float)}


@dataclass(frozen=True)
class Trace:
    """A trace of the sweep: a file, or one made into the sweep's folder before the runs start
    (``source``: ``{"kind": "synthetic" | "google2011", …its parameters}``). ``digest``: the sha256
    of the file, or of the source (its parameters and input files' digests)."""

    name: str
    path: str
    digest: str
    source: dict[str, Any] | None = None


@dataclass(frozen=True)
class SweepRun:
    """One replay: a trace, the settings of one grid point and a seed."""

    id: str
    trace: Trace
    settings: dict[str, Any]
    seed: int
    task: str = ""
    """"" (a spec's runs): the replay. Else ``"module:function"``, called by the worker instead
    (``tools.sweep.run.execute``): ``function(run)`` → (its row of the merged table, its detail)."""

    def replay_config(self) -> dict[str, Any]:
        """The ``ReplayConfig`` fields of this run (memory store, modelled decision time)."""
        return replay_config(self.settings, self.seed)

    def describe(self) -> dict[str, Any]:
        """Plain data naming the run (its JSON's ``run`` and a row of the merged table)."""
        out = {"id": self.id, "trace": self.trace.name, "seed": self.seed, "settings": self.settings}
        return {**out, "task": self.task} if self.task else out


@dataclass
class Spec:
    """An expanded sweep: its name, traces and runs in grid order."""

    name: str
    path: str
    traces: list[Trace]
    runs: list[SweepRun] = field(default_factory=list)


def replay_config(settings: dict[str, Any], seed: int) -> dict[str, Any]:
    """``ReplayConfig`` fields from one grid point's ``settings`` and ``seed`` (scheduler i gets
    seed + i, as ``omega replay --seed``)."""
    from tools.fauxmaster.scheduler_mix import parse_schedulers

    schedulers = settings.get("schedulers", DEFAULT_SCHEDULERS)
    if not isinstance(schedulers, str):
        schedulers = json.dumps(schedulers)
    fill = {key: settings[key] for key in SCHEDULER_KEYS if key in settings}
    configs = parse_schedulers(schedulers, seed, fill.get("t_job"), fill.get("t_task"), fill.get("order"))
    for config in configs:
        for key in ("conflict_mode", "commit_mode"):
            if key in fill:
                config.setdefault(key, fill[key])
    out: dict[str, Any] = {"schedulers": configs, "store": "memory", "decision_time": "modelled"}
    out.update({key: settings[key] for key in REPLAY_KEYS if key in settings})
    return out


def load_spec(path: str | Path) -> Spec:
    """Read, validate and expand the spec at ``path``; SpecError (one line) if it is not valid,
    OSError if it cannot be read."""
    path = Path(path)
    with open(path, "rb") as f:
        try:
            data = tomllib.load(f)
        except tomllib.TOMLDecodeError as exc:
            raise SpecError(f"{path}: not valid TOML: {exc}") from None
    return parse_spec(data, path)


def parse_spec(data: dict[str, Any], path: Path) -> Spec:
    """The expanded ``Spec`` of parsed TOML ``data`` (file paths relative to ``path``'s folder)."""
    _only(data, ("sweep", "grid"), path, "")
    sweep, grid = data.get("sweep"), data.get("grid", {})
    if not isinstance(sweep, dict):
        raise SpecError(f"{path}: missing [sweep] table (traces, seeds)")
    if not isinstance(grid, dict):
        raise SpecError(f"{path}: [grid] must be a table")
    _only(sweep, SWEEP_KEYS, path, "[sweep] ")
    _only(grid, GRID_KEYS, path, "[grid] ")
    name = sweep.get("name", path.stem)
    if not isinstance(name, str) or not name:
        raise SpecError(f"{path}: [sweep] name must be a non-empty string")
    traces = (_file_traces(sweep.get("traces", []), path) + _synthetic_traces(sweep.get("synthetic", []), path)
              + _google_traces(sweep.get("google2011", []), path))
    if not traces:
        raise SpecError(f"{path}: [sweep] names no trace (traces = [...], [[sweep.synthetic]] or "
                        f"[[sweep.google2011]])")
    names = [t.name for t in traces]
    if len(set(names)) != len(names):
        raise SpecError(f"{path}: [sweep] trace names must be unique, got {names}")
    seeds = sweep.get("seeds", [0])
    if not isinstance(seeds, list) or not seeds or not all(type(s) is int for s in seeds):
        raise SpecError(f"{path}: [sweep] seeds must be a non-empty list of integers, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise SpecError(f"{path}: [sweep] seeds repeat: {seeds}")
    points = _grid_points(grid, path)
    spec = Spec(name, str(path), traces)
    seen: set[str] = set()
    for trace in traces:
        for settings in points:
            for seed in seeds:
                run = SweepRun(run_id(trace, settings, seed), trace, settings, seed)
                if run.id in seen:
                    raise SpecError(f"{path}: [grid] holds the same point twice: {settings}")
                seen.add(run.id)
                spec.runs.append(run)
    return spec


def run_id(trace: Trace, settings: dict[str, Any], seed: int) -> str:
    """A stable id: 16 hex digits of the sha256 of the trace's digest, the settings and the seed."""
    text = json.dumps({"trace": trace.digest, "settings": settings, "seed": seed}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _only(table: dict, known: tuple[str, ...], path: Path, where: str) -> None:
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise SpecError(f"{path}: {where}unknown key {unknown[0]!r} (known: {', '.join(known)})")


def _file_traces(traces: Any, path: Path) -> list[Trace]:
    if not isinstance(traces, list) or not all(isinstance(t, str) and t for t in traces):
        raise SpecError(f"{path}: [sweep] traces must be a list of file paths, got {traces!r}")
    out = []
    for item in traces:
        file = (path.parent / item).resolve()
        try:
            digest = hashlib.sha256(file.read_bytes()).hexdigest()
        except OSError as exc:
            raise SpecError(f"{path}: [sweep] traces: {item}: {exc.strerror or exc}") from None
        out.append(Trace(_trace_name(file), str(file), digest))
    return out


def _trace_name(file: Path) -> str:
    name = file.name
    for suffix in (".gz", ".omt"):
        name = name.removesuffix(suffix)
    return name


def _synthetic_traces(tables: Any, path: Path) -> list[Trace]:
    from tools.fauxmaster.experiments.synthetic import SyntheticSpec

    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise SpecError(f"{path}: [[sweep.synthetic]] must be tables")
    out = []
    for i, table in enumerate(tables):
        _only(table, SYNTHETIC_KEYS, path, f"[[sweep.synthetic]] #{i + 1} ")
        params = {k: v for k, v in table.items() if k != "name"}
        for key in ("machines", "memory_gib", "seed"):
            if key in params and type(params[key]) is not int:
                raise SpecError(f"{path}: [[sweep.synthetic]] #{i + 1}: {key} must be an integer, got {params[key]!r}")
        try:
            spec = SyntheticSpec(**params)
        except (TypeError, ValueError) as exc:
            raise SpecError(f"{path}: [[sweep.synthetic]] #{i + 1}: {exc}") from None
        text = json.dumps({"synthetic": params}, sort_keys=True)
        name = table.get("name", f"synthetic-{i + 1}")
        out.append(Trace(str(name), "", hashlib.sha256(text.encode()).hexdigest(), {
            "kind": "synthetic", **{f.name: getattr(spec, f.name) for f in fields(spec) if f.name != "mix"}}))
    return out


def _google_traces(tables: Any, path: Path) -> list[Trace]:
    """One trace per table and cell model (``name``, or ``name-MODEL`` for a list of models)."""
    from tools.trace.google2011.cell import CapacityModel, CellModel

    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise SpecError(f"{path}: [[sweep.google2011]] must be tables")
    out = []
    for i, table in enumerate(tables):
        where = f"[[sweep.google2011]] #{i + 1}"
        _only(table, GOOGLE_KEYS, path, where + " ")
        files = {}
        for key in ("task_events", "job_events"):
            item = table.get(key)
            if not isinstance(item, str) or not item:
                raise SpecError(f"{path}: {where}: {key} must name a part file")
            file = (path.parent / item).resolve()
            try:
                files[key] = (str(file), hashlib.sha256(file.read_bytes()).hexdigest())
            except OSError as exc:
                raise SpecError(f"{path}: {where}: {key} {item}: {exc.strerror or exc}") from None
        models = table.get("cell_model", "overcommit")
        models = models if isinstance(models, list) else [models]
        seed, limit, capacity = table.get("seed", 0), table.get("limit"), table.get("capacity_model", "mix")
        if type(seed) is not int or (limit is not None and (type(limit) is not int or limit < 1)):
            raise SpecError(f"{path}: {where}: seed must be an integer and limit a positive integer")
        try:
            CapacityModel(capacity, seed)
            for model in models:
                CellModel(model)
        except (TypeError, ValueError) as exc:
            raise SpecError(f"{path}: {where}: {exc}") from None
        if not models or len(set(models)) != len(models):
            raise SpecError(f"{path}: {where}: cell_model must be one model or a list of distinct models")
        base = table.get("name", f"google2011-{i + 1}")
        for model in models:
            params = {"task_events": files["task_events"][0], "job_events": files["job_events"][0],
                      "cell_model": model, "capacity_model": capacity, "seed": seed, "limit": limit}
            text = json.dumps({"google2011": {**params, "task_events": files["task_events"][1],
                                              "job_events": files["job_events"][1]}}, sort_keys=True)
            name = f"{base}-{model}" if len(models) > 1 else str(base)
            out.append(Trace(name, "", hashlib.sha256(text.encode()).hexdigest(), {"kind": "google2011", **params}))
    return out


def _grid_points(grid: dict[str, Any], path: Path) -> list[dict[str, Any]]:
    """Every combination of the grid's values, keys in ``GRID_KEYS`` order; each checked."""
    from tools.fauxmaster.replay import ReplayConfig

    axes = []
    for key in (k for k in GRID_KEYS if k in grid):
        values = grid[key]
        if key == "schedulers":  # a string, a list of tables (one mix), or a list of those
            if isinstance(values, str) or (isinstance(values, list) and values and isinstance(values[0], dict)):
                values = [values]
        elif not isinstance(values, list):
            values = [values]
        if not values:
            raise SpecError(f"{path}: [grid] {key} is an empty list")
        for value in values:
            _check_type(key, value, path)
        axes.append([(key, v) for v in values])
    points = [dict(combo) for combo in itertools.product(*axes)]
    for settings in points:
        try:
            ReplayConfig(**replay_config(settings, 0))
        except (ValueError, TypeError) as exc:
            raise SpecError(f"{path}: [grid] {_point(settings)}: {exc}") from None
    return points


def _check_type(key: str, value: Any, path: Path) -> None:
    if key == "schedulers":
        ok = isinstance(value, str) or (isinstance(value, list) and value and all(isinstance(v, dict) for v in value))
        if not ok:
            raise SpecError(f"{path}: [grid] schedulers: {value!r} is neither a NAME:KIND,… string nor a list of "
                            f"scheduler tables")
        return
    wanted = _TYPES[key]
    if isinstance(value, bool) and wanted is not bool or not isinstance(value, wanted):
        raise SpecError(f"{path}: [grid] {key}: {value!r} is not a {_type_name(wanted)}")


def _type_name(wanted) -> str:
    return {str: "string", int: "integer", bool: "boolean"}.get(wanted, "number")


def _point(settings: dict[str, Any]) -> str:
    return ", ".join(f"{k}={json.dumps(v)}" for k, v in settings.items()) or "(defaults)"
