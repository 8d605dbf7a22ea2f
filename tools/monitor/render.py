"""Rich renderables of a ``MonitorFrame``, laid out for the console it is drawn on.

One screen, top to bottom: a header line, errors and quarantine notes, utilization bars, the
GPU devices (when the cell has some), the pending queues, the scheduler table, the hottest machines and the recent conflicts. Every line
is fitted to the console's width: scheduler names are never cut (other columns are dropped
instead, least needed first), long lists become ``m1, m2, m3 +27``. With ``fit_height`` (the
live screen) the frame also fits the console's height: the hot-machine and conflict lists (and,
on a very small terminal, the schedulers) are shortened and their titles say how many rows
were left out. Below ``WIDE`` columns the narrow column set is used (an 80×24 terminal shows
every section).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass
from typing import Callable

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.text import Text

from cellstate.devices import GPU, MILLI, device_index
from tools.monitor.model import MonitorFrame, SchedulerRow, WindowRate
from tools.printable import printable

WIDE = 110  # consoles this wide get the wide column set and utilization with amounts
ERROR_LINES = 3  # at most this many error lines (the last says how many more there are)
SPARKS = "▁▂▃▄▅▆▇█"
SPARK_LEVELS = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0)  # a fraction above level i draws SPARKS[i + 1]


def render_frame(frame: MonitorFrame, fit_height: bool = False) -> Screen:
    """The monitor screen for ``frame``; ``fit_height``: no taller than the console."""
    return Screen(frame, fit_height)


class Screen:
    """The frame laid out when rendered, for the console's width (and height, if asked)."""

    def __init__(self, frame: MonitorFrame, fit_height: bool = False):
        self.frame = frame
        self.fit_height = fit_height

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        height = (options.height or options.size.height) if self.fit_height else None
        yield Group(*screen_lines(self.frame, options.max_width, height))


def screen_lines(frame: MonitorFrame, width: int, height: int | None = None) -> list[Text]:
    """The screen as lines of at most ``width`` cells, at most ``height`` of them (None: all)."""
    wide = width >= WIDE
    top = [header(frame, width)]
    top += error_lines(frame, width)
    top += utilization_lines(frame, width, wide)
    top += gpu_lines(frame, width, wide)
    top += pending_lines(frame, width)
    schedulers = scheduler_lines(frame, width, wide)  # title + header + one per scheduler
    hot_all, conflicts_all = hot_lines(frame, width), conflict_lines(frame, width, wide)
    if height is None:
        lines = top + schedulers + _titled("hot machines", "conflicts, lost by ← won by", hot_all, 0, width) \
            + _titled("recent conflicts", "newest first", conflicts_all, 0, width)
        return [_fit(line, width) for line in lines]
    room = height - len(top)
    n_sched = len(schedulers) - 2
    # schedulers first (at least one row), then hot machines and conflicts share what is left
    sched_rows = min(n_sched, max(1, room - 2 - 2))  # keep 2 lines for the two section titles
    shown_sched = schedulers[:2 + sched_rows]
    if sched_rows < n_sched:
        shown_sched[0] = _fit(Text.assemble(shown_sched[0], (f"  +{n_sched - sched_rows} more not shown", "yellow")),
                              width)
    room -= len(shown_sched) + 2
    hot_rows, conflict_rows = _share(max(0, room), len(hot_all), len(conflicts_all))
    lines = top + shown_sched
    lines += _titled("hot machines", "conflicts, lost by ← won by", hot_all, len(hot_all) - hot_rows, width)
    lines += _titled("recent conflicts", "newest first", conflicts_all, len(conflicts_all) - conflict_rows, width)
    lines = [_fit(line, width) for line in lines]
    if len(lines) > height:  # a terminal smaller than the fixed part: cut, and say so
        cut = len(lines) - height + 1
        lines = lines[:height - 1] + [_fit(Text(f"… {cut} more line(s): terminal too small", "yellow"), width)]
    return lines


