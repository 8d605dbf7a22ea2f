"""The end-of-demo summary: what each scheduler did (placements, transactions, conflicts), the
cell's utilization, pending queues and task states, the children's exit codes and the
invariant check. ``DemoSummary.to_dict`` is the ``--summary-json`` document."""

from __future__ import annotations

import dataclasses
import json
import textwrap
from collections import Counter
from dataclasses import dataclass, field
from typing import TextIO

from cellstate.check import Report
from cellstate.codec.fields import CodecError
from cellstate.devices import GPU, device_index
from cellstate.keys import CellKeys
from cellstate.replica.watched import Replica
from cellstate.codec.stats import decode_stats
from cellstate.store import Store
from cellstate.scheduler_stats import SchedulerStats
from tools.monitor.model import build_frame, to_dict
from tools.monitor.render import amount

FINAL_STATS_PREFIX = "final-stats "
TASK_STATES = {"p": "pending", "a": "placed", "r": "running", "f": "finished", "x": "failed", "k": "killed"}


@dataclass(frozen=True, slots=True)
class SchedulerSummary:
    """One scheduler's totals; ``source`` says where they come from: "final" (the line the
    process printed on exit), "lease" (its stats key, read before it was stopped) or "none"."""

    name: str
    kind: str
    source: str
    exit_code: int | None
    attempts: int = 0
    txns: int = 0
    commits: int = 0
    conflicts: int = 0
    job_conflicts: int = 0
    """Of ``conflicts``, those caused by the job record alone (no machine contended)."""
    conflict_fraction: float = 0.0
    retries: int = 0
    tasks_placed: int = 0
    jobs_placed: int = 0
    busyness: float = 0.0


@dataclass
class DemoSummary:
    """Everything the demo reports when it ends."""

    cell: str
    run_dir: str
    seconds: float
    schedulers: list[SchedulerSummary]
    machines_up: int = 0
    machines_total: int = 0
    jobs: int = 0
    tasks: dict[str, int] = field(default_factory=dict)
    utilization: list[dict] = field(default_factory=list)
    pending: list[dict] = field(default_factory=list)
    gpu: dict | None = None
    """The GPU devices as the monitor sums them (``tools.monitor.model.GpuUse``); None: no device."""
    check: dict = field(default_factory=dict)
    children: dict[str, dict] = field(default_factory=dict)  # name -> {"pid", "exit_code"}
    failed_children: list[str] = field(default_factory=list)
    etcd_endpoints: list[str] = field(default_factory=list)
    metrics: dict[str, str] = field(default_factory=dict)  # process name -> its /metrics URL

    @property
    def placements(self) -> int:
        return sum(s.tasks_placed for s in self.schedulers)

    @property
    def txns(self) -> int:
        return sum(s.txns for s in self.schedulers)

    @property
    def conflicts(self) -> int:
        return sum(s.conflicts for s in self.schedulers)

    @property
    def job_conflicts(self) -> int:
        return sum(s.job_conflicts for s in self.schedulers)

    @property
    def ok(self) -> bool:
        """The invariants hold and no child failed."""
        return bool(self.check.get("ok")) and not self.failed_children

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d.update(ok=self.ok, placements=self.placements, txns=self.txns, conflicts=self.conflicts,
                 job_conflicts=self.job_conflicts)
        return d


def read_leased_stats(store: Store, keys: CellKeys) -> dict[str, SchedulerStats]:
    """The stats every live scheduler published, by name (values that do not decode are skipped:
    the final-stats lines are the primary source)."""
    found = {}
    for kv in store.range(keys.kind_prefix("stats")).kvs:
        try:
            stats = decode_stats(kv.key, kv.value)
        except CodecError:
            continue
        found[stats.name] = stats
    return found


def final_stats(log_lines: list[str]) -> dict | None:
    """The SchedulerStats map of the last ``final-stats {json}`` line, or None."""
    for line in reversed(log_lines):
        if line.startswith(FINAL_STATS_PREFIX):
            try:
                return json.loads(line[len(FINAL_STATS_PREFIX):])
            except ValueError:
                return None
    return None


def scheduler_summary(name: str, kind: str, exit_code: int | None, final: dict | None,
                      leased: SchedulerStats | None) -> SchedulerSummary:
    """Totals of one scheduler from its final line, else from its last leased stats."""
    if final is not None:
        source, values = "final", final
    elif leased is not None:
        source, values = "lease", dataclasses.asdict(leased)
    else:
        return SchedulerSummary(name, kind, "none", exit_code)
    counts = {f: int(values.get(f, 0)) for f in ("attempts", "txns", "commits", "conflicts", "job_conflicts",
                                                  "retries", "tasks_placed", "jobs_placed")}
    commits = counts["commits"]
    return SchedulerSummary(name, kind, source, exit_code, busyness=float(values.get("busyness", 0.0)),
                            conflict_fraction=counts["conflicts"] / commits if commits else 0.0, **counts)


