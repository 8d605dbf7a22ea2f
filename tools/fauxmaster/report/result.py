"""A replay result as a report reads it: ``Run`` (a label and the result as plain data), the result
written as JSON, and read back (``load_result``) checked enough to draw every plot; ``ResultError``
names the file and what is wrong."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.fauxmaster.replay import ReplayResult


class ResultError(ValueError):
    """A file that is not a replay result (one line naming the file and what is wrong)."""


@dataclass
class Run:
    """One replay in a report: its label, its result as plain data (``ReplayResult.to_dict``), and what
    only a live result has (the cell's statement, the fidelity's raw delays)."""

    label: str
    data: dict[str, Any]
    capacity_model: str = ""
    fidelity_delays: tuple[list[float], list[float]] | None = None


def write_json(result: ReplayResult, path) -> Path:
    """The result as JSON at ``path`` (parent directories created; ``write_whole``)."""
    return write_whole(path, result.to_json() + "\n")


def write_whole(path, text: str) -> Path:
    """``text`` at ``path``, parent directories created: a regular file is written beside it and renamed
    over it, so a failure (a full disk) leaves no half-written file; anything else that exists
    (``/dev/stdout``, a pipe) is written in place, never replaced."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and not path.is_file():
        path.write_text(text)
        return path
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def run_of(result: ReplayResult, label: str = "") -> Run:
    """``result`` as a ``Run`` of a report."""
    f = result.fidelity
    return Run(label or Path(result.trace).name, result.to_dict(), result.capacity_model,
               (f.real_delays, f.replay_delays) if f is not None else None)


NUMBER = (int, float)
_REQUIRED = {"trace": str, "sim_time_s": NUMBER, "events": int, "jobs_submitted": int, "jobs_unscheduled": int,
             "schedulers": list, "wait_to_first_attempt": dict, "wait_to_placed": dict, "utilization": list}
_SCHEDULER = {"name": str, "kind": str, "conflict_mode": str, "commit_mode": str, "busyness": NUMBER,
              "conflict_fraction": NUMBER, "attempts": int, "tasks_placed": int}
_WAIT = {"jobs": int, "mean": NUMBER, "p90": NUMBER, "p99": NUMBER}
_SAMPLE = {"t": NUMBER, "cpu": NUMBER, "memory": NUMBER, "load_cv": NUMBER}


def load_results(path) -> list[tuple[str, dict[str, Any]]]:
    """The replay results in ``path`` as (label suffix, result): one ("", result) for a result file or
    a ``--html`` directory's ``result.json``; ("seed N", result) per run of an ``omega replay --seeds``
    output (its ``--json-out`` document ``{seeds, summary, runs}``, or its ``--html`` directory's
    ``result-seedN.json`` files). ``ResultError`` naming the file for anything else."""
    path = Path(path)
    if path.is_dir() and not (path / "result.json").exists():
        seeded = sorted(path.glob("result-seed*.json"), key=lambda p: _seed_of(p.name))
        if seeded:
            return [(f"seed {_seed_of(p.name)}", load_result(p)) for p in seeded]
    elif path.is_file():
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            data = None  # load_result says what is wrong
        if isinstance(data, dict) and isinstance(data.get("runs"), list) and isinstance(data.get("seeds"), list):
            if len(data["runs"]) != len(data["seeds"]):
                raise ResultError(f"{path}: not a replay --seeds result (not one run per seed)")
            out = []
            for seed, run in zip(data["seeds"], data["runs"]):
                try:
                    _check_result(run)
                except ValueError as exc:
                    raise ResultError(f"{path}: the run of seed {seed} is not a replay result ({exc})") from None
                out.append((f"seed {seed}", run))
            return out
    return [("", load_result(path))]


def _seed_of(name: str) -> int:
    digits = name[len("result-seed"):-len(".json")]
    return int(digits) if digits.isdigit() else -1


