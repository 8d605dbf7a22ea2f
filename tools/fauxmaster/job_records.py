"""Per-job records of a replay (``omega replay --jobs-out FILE.csv|.parquet``): one row per job
the trace submitted, for analysis outside omega.

Columns (times in virtual seconds, rounded to the microsecond so that sums of modelled decision times
print as 1.225, not 1.2249999999999999; empty / null: it did not happen by the replay's end):
``job``, ``kind``, ``priority``, ``owner``, ``tasks``; ``submit`` (the trace's submission);
``first_attempt`` (a scheduler first took it); ``placed`` (all its tasks placed); ``end`` (the
last time a task of it ended, or it was killed); ``wait`` (placed - submit); ``scheduler`` (the
scheduler that first took it); ``machines`` (distinct machines the schedulers placed its tasks
on); ``initial`` (the recorded t = 0 state placed it whole: no scheduler did, ``machines`` 0).

CSV needs nothing more; Parquet needs pyarrow (an optional dependency: ``pip install pyarrow``).
"""

from __future__ import annotations

import csv
import os

COLUMNS = ("job", "kind", "priority", "owner", "tasks", "submit", "first_attempt", "placed", "end", "wait",
           "scheduler", "machines", "initial")
FORMATS = (".csv", ".parquet")


def format_of(path: str) -> str:
    """The output format named by ``path``'s suffix; ValueError naming the accepted ones."""
    suffix = os.path.splitext(os.fspath(path))[1].lower()
    if suffix not in FORMATS:
        raise ValueError(f"--jobs-out {path}: expected a .csv or .parquet file name, got {suffix or 'no suffix'!r}")
    return suffix


def job_rows(journal, job_log, initial_jobs: set[str]) -> list[dict]:
    """The rows (see the module docstring), in submission order."""
    rows = []
    taken_by = journal.taken_by or {}
    for job_id, at in journal.submitted.items():
        spec = job_log.specs.get(job_id)
        at, placed = _us(at), _us(journal.fully_placed.get(job_id))
        initial = job_id in initial_jobs
        rows.append({
            "job": job_id, "kind": spec.kind.value if spec is not None else "",
            "priority": spec.priority if spec is not None else None, "owner": spec.owner if spec is not None else "",
            "tasks": spec.tasks if spec is not None else None, "submit": at,
            "first_attempt": _us(journal.first_taken.get(job_id)), "placed": placed,
            "end": _us(job_log.ended.get(job_id)), "wait": None if placed is None else _us(placed - at),
            "scheduler": taken_by.get(job_id, ""), "machines": len(job_log.machines.get(job_id, ())),
            "initial": initial})
    return rows


def _us(t: float | None) -> float | None:
    """``t`` rounded to the microsecond (None stays None)."""
    return None if t is None else round(t, 6)


def write_job_rows(rows: list[dict], path: str) -> None:
    """Write ``rows`` as CSV or Parquet by ``path``'s suffix (``format_of``); ImportError when
    Parquet is asked for without pyarrow. Written to a temporary file beside ``path`` and renamed,
    so a failure leaves no half-written file."""
    suffix = format_of(path)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        if suffix == ".csv":
            with open(tmp, "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=_columns(rows))
                writer.writeheader()
                for row in rows:
                    writer.writerow({k: "" if v is None else v for k, v in row.items()})
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            table = pa.Table.from_pylist(rows, schema=_schema(pa, _columns(rows)))
            pq.write_table(table, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _columns(rows: list[dict]) -> tuple[str, ...]:
    """COLUMNS, after a leading ``seed`` when the rows have one (``--seeds``)."""
    return (("seed",) if rows and "seed" in rows[0] else ()) + COLUMNS


def _schema(pa, columns):
    types = {"seed": pa.int64(), "job": pa.string(), "kind": pa.string(), "priority": pa.int64(), "owner": pa.string(),
             "tasks": pa.int64(), "submit": pa.float64(), "first_attempt": pa.float64(), "placed": pa.float64(),
             "end": pa.float64(), "wait": pa.float64(), "scheduler": pa.string(), "machines": pa.int64(),
             "initial": pa.bool_()}
    return pa.schema([(name, types[name]) for name in columns])