def describe_cell(summary: DemoSummary, store: Store, keys: CellKeys, now: float) -> None:
    """Fill in utilization, pending queues, machines and task states from one sync of the cell."""
    replica = Replica(store, keys)
    try:
        replica.sync()
        frame = to_dict(build_frame(replica, now))
        states: Counter[str] = Counter()
        jobs = 0
        for entry in replica.jobs():
            jobs += 1
            states.update(entry.record.tasks)
    finally:
        replica.close()
    summary.machines_up, summary.machines_total = frame["machines_up"], frame["machines_total"]
    summary.utilization, summary.pending = frame["utilization"], frame["pending"]
    summary.gpu = frame.get("gpu")
    summary.jobs = jobs
    summary.tasks = {name: states.get(char, 0) for char, name in TASK_STATES.items()}


def check_dict(report: Report, shown: int = 20) -> dict:
    """The check report as data, with at most ``shown`` violations listed."""
    d = report.to_dict()
    d["violation_count"] = len(report.violations)
    d["violations"] = d["violations"][:shown]
    return d


SUMMARY_WIDTH = 80  # the text summary fits an 80-column terminal


def print_summary(summary: DemoSummary, out: TextIO) -> None:
    """The summary as text, no line wider than ``SUMMARY_WIDTH`` (long ones wrap, indented)."""
    def w(text: str) -> None:
        for line in text.splitlines():
            out.write(textwrap.fill(line, SUMMARY_WIDTH, subsequent_indent="    ", break_on_hyphens=False,
                                    drop_whitespace=True) + "\n" if len(line) > SUMMARY_WIDTH else line + "\n")

    rows = summary.schedulers
    name_w = max([len("scheduler")] + [len(s.name) for s in rows]) + 1
    kind_w = max([len("kind")] + [len(s.kind) for s in rows]) + 1
    w(f"\n=== omega demo summary: cell {summary.cell!r}, {summary.seconds:.1f} s ===")
    w(f"{'scheduler':<{name_w}}{'kind':<{kind_w}}{'placed':>7}{'jobs':>6}{'txns':>7}{'commits':>8}{'confl':>6}"
      f"{'frac':>7}{'busy':>5} source")
    for s in rows:
        w(f"{s.name:<{name_w}}{s.kind:<{kind_w}}{s.tasks_placed:>7}{s.jobs_placed:>6}{s.txns:>7}{s.commits:>8}"
          f"{s.conflicts:>6}{s.conflict_fraction:>7.3f}{s.busyness:>5.0%} {s.source}")
    w(f"{'total':<{name_w + kind_w}}{summary.placements:>7}{'':>6}{summary.txns:>7}{'':>8}{summary.conflicts:>6}")
    if summary.conflicts:
        job = summary.job_conflicts
        w(f"conflicts by cause: machine {summary.conflicts - job}, job {job} ({job / summary.conflicts:.1%}; "
          f"job: only the job record changed)")
    w(f"machines up {summary.machines_up}/{summary.machines_total}; {summary.jobs} jobs")
    w("tasks " + ", ".join(f"{name} {n}" for name, n in summary.tasks.items()))
    for u in summary.utilization:
        if summary.gpu is not None and (u["name"] == GPU or device_index(u["name"]) is not None):
            continue  # the GPU line below has the gpu sum and the devices (--summary-json keeps each row)
        w(f"  {u['name']:<8} {u['fraction']:6.1%}  {amount(u['name'], u['allocated'])} / "
          f"{amount(u['name'], u['capacity'])}")
    g = summary.gpu
    if g is not None:
        w(f"  gpu devices {g['fraction']:6.1%}  {g['allocated'] / 1000:,.1f}/{g['devices']:,} GPUs on "
          f"{g['machines']:,} machines; {g['idle_devices']:,} devices idle, {g['partial_devices']:,} part-used "
          f"({g['partial_fraction']:.1%} of the idle GPU, usable by shares only)")
    for q in summary.pending:
        w(f"  pending {q['kind']:<8} {q['jobs']} jobs, {q['tasks']} tasks, oldest {q['oldest_wait_s']:.1f} s")
    for name in summary.failed_children:
        code = summary.children.get(name, {}).get("exit_code")
        w(f"  child {name} failed (exit {code}); see {summary.run_dir}/{name}.log")
    check = summary.check
    verdict = "clean" if check.get("ok") else f"{check.get('violation_count', '?')} violation(s)"
    w(f"invariant check at revision {check.get('revision')}: {verdict}")
    for v in check.get("violations", []):
        w(f"  {v['kind']:18} {v['key']}: {v['message']}")
    w(f"logs: {summary.run_dir}")
    out.flush()
