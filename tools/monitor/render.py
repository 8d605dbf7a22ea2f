"""Rich renderables of a ``MonitorFrame``: schedulers, utilization bars, pending queues, hot
machines and recent conflicts, stacked in one ``Group``."""

from __future__ import annotations

import time

from rich.console import Group
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from tools.monitor.model import MonitorFrame

BAR_WIDTH = 40


def render_frame(frame: MonitorFrame) -> Group:
    """The whole monitor screen for ``frame``."""
    parts = [header(frame)]
    line = quarantine_line(frame)
    if line is not None:
        parts.append(line)
    if frame.errors:
        parts.append(Text("\n".join(frame.errors), style="bold red"))
    parts += [SchedulerTable(frame), utilization_table(frame), pending_table(frame),
              hot_table(frame), conflict_table(frame)]
    return Group(*parts)


def header(frame: MonitorFrame) -> Text:
    return Text.assemble(("omega monitor", "bold"), f"  cell {frame.cell}  revision {frame.revision}  ",
                         f"machines up {frame.machines_up}/{frame.machines_total}  ", clock(frame.at))


def quarantine_line(frame: MonitorFrame) -> Text | None:
    """One line when bad values are quarantined: how many keys the monitor sees, and how many
    each scheduler that has some reports (None when there are none)."""
    reported = [(r.name, r.quarantined) for r in frame.schedulers if r.quarantined]
    if not frame.quarantined and not reported:
        return None
    text = f"quarantined: {frame.quarantined} bad value(s) in the cell, left out of decisions"
    if reported:
        text += "; schedulers report " + ", ".join(f"{name} {count}" for name, count in reported)
    return Text(text, style="bold yellow")


def clock(at: float, millis: bool = False) -> str:
    """Local wall-clock time of epoch ``at`` (HH:MM:SS[.mmm])."""
    stamp = time.strftime("%H:%M:%S", time.localtime(at))
    return f"{stamp}.{int(at * 1000) % 1000:03d}" if millis else stamp


WIDE = 110  # narrower consoles get the compact scheduler table (an 80-column terminal included)


class SchedulerTable:
    """The scheduler table, laid out for the console's width when rendered."""

    def __init__(self, frame: MonitorFrame):
        self.frame = frame

    def __rich_console__(self, console, options):
        yield scheduler_table(self.frame, compact=options.max_width < WIDE)


def scheduler_table(frame: MonitorFrame, compact: bool = False) -> Table:
    """One row per scheduler. ``compact`` (narrow consoles) keeps what tells the races apart:
    name, alive, placements/s, conflicts by cause (machine/job), conflict fraction, stale
    retries, busyness and p99 decision time."""
    def alive(r):
        return Text("●", "green") if r.alive else Text("✗", "red")

    columns = [  # (header, compact header or None to drop it when compact, justify, cell)
        ("scheduler", "scheduler", "left", lambda r: r.name),
        ("kind", None, "left", lambda r: r.kind),
        ("alive", "up", "center", alive),
        ("jobs/s", None, "right", lambda r: f"{r.jobs_per_s:.1f}"),
        ("placements/s", "place/s", "right", lambda r: f"{r.placements_per_s:.1f}"),
        ("txns", None, "right", lambda r: str(r.txns)),
        ("conflicts m/j", "confl m/j", "right", lambda r: f"{r.conflicts - r.job_conflicts}/{r.job_conflicts}"),
        ("conflict frac", "frac", "right",
         lambda r: Text(f"{r.conflict_fraction:.3f}", _severity(r.conflict_fraction, 0.1, 0.5))),
        ("stale", "stale", "right", lambda r: str(r.stale_retries)),
        ("retries", None, "right", lambda r: str(r.retries)),
        ("busy", "busy", "right", lambda r: Text(f"{r.busyness:.0%}", _severity(r.busyness, 0.5, 0.9))),
        ("p50 ms", None, "right", lambda r: f"{r.decision_ms_p50:.1f}"),
        ("p99 ms", "p99 ms", "right", lambda r: f"{r.decision_ms_p99:.1f}"),
    ]
    if compact:
        columns = [(short, short, justify, cell) for _, short, justify, cell in columns if short is not None]
    table = Table(title="schedulers", expand=True, title_justify="left")
    for name, _, justify, _ in columns:
        table.add_column(name, justify=justify, no_wrap=True)
    for r in frame.schedulers:
        table.add_row(*(cell(r) for _, _, _, cell in columns))
    if not frame.schedulers:
        table.add_row(Text("no live schedulers", "dim"), *[""] * (len(columns) - 1))
    return table


