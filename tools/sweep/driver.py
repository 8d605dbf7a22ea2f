"""Run a sweep: skip the runs already finished in the output folder, hand the rest to an engine,
retry each failed run once, then write the merged table ``OUT/runs.csv`` (one row per run of the
spec, in the spec's order, its ``status``: ``done``, ``resumed`` — finished by an earlier sweep
— or ``failed`` with the ``error``).
"""

from __future__ import annotations

import csv
import io
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from tools.sweep.engines import Outcome
from tools.sweep.run import write_atomic, is_complete
from tools.sweep.spec import SweepRun, Spec

STATUS_COLUMNS = ("id", "status", "tries", "error")


@dataclass
class SweepReport:
    """What a sweep did: each run's row (``rows``, spec order), the failures, the timings."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    ran: int = 0
    resumed: int = 0
    retried: int = 0
    failed: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = 0.0
    table: str = ""


class TraceSourceError(ValueError):
    """A trace the sweep makes (synthetic, imported) that could not be made: one line naming it."""


Progress = Callable[[int, int, int], None]
"""``progress(finished, total, failed)``: called once before the first run ends and after each."""


def prepare_traces(spec: Spec, out: Path) -> list[SweepRun]:
    """The spec's runs with each trace that has a ``source`` made at ``OUT/traces/NAME-DIGEST.omt.gz``
    (by rename: one that is there is complete, and kept) and the runs pointed at it."""
    paths = {}
    for trace in spec.traces:
        if trace.source is not None:
            path = out / "traces" / f"{trace.name}-{trace.digest[:12]}.omt.gz"
            if not path.is_file():
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_name(f".{path.name}.tmp.omt.gz")
                try:
                    make_trace(trace.source, tmp)
                except Exception as exc:  # an input that does not parse, a file gone since the spec was read
                    tmp.unlink(missing_ok=True)
                    raise TraceSourceError(f"trace {trace.name}: {exc}".splitlines()[0]) from exc
                tmp.replace(path)
            paths[trace.name] = str(path)
    return [replace(run, trace=replace(run.trace, path=paths[run.trace.name])) if run.trace.name in paths else run
            for run in spec.runs]


def make_trace(source: dict[str, Any], path: Path) -> None:
    """Write the trace ``source`` describes (``Trace.source``) at ``path``."""
    params = {k: v for k, v in source.items() if k != "kind"}
    if source["kind"] == "synthetic":
        from tools.fauxmaster.experiments.synthetic import SyntheticSpec, write_synthetic_trace

        write_synthetic_trace(path, SyntheticSpec(**params))
    elif source["kind"] == "google2011":
        from tools.trace.google2011.cell import CapacityModel, CellModel
        from tools.trace.google2011.importer import import_google2011

        import_google2011(params["task_events"], params["job_events"], path,
                          CapacityModel(params["capacity_model"], params["seed"]), limit=params["limit"],
                          cell_model=CellModel(params["cell_model"]))
    else:
        raise ValueError(f"unknown trace source {source['kind']!r}")


def run_sweep(spec: Spec, engine, out: str | Path, progress: Progress | None = None) -> SweepReport:
    """SweepRun ``spec`` on ``engine`` into ``out`` (see the module docstring)."""
    started = time.perf_counter()
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    runs = prepare_traces(spec, out)
    report = SweepReport()
    summaries: dict[str, dict[str, Any]] = {}
    status: dict[str, dict[str, Any]] = {}
    todo = []
    for run in runs:
        summary = is_complete(out, run)
        if summary is not None:
            summaries[run.id] = summary
            status[run.id] = {"status": "resumed", "tries": 0, "error": ""}
        else:
            todo.append(run)
    report.resumed = len(runs) - len(todo)
    total, finished, failed_now = len(runs), report.resumed, 0
    if progress is not None:
        progress(finished, total, 0)
    attempt = 0
    while todo and attempt < 2:  # a first try, then one retry of what failed
        attempt += 1
        again: list[SweepRun] = []
        for outcome in engine.run(todo, str(out)):
            outcome: Outcome
            if outcome.summary is not None:
                summaries[outcome.run.id] = outcome.summary
                status[outcome.run.id] = {"status": "done", "tries": attempt, "error": ""}
                finished += 1
                report.ran += 1
            else:
                status[outcome.run.id] = {"status": "failed", "tries": attempt, "error": outcome.error or "?"}
                again.append(outcome.run)
                if attempt == 2:
                    finished += 1
                    failed_now += 1
            if progress is not None:
                progress(finished, total, failed_now)
        if attempt == 1:
            report.retried = len(again)
        todo = again
    for run in runs:
        row = {"id": run.id, **status[run.id]}
        row.update(summaries.get(run.id) or {"trace": run.trace.name, "seed": run.seed, **_plain(run.settings)})
        report.rows.append(row)
        if row["status"] == "failed":
            report.failed.append(row)
    report.table = str(out / "runs.csv")
    write_atomic(Path(report.table), merged_csv(report.rows))
    report.wall_s = time.perf_counter() - started
    return report


def _plain(settings: dict[str, Any]) -> dict[str, Any]:
    import json

    return {k: v if isinstance(v, (int, float, str)) else json.dumps(v) for k, v in settings.items()}


def merged_csv(rows: list[dict[str, Any]]) -> str:
    """The merged table: ``STATUS_COLUMNS``, then every other column in order of first appearance."""
    columns = list(STATUS_COLUMNS)
    for row in rows:
        columns += [key for key in row if key not in columns]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, columns, lineterminator="\n", restval="")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()