def _share(room: int, hot: int, conflicts: int) -> tuple[int, int]:
    """Rows for the hot machines and the recent conflicts in ``room`` lines: about a third
    to the hot machines, the rest to the conflicts, and what one does not need to the other."""
    hot_rows = min(hot, max(1 if room >= 2 else 0, room // 3))
    conflict_rows = min(conflicts, room - hot_rows)
    hot_rows = min(hot, room - conflict_rows)
    return max(0, hot_rows), max(0, conflict_rows)


def _titled(title: str, what: str, rows: list[Text], left_out: int, width: int) -> list[Text]:
    """A section: its title line (saying how many rows are left out) and its shown rows."""
    shown = rows[:len(rows) - left_out] if left_out else rows
    line = Text.assemble((title, "bold"), f" ({what})" if rows else ": none")
    if left_out:
        line.append(f"  +{left_out} more not shown", "yellow")
    return [_fit(line, width)] + shown


def _fit(text: Text, width: int) -> Text:
    """``text`` on one line, cut to ``width`` cells with an ellipsis."""
    text = text.copy()
    text.no_wrap = True
    text.overflow = "ellipsis"
    text.truncate(width, overflow="ellipsis")
    return text


def header(frame: MonitorFrame, width: int) -> Text:
    return _fit(Text.assemble(("omega monitor", "bold"), f"  cell {frame.cell}  revision {frame.revision}  ",
                              f"machines up {frame.machines_up}/{frame.machines_total}  ", clock(frame.at)), width)


def error_lines(frame: MonitorFrame, width: int) -> list[Text]:
    """The quarantine note (wrapped, at most two lines) and at most ``ERROR_LINES`` error lines."""
    lines = []
    note = quarantine_line(frame)
    if note is not None:
        lines += note.wrap(Console(width=width), width)[:2]
    errors = list(frame.errors)
    if len(errors) > ERROR_LINES:
        errors = errors[:ERROR_LINES - 1] + [f"… {len(errors) - ERROR_LINES + 1} more error(s) (omega monitor -o json)"]
    lines += [Text(e, "bold red") for e in errors]
    return [_fit(line, width) for line in lines]


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


# -- utilization and pending -------------------------------------------------------------------


def _severity(value: float, warn: float, bad: float) -> str:
    return "red" if value >= bad else "yellow" if value >= warn else "green"


def bar(fraction: float, cells: int) -> Text:
    """A bar of ``cells`` cells filled to ``fraction`` (0..1), coloured by how full it is."""
    filled = max(0, min(cells, round(fraction * cells)))
    return Text.assemble(("█" * filled, _severity(fraction, 0.7, 0.9)), ("░" * (cells - filled), "dim"))


def amount(resource: str, value: int) -> str:
    """A resource amount in readable units: cpu millicores as cores, memory/disk MiB as GiB,
    ``gpu`` milli as GPUs; other resources as stored."""
    if resource == "cpu":
        return f"{value / 1000:,.1f} cores"
    if resource == GPU:
        return f"{value / MILLI:,.1f} GPUs"
    if resource in ("memory", "disk"):
        return f"{value / 1024:,.1f} GiB"
    return f"{value:,}"


def utilization_lines(frame: MonitorFrame, width: int, wide: bool) -> list[Text]:
    """Per resource: a bar and the used share (wide: one line each, with allocated / capacity;
    narrow: as many resources to a line as fit). When the cell has GPU devices, the ``gpu`` sum
    and the devices (``gpu.<i>``) are left to the GPU line (``gpu_lines``), which shows the same
    share and more."""
    shown = [u for u in frame.utilization if device_index(u.name) is None and (frame.gpu is None or u.name != GPU)]
    if wide:
        name_w = max((len(u.name) for u in shown), default=0)
        return [Text.assemble(f"{u.name:<{name_w}} ", bar(u.fraction, 40), f" {u.fraction:6.1%}  ",
                              f"{amount(u.name, u.allocated)} / {amount(u.name, u.capacity)}")
                for u in shown]
    pieces = [Text.assemble(f"{u.name} ", bar(u.fraction, 10), f" {u.fraction:.0%}") for u in shown]
    return _pack(pieces, width, "   ")


def gpu_lines(frame: MonitorFrame, width: int, wide: bool) -> list[Text]:
    """One line when the cell has GPU devices: GPUs allocated / total, idle devices, and the
    partly allocated devices with the share of the idle GPU on them (only shares can use it)."""
    g = frame.gpu
    if g is None:
        return []
    used = f"{g.allocated / 1000:,.1f}/{g.devices:,}"
    if wide:
        part = Text(f"{g.partial_devices:,} part-used ({g.partial_fraction:.1%} of the idle GPU, usable by shares only)",
                    _severity(g.partial_fraction, 0.1, 0.3))
        line = Text.assemble(f"{'gpu devices':<12}", bar(g.fraction, 40), f" {g.fraction:6.1%}  {used} GPUs on "
                             f"{g.machines:,} machines;  {g.idle_devices:,} devices idle, ", part)
    else:
        part = Text(f"part-used {g.partial_devices:,} ({g.partial_fraction:.0%} of idle)",
                    _severity(g.partial_fraction, 0.1, 0.3))
        line = Text.assemble(("gpus", "bold"), f" {used} ({g.fraction:.0%})  idle devs {g.idle_devices:,}  ", part)
    return [_fit(line, width)]


def pending_lines(frame: MonitorFrame, width: int) -> list[Text]:
    """The pending queues, packed: ``batch 3 jobs/120 tasks, oldest 4.2s``."""
    pieces = [Text.assemble(("pending", "bold"))]
    for q in frame.pending:
        if q.jobs:
            pieces.append(Text.assemble((f"{q.kind} {q.jobs} jobs/{q.tasks} tasks, oldest {duration(q.oldest_wait_s)}",
                                         _severity(q.oldest_wait_s, 10, 60))))
        else:
            pieces.append(Text.assemble((f"{q.kind} none", "dim")))
    return _pack(pieces, width, "  ")


def _pack(pieces: list[Text], width: int, sep: str) -> list[Text]:
    """``pieces`` joined by ``sep`` into as few lines of at most ``width`` cells as they fit."""
    lines: list[Text] = []
    for piece in pieces:
        if lines and lines[-1].cell_len + len(sep) + piece.cell_len <= width:
            lines[-1].append(sep)
            lines[-1].append_text(piece)
        else:
            lines.append(piece.copy())
    return lines


def duration(seconds: float) -> str:
    """``12.3s``, ``4m05s`` or ``2h03m``."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    return f"{minutes // 60}h{minutes % 60:02d}m"


# -- schedulers ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SchedulerColumn:
    """A scheduler-table column: ``drop`` orders what goes first when the table is too wide
    (0: never), ``wide_only`` columns show only on wide consoles."""

    header: str
    cell: Callable[[SchedulerRow], Text | str]
    right: bool = True
    drop: int = 0
    wide_only: bool = False


def _fraction_text(value: float | None) -> Text:
    if value is None:
        return Text("-", "dim")
    if value == math.inf:
        return Text("∞", "red")
    return Text(f"{value:.3f}", _severity(value, 0.1, 0.5))


def _window(w: WindowRate | None) -> Text:
    return _fraction_text(w.fraction if w is not None else None)


def spark(w: WindowRate | None) -> Text:
    """One cell of the trend: the window's conflict fraction on a log scale (``SPARK_LEVELS``);
    ``·`` idle or before the monitor's first sample."""
    f = w.fraction if w is not None else None
    if f is None:
        return Text("·", "dim")
    level = sum(f > threshold for threshold in SPARK_LEVELS)
    return Text(SPARKS[level], _severity(f, 0.1, 0.5))


def arrow(r: SchedulerRow) -> Text:
    """↑ when the last 10 s conflict more than the last minute, ↓ when less, → about the same."""
    if r.recent is None or r.minute is None or r.recent.fraction is None or r.minute.fraction is None:
        return Text(" ")
    now, before = r.recent.fraction, r.minute.fraction
    if now > before * 1.25 + 0.002:
        return Text("↑", "red")
    if now < before * 0.8 - 0.002:
        return Text("↓", "green")
    return Text("→", "dim")


def trend(r: SchedulerRow) -> Text:
    return Text.assemble(*(spark(w) for w in r.trend), arrow(r)) if r.trend else Text("-", "dim")


COLUMNS = (
    SchedulerColumn("scheduler", lambda r: r.name, right=False),
    SchedulerColumn("kind", lambda r: r.kind, right=False, drop=8, wide_only=True),
    SchedulerColumn("up", lambda r: Text("●", "green") if r.alive else Text("✗", "red"), right=False, drop=7),
    SchedulerColumn("jobs/s", lambda r: f"{r.jobs_per_s:.1f}", drop=9, wide_only=True),
    SchedulerColumn("place/s", lambda r: f"{r.placements_per_s:.1f}", drop=4),
    SchedulerColumn("txns", lambda r: str(r.txns), drop=10, wide_only=True),
    SchedulerColumn("confl m/j", lambda r: f"{r.conflicts - r.job_conflicts}/{r.job_conflicts}"),
    SchedulerColumn("frac", lambda r: _fraction_text(r.conflict_fraction), drop=3),
    SchedulerColumn("10s", lambda r: _window(r.recent)),
    SchedulerColumn("60s", lambda r: _window(r.minute), drop=2),
    SchedulerColumn("trend", trend, right=False, drop=1),
    SchedulerColumn("stale", lambda r: str(r.stale_retries), drop=6),
    SchedulerColumn("retries", lambda r: str(r.retries), drop=11, wide_only=True),
    SchedulerColumn("busy", lambda r: Text(f"{r.busyness:.0%}", _severity(r.busyness, 0.5, 0.9)), drop=5),
    SchedulerColumn("p50 ms", lambda r: f"{r.decision_ms_p50:.1f}", drop=12, wide_only=True),
    SchedulerColumn("p99 ms", lambda r: f"{r.decision_ms_p99:.1f}", drop=5),
)


def scheduler_columns(rows: tuple[SchedulerRow, ...], width: int, wide: bool) -> tuple[list[SchedulerColumn], list[int], int]:
    """The columns that fit ``width`` (dropping the highest ``drop`` first), their widths, the gap."""
    columns = [c for c in COLUMNS if wide or not c.wide_only]
    cells = {c.header: [_text(c.cell(r)) for r in rows] for c in columns}

    def widths(cols):
        return [max([len(c.header)] + [t.cell_len for t in cells[c.header]]) for c in cols]

    while True:
        w = widths(columns)
        for gap in (2, 1):
            if sum(w) + gap * (len(columns) - 1) <= width:
                return columns, w, gap
        droppable = [c for c in columns if c.drop]
        if not droppable:
            return columns, w, 1
        columns.remove(max(droppable, key=lambda c: c.drop))


def _text(cell: Text | str) -> Text:
    return cell if isinstance(cell, Text) else Text(cell)


def scheduler_lines(frame: MonitorFrame, width: int, wide: bool) -> list[Text]:
    """Title, column header, one line per scheduler (names whole: columns go first)."""
    title = Text.assemble(("schedulers", "bold"), "  frac = conflicts/commit; 10s, 60s windows; trend in 10 s steps")
    if not frame.schedulers:
        return [title, Text("no live schedulers", "dim")]
    columns, widths, gap = scheduler_columns(frame.schedulers, width, wide)
    head = _row([Text(c.header, "bold") for c in columns], columns, widths, gap)
    return [title, head] + [_row([_text(c.cell(r)) for c in columns], columns, widths, gap) for r in frame.schedulers]


def _row(cells: list[Text], columns: list[SchedulerColumn], widths: list[int], gap: int) -> Text:
    line = Text()
    for i, (cell, column, w) in enumerate(zip(cells, columns, widths)):
        if i:
            line.append(" " * gap)
        pad = " " * max(0, w - cell.cell_len)
        if column.right:
            line.append(pad)
            line.append_text(cell)
        else:
            line.append_text(cell)
            if i < len(columns) - 1:
                line.append(pad)
    return line


# -- hot machines and recent conflicts ----------------------------------------------------------


def elide(names: list[str], room: int, sep: str = ", ") -> str:
    """``names`` joined, as many as fit in ``room`` cells, the rest counted: ``m1, m2 +27``
    (at least one name is shown)."""
    for shown in range(len(names), 0, -1):
        text = sep.join(names[:shown])
        rest = len(names) - shown
        if rest:
            text += f" +{rest}"
        if len(text) <= room or shown == 1:
            return text
    return ""


def _counts(pairs) -> list[str]:
    return [f"{name or '?'}×{count}" for name, count in pairs]


def hot_lines(frame: MonitorFrame, width: int) -> list[Text]:
    """One line per hot machine: conflicts there, who lost (count) ← who won (count)."""
    if not frame.hot_machines:
        return []
    name_w = max(len(h.machine) for h in frame.hot_machines)
    count_w = max(len(str(h.conflicts)) for h in frame.hot_machines)
    lines = []
    for h in frame.hot_machines:
        room = width - name_w - count_w - 2 - 4  # the " ← " between the two lists
        losers = elide(_counts(h.losers), max(8, room // 2))
        winners = elide(_counts(h.winners), max(8, room - len(losers)))
        lines.append(Text.assemble(f"{h.machine:<{name_w}} ", (f"{h.conflicts:>{count_w}}", "bold"),
                                   f"  {losers} ← {winners}"))
    return lines


def conflict_lines(frame: MonitorFrame, width: int, wide: bool) -> list[Text]:
    """One line per recent conflict: time, scheduler, job, cause, and for a machine conflict
    the machines (elided) ← the winners with counts."""
    rows = frame.recent_conflicts
    if not rows:
        return []
    sched_w = max(len(c.scheduler) for c in rows)
    job_w = max(len(printable(c.job)) for c in rows)
    lines = []
    for c in rows:
        stamp = clock(c.at, millis=wide)
        start = Text.assemble(f"{stamp} {c.scheduler:<{sched_w}} {printable(c.job):<{job_w}} ",
                              (f"{c.cause:<7}", "yellow" if c.cause == "machine" else "magenta"), " ")
        if not c.machines:
            lines.append(Text.assemble(start, ("the job record changed", "dim")))
            continue
        winners = elide(_counts(Counter(w or "?" for w in c.winners).most_common()), 24)
        room = width - start.cell_len - len(winners) - 3
        lines.append(Text.assemble(start, elide(list(c.machines), max(6, room)), " ← ", winners))
    return lines