def _severity(value: float, warn: float, bad: float) -> str:
    return "red" if value >= bad else "yellow" if value >= warn else "green"


def utilization_table(frame: MonitorFrame) -> Table:
    table = Table(title=f"utilization (UP machines: {frame.machines_up})", expand=True, title_justify="left")
    table.add_column("resource", no_wrap=True)
    table.add_column("", ratio=1, min_width=BAR_WIDTH)
    table.add_column("used", justify="right", no_wrap=True)
    table.add_column("allocated / capacity", justify="right", no_wrap=True)
    for use in frame.utilization:
        bar = ProgressBar(total=max(use.capacity, 1), completed=min(use.allocated, max(use.capacity, 1)),
                          complete_style=_severity(use.fraction, 0.7, 0.9))
        table.add_row(use.name, bar, f"{use.fraction:.1%}",
                      f"{amount(use.name, use.allocated)} / {amount(use.name, use.capacity)}")
    return table


def amount(resource: str, value: int) -> str:
    """A resource amount in readable units: cpu millicores as cores, memory/disk MiB as GiB."""
    if resource == "cpu":
        return f"{value / 1000:,.1f} cores"
    if resource in ("memory", "disk"):
        return f"{value / 1024:,.1f} GiB"
    return f"{value:,}"


def pending_table(frame: MonitorFrame) -> Table:
    table = Table(title="pending", expand=True, title_justify="left")
    for name, justify in (("kind", "left"), ("jobs", "right"), ("tasks", "right"), ("oldest wait", "right")):
        table.add_column(name, justify=justify, no_wrap=True)
    for q in frame.pending:
        table.add_row(q.kind, str(q.jobs), str(q.tasks), duration(q.oldest_wait_s) if q.jobs else "-")
    return table


def duration(seconds: float) -> str:
    """``12.3s``, ``4m05s`` or ``2h03m``."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    return f"{minutes // 60}h{minutes % 60:02d}m"


def _counts(pairs) -> str:
    return ", ".join(f"{name or '?'}×{count}" for name, count in pairs)


def hot_table(frame: MonitorFrame) -> Table:
    table = Table(title="hottest machines (conflicts)", expand=True, title_justify="left")
    for name, justify in (("machine", "left"), ("conflicts", "right"), ("lost by", "left"), ("won by", "left")):
        table.add_column(name, justify=justify)
    for h in frame.hot_machines:
        table.add_row(h.machine, str(h.conflicts), _counts(h.losers), _counts(h.winners))
    if not frame.hot_machines:
        table.add_row(Text("no conflicts", "dim"), "", "", "")
    return table


def conflict_table(frame: MonitorFrame) -> Table:
    table = Table(title="recent conflicts (newest first)", expand=True, title_justify="left")
    for name in ("time", "scheduler", "job", "cause", "machine ← winner"):
        table.add_column(name)
    for c in frame.recent_conflicts:
        where = ", ".join(f"{m} ← {w or '?'}" for m, w in zip(c.machines, c.winners))
        table.add_row(clock(c.at, millis=True), c.scheduler, c.job, "machine" if c.machines else "job",
                      where or "(job record changed)")
    if not frame.recent_conflicts:
        table.add_row(Text("none", "dim"), "", "", "", "")
    return table

