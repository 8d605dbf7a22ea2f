"""Hand-written Google clusterdata-2011 task_events rows for the importer and replay tests."""

from __future__ import annotations

import gzip

from tools.trace.google2011.cell import CapacityModel
from tools.trace.google2011.importer import import_google2011

S = 600_000_000  # the timestamp of trace time 0 s after the window opens


def task_row(ts, job, task, machine, kind, priority=0, cpu=0.25, mem=0.125, disk=0.0, different=0):
    """One task_events row (13 columns; user "user", missing-info and class 0)."""
    return [ts, "", job, task, machine, kind, "user", 0, priority, cpu, mem, disk, different]


def write_gz(path, rows) -> str:
    """``rows`` as a gzipped CSV part file at ``path``."""
    with gzip.open(path, "wt") as f:
        f.write("".join(",".join(map(str, r)) + "\n" for r in rows))
    return str(path)


def import_rows(tmp_path, rows, job_rows=()):
    """Import ``rows`` (and ``job_rows`` as job_events) with uniform machines; the trace's path."""
    out = tmp_path / "g.omt"
    import_google2011(write_gz(tmp_path / "te.csv.gz", rows), write_gz(tmp_path / "je.csv.gz", job_rows), out,
                      CapacityModel("uniform"))
    return out