def load_result(path) -> dict[str, Any]:
    """The replay result in ``path`` (``omega replay --json`` output, or a ``--html`` directory's
    ``result.json``), checked enough to draw every plot; ``ResultError`` naming the file otherwise."""
    path = Path(path)
    if path.is_dir():
        path = path / "result.json"
    try:
        text = path.read_text()
    except OSError as exc:
        raise ResultError(f"{path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ResultError(f"{path}: not a replay result (not text; write one with omega replay --json)") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ResultError(f"{path}: not a replay result (not JSON: {exc})") from None
    try:
        _check_result(data)
    except ValueError as exc:
        raise ResultError(f"{path}: not a replay result ({exc}; write one with omega replay --json)") from None
    return data


def _fields(value, spec: dict, where: str) -> None:
    if not isinstance(value, dict):
        raise ValueError(f"{where} is not an object")
    missing = [k for k in spec if k not in value]
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise ValueError(f"{where} has no {', '.join(repr(k) for k in missing[:3])}{more}")
    for key, kind in spec.items():
        if isinstance(value[key], bool) or not isinstance(value[key], kind):
            raise ValueError(f"{where}'s {key!r} is not {_KIND_NAMES.get(kind, 'a number')}")


_KIND_NAMES = {str: "a string", int: "an integer", list: "a list", dict: "an object"}


def _numbers(values, where: str, allow_none: bool = False) -> None:
    if not isinstance(values, list) or not all(
            (allow_none and v is None) or (isinstance(v, NUMBER) and not isinstance(v, bool)) for v in values):
        raise ValueError(f"{where} is not a list of numbers")


def _check_result(d) -> None:
    """ValueError saying what a replay result's plots need and ``d`` lacks."""
    if not isinstance(d, dict):
        raise ValueError("not a JSON object")
    _fields(d, _REQUIRED, "the result")
    for i, s in enumerate(d["schedulers"]):
        _fields(s, _SCHEDULER, f"scheduler {i}")
    for key in ("wait_to_first_attempt", "wait_to_placed"):
        _fields(d[key], _WAIT, key)
    for i, u in enumerate(d["utilization"]):
        _fields(u, _SAMPLE, f"utilization sample {i}")
        extra = u.get("extra", {})
        if not isinstance(extra, dict):
            raise ValueError(f"utilization sample {i}'s 'extra' is not an object")
        _numbers(list(extra.values()), f"utilization sample {i}'s 'extra'")
    for key in ("wall_time_s", "speedup", "utilization_interval_s"):
        if key in d and (isinstance(d[key], bool) or not isinstance(d[key], NUMBER)):
            raise ValueError(f"the result's {key!r} is not a number")
    losses = d.get("losses", {})
    if not isinstance(losses, dict) or not all(isinstance(n, int) for n in losses.values()):
        raise ValueError("'losses' is not an object of counts")
    cdf = d.get("wait_cdf")
    if cdf:
        _fields(cdf, {"jobs": int, "to_first_attempt": dict, "to_placed": dict}, "wait_cdf")
        for key in ("to_first_attempt", "to_placed"):
            _fields(cdf[key], {"waits_s": list, "fractions": list, "never": int}, f"wait_cdf.{key}")
            _numbers(cdf[key]["waits_s"], f"wait_cdf.{key}.waits_s")
            _numbers(cdf[key]["fractions"], f"wait_cdf.{key}.fractions")
            if len(cdf[key]["waits_s"]) != len(cdf[key]["fractions"]):
                raise ValueError(f"wait_cdf.{key}'s waits_s and fractions differ in length")
    sd = d.get("slowdown")
    if sd:
        _fields(sd, {"jobs": int, "never": int, "jobs_ended": int, "jobs_not_ended": int}, "slowdown")
        for key in ("threshold_s", "mean", "median", "p90", "makespan_s"):
            if sd.get(key) is not None and (isinstance(sd[key], bool) or not isinstance(sd[key], NUMBER)):
                raise ValueError(f"slowdown.{key} is not a number")
        if not isinstance(sd.get("threshold_s"), NUMBER):
            raise ValueError("slowdown lacks its threshold_s")
    over_time = d.get("conflicts_over_time")
    if over_time:
        _fields(over_time, {"t": list, "schedulers": dict}, "conflicts_over_time")
        _numbers(over_time["t"], "conflicts_over_time.t")
        for name, counts in over_time["schedulers"].items():
            where = f"conflicts_over_time of {name!r}"
            _fields(counts, {"transactions": list, "failed": list, "conflicts": list}, where)
            for key in ("transactions", "failed", "conflicts"):
                _numbers(counts[key], f"{where}.{key}")
                if len(counts[key]) != len(over_time["t"]):
                    raise ValueError(f"{where}.{key} has not one count per sample time")
    fidelity = d.get("fidelity")
    if fidelity is not None:
        try:
            fidelity_of(fidelity).lines()
            _fields(fidelity["cdf"], {"fractions": list, "real_s": list, "replay_s": list}, "fidelity.cdf")
            for key in ("fractions", "real_s", "replay_s"):
                _numbers(fidelity["cdf"][key], f"fidelity.cdf.{key}", allow_none=True)
            if fidelity["occupancy"] is not None:
                for key in ("t", "real_cpu", "replay_cpu", "real_memory", "replay_memory"):
                    _numbers(fidelity["occupancy"][key], f"fidelity.occupancy.{key}")
        except (TypeError, KeyError, IndexError, AttributeError) as exc:
            raise ValueError(f"its fidelity section does not read ({type(exc).__name__}: {exc})") from None


def fidelity_of(d: dict):
    """The ``Fidelity`` of a result's ``fidelity`` section (TypeError when its fields do not fit)."""
    from tools.fauxmaster.fidelity import Fidelity

    return Fidelity(**d)


def extra_names(runs: list[Run]) -> list[str]:
    """The extra resources (gpu, …) the utilization samples of ``runs`` name, in order of first appearance."""
    return list(dict.fromkeys(name for r in runs for u in r.data["utilization"] for name in u.get("extra", {})))

