"""One run of a sweep, as an engine's worker executes it: the replay ``omega replay`` runs
(``tools.fauxmaster.replay.replay``, memory store, modelled decision time on the virtual clock)
with the run's settings, then its files in ``OUT/runs/``: ``ID.csv``, one row per job the trace
submitted, and ``ID.json``, the result, the run and the digest, written last and by rename, so
a JSON that is there is complete (``is_complete``). A run naming a ``task`` (``SweepRun.task``:
another experiment's unit of work, e.g. one compaction search) calls that instead and writes only
``ID.json``: the row and detail it returns, the digest the sha256 of both.

The digest is the sha256 of the deterministic parts of the run: the replay's figures without
wall-clock ones (``ReplayResult.to_dict(include_wall=False)``, the trace's path left out) and
every committed placement in commit order (job, task, machine, virtual time). Same trace,
settings and seed: the same digest, on any engine and host.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import time
from pathlib import Path
from typing import Any

from cellstate.codec.records import decode_job_record
from tools.sweep.spec import SweepRun

JOB_COLUMNS = ("job", "kind", "tasks", "submitted_s", "first_attempt_s", "placed_s", "placements", "machines")
"""The per-job table: ``kind`` and ``tasks`` empty for a job never placed and gone from the cell
at the end (killed while pending); ``first_attempt_s`` and ``placed_s`` (first fully placed) empty when it never
was; ``placements`` counts committed task placements (a task placed again after an eviction or a
machine failure counts again); ``machines`` the distinct machines of those, space-separated."""
FORMAT = 1


def run_paths(out: str | Path, run_id: str) -> tuple[Path, Path]:
    """The run's JSON and per-job CSV under ``out``."""
    runs = Path(out) / "runs"
    return runs / f"{run_id}.json", runs / f"{run_id}.csv"


def is_complete(out: str | Path, run: SweepRun) -> dict[str, Any] | None:
    """The summary of ``run``'s finished files under ``out`` (both there, the JSON of this run and
    format, with a digest), else None."""
    json_path, csv_path = run_paths(out, run.id)
    try:
        data = json.loads(json_path.read_text())
    except (OSError, ValueError):
        return None
    if (not isinstance(data, dict) or data.get("format") != FORMAT or not data.get("digest")
            or data.get("run", {}).get("id") != run.id or not (run.task or csv_path.is_file())):
        return None
    return data.get("summary")


def execute(run: SweepRun, out: str) -> dict[str, Any]:
    """Replay ``run`` (or call its ``task``), write its files under ``out``; its summary (a row of
    the merged table)."""
    if run.task:
        return _execute_task(run, out)
    from tools.fauxmaster.replay import replay

    placements: list[tuple[str, int, str, float]] = []
    kinds: dict[str, tuple[str, int]] = {}
    journals = []

    def setup(sims, core) -> None:
        journals.append(sims[0].journal)
        for sim in sims:
            committer = sim.placer.committer
            committer.on_commit = _recording(committer.on_commit, core, placements, kinds)

    cpu0, wall0 = time.process_time(), time.perf_counter()
    result = replay(run.trace.path, run.replay_config(), setup=setup)
    for kv in result.store.range(result.keys.kind_prefix("jobs")).kvs:  # the never-placed still in the cell
        job = decode_job_record(kv.key, kv.value).job
        kinds.setdefault(job.id, (str(job.kind), job.tasks))
    rows = job_rows(journals[0], placements, kinds)
    figures = result.to_dict(include_wall=False)
    figures.pop("trace")
    digest = _digest(figures, placements)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    summary = _summary(run, result, digest, wall, cpu)
    data = {"format": FORMAT, "run": run.describe(), "digest": digest, "summary": summary,
            "replay_config": result.config, "result": result.to_dict()}
    json_path, csv_path = run_paths(out, run.id)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(csv_path, _csv(rows))
    write_atomic(json_path, json.dumps(data, indent=1, sort_keys=True))
    return summary


def _execute_task(run: SweepRun, out: str) -> dict[str, Any]:
    import importlib

    module, _, name = run.task.partition(":")
    summary, detail = getattr(importlib.import_module(module), name)(run)
    text = json.dumps({"summary": summary, "detail": detail}, sort_keys=True, separators=(",", ":"), default=str)
    data = {"format": FORMAT, "run": run.describe(), "digest": hashlib.sha256(text.encode()).hexdigest(),
            "summary": summary, "detail": detail}
    json_path, _ = run_paths(out, run.id)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(json_path, json.dumps(data, indent=1, sort_keys=True, default=str))
    return summary


def _recording(on_commit, core, placements: list, kinds: dict):
    def note(plan) -> None:
        job = plan.job.record.job
        kinds.setdefault(job.id, (str(job.kind), job.tasks))
        now = core.now
        for claim in plan.claims:
            placements.append((job.id, claim.task_index, claim.machine_id, now))
        on_commit(plan)
    return note


def job_rows(journal, placements: list[tuple[str, int, str, float]], kinds: dict) -> list[dict[str, Any]]:
    """One row per submitted job (``JOB_COLUMNS``), in submission order."""
    machines: dict[str, list[str]] = {}
    for job, _, machine, _ in placements:
        machines.setdefault(job, []).append(machine)
    rows = []
    for job, submitted in journal.submitted.items():
        kind, tasks = kinds.get(job, ("", ""))
        placed = machines.get(job, [])
        rows.append({"job": job, "kind": kind, "tasks": tasks, "submitted_s": submitted,
                     "first_attempt_s": journal.first_taken.get(job, ""),
                     "placed_s": journal.fully_placed.get(job, ""), "placements": len(placed),
                     "machines": " ".join(sorted(set(placed)))})
    return rows


def _digest(figures: dict[str, Any], placements: list) -> str:
    text = json.dumps({"figures": figures, "placements": placements}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _summary(run: SweepRun, result, digest: str, wall: float, cpu: float) -> dict[str, Any]:
    s = result.schedulers
    return {"id": run.id, "trace": run.trace.name, "seed": run.seed,
            **{key: json.dumps(value) if not isinstance(value, (int, float, str)) else value
               for key, value in run.settings.items()},
            "digest": digest, "jobs_submitted": result.jobs_submitted, "jobs_unscheduled": result.jobs_unscheduled,
            "wait_placed_mean_s": result.wait_to_placed.mean, "wait_placed_p90_s": result.wait_to_placed.p90,
            "attempts": sum(m.attempts for m in s), "transactions": sum(m.transactions for m in s),
            "failed_transactions": sum(m.failed_transactions for m in s),
            "tasks_placed": sum(m.tasks_placed for m in s),
            "invariants_ok": None if result.check is None else bool(result.check["ok"]),
            "wall_s": round(wall, 4), "cpu_s": round(cpu, 4)}


def _csv(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, JOB_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
