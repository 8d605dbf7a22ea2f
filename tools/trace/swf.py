"""Import a Standard Workload Format (SWF v2.2) log into an omega trace.

Each job line becomes one rigid gang job (all tasks or none) submitted at ``submit_s``
(trace time = SWF time): ``req_procs`` tasks (``alloc_procs`` when req_procs is -1 or 0) of one
processor each (1000 millicores; memory = ``req_mem_KB`` per processor rounded up to MiB,
0 when unknown), running ``run_s`` seconds, with ``estimate_s`` = ``req_time_s`` (the user's
requested time, field 9: what a backfilling scheduler plans with; ``run_s`` when -1). The cell has
one machine per node (``node_shape``: header ``MaxNodes`` machines of ``MaxProcs / MaxNodes``
processors each when that is whole, else one machine per processor, ``MaxProcs``): 1000 millicores
a processor and ``node_memory_mib`` (default 1024 MiB a processor: SWF headers carry no node
memory). Lines need not be in submit order (logs written by simulators are not): the jobs are
submitted in time order, and the lines out of order are counted (``SWFStats.unsorted``). Status serves
only to leave out what never ran or is a part of a job (below); queue and the other fields are not
used.

``-1`` is the format's "unknown" in any field. Where the importer can assume something it does, and
counts each assumption per field (``SWFStats.assumed``, ``ASSUMPTIONS`` says what is assumed): the
row is kept. A row that cannot become a job even so (unknown submit time, no processor count (-1 or
0: a job cancelled before it got any), no run time nor requested time, a job cancelled (status 5)
before it started (run_s and alloc_procs -1 or 0), a partial execution of a checkpointed job (status
2, 3, 4: its summary line is the job)) is valid SWF, so it is skipped and counted
(``SWFStats.unusable``) without ``--skip-bad``; a malformed row (field count, not
a number, a negative value other than -1, a job number an earlier row has) stays an error unless
``skip_bad``.
"""

from __future__ import annotations

import gzip
import math
import os
import re
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from cellstate.codec.records import MAX_TASKS
from cellstate.model import Job, JobKind, Machine
from cellstate.resources import Resources
from tools.trace.events import JobSubmit, MachineAdd
from tools.trace.format import TraceHeader, TraceWriter
from tools.trace.header import GZIP_MAGIC
from tools.trace.progress import progress
from tools.trace.truth import GroundTruth

IMPORTER_REVISION = 5
"""Bumped when the same lines import differently (2: the same events, and the ground truth: each
job's logged wait, ``tools.trace.truth``, format version 3; 3: ``-1`` (unknown) accepted where
something can be assumed, rows that cannot be used skipped and counted, the counts in the header's
notes; 4: each job's requested time as its ``estimate_s``; 5: MaxProcs / MaxNodes processors a
machine, lines out of submit order sorted, a processor count of 0 unusable, a job asking for more
processors than the cell has but allocated fewer imported with its ``alloc_procs``, jobs cancelled
before they started and partial executions (status 2-4) unusable). In each trace's header notes."""

NODE_CPU = 1000
DEFAULT_NODE_MEMORY_MIB = 1024
MAX_NODES = 1_000_000
MAX_MEMORY_KB = 1024 * (2**63 - 1)  # the request in MiB must fit a msgpack int64
FIELDS = ("job", "submit_s", "wait_s", "run_s", "alloc_procs", "avg_cpu_s", "used_mem_KB", "req_procs",
          "req_time_s", "req_mem_KB", "status", "user", "group", "app", "queue", "partition", "prev_job",
          "think_s")
UNKNOWN = -1.0
ASSUMPTIONS = {
    "run_s": "unknown run time: the requested time req_time_s (the user's upper bound)",
    "req_time_s": "unknown requested time: the run time run_s as the job's estimate (a perfect one)",
    "req_procs": "unknown (or 0) requested processors: the allocated alloc_procs",
    "req_mem_KB": "unknown requested memory: 0 MiB per task (only cpu counts)",
    "wait_s": "unknown wait: the job is left out of the ground truth",
    "user": "unknown user: no owner",
}
"""What the importer assumes for a field logged as -1, per field (the only fields it uses that may be
unknown; ``job`` must be known; the others are not used, so their -1 needs no assumption)."""
PARTIAL_STATUSES = (2.0, 3.0, 4.0)
"""Status of a line recording one part of a checkpointed or swapped job (SWF 2.2): the job's summary line
has its number too."""
CANCELLED = 5.0
_HEADER_LINE = re.compile(r";\s*(\w+):\s*(.*?)\s*$")


class SWFError(ValueError):
    """A bad SWF line or header; names the file and line number."""


class SWFNotText(SWFError):
    """A job line that is not UTF-8 text (not a bad line ``skip_bad`` skips: the file is not an SWF log)."""


class SWFUnusable(SWFError):
    """A valid SWF line that cannot become a job (a field it needs is -1 with nothing to assume, or
    what it records never ran as a job); ``kind`` says which, in a few words."""

    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.kind = kind


@dataclass
class SWFStats:
    jobs: int = 0
    machines: int = 0
    bad_lines: list[tuple[int, str]] = field(default_factory=list)  # (line number, why), with skip_bad
    unusable: list[tuple[int, str]] = field(default_factory=list)  # (line number, why): valid, unusable
    unusable_kinds: dict[str, int] = field(default_factory=dict)  # SWFUnusable.kind -> rows
    assumed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ASSUMPTIONS, 0))  # per field
    wider: list[tuple[int, str, int]] = field(default_factory=list)
    """(line number, job id, tasks) of the jobs imported with more tasks than the cell has machines:
    a gang that can never be placed (the log's machine ran it; this cell, with --nodes, cannot)."""
    bigger: list[tuple[int, str, int]] = field(default_factory=list)
    """(line number, job id, MiB) of the jobs imported whose task asks for more memory than a machine has."""
    narrowed: list[tuple[int, str, int, int]] = field(default_factory=list)
    """(line number, job id, req_procs, alloc_procs) of the jobs that asked for more processors than the
    cell has but ran on fewer: imported with their ``alloc_procs``."""
    processors: int = 0  # the cell's processors: machines x processors a machine
    logged_waits: int = 0  # jobs in the ground truth (a known wait_s); none: the trace has no ground truth
    unsorted: int = 0
    """Job lines submitted before an earlier line (kept, and submitted in time order)."""
    first_unsorted: tuple[int, float, float] | None = None  # (line number, its submit, the latest before it)

    def warnings(self, path: str) -> list[str]:
        """One line per kind of imported job that can never be placed, counted, with the first."""
        lines = []
        if self.wider:
            number, job, tasks = self.wider[0]
            lines.append(f"{path}: {len(self.wider):,} job(s) wider than the cell (more tasks than its "
                         f"{self.processors:,} processors; first: line {number}, job {job}, {tasks:,} tasks): "
                         "imported, but no scheduler can place them")
        if self.narrowed:
            number, job, asked, ran = self.narrowed[0]
            lines.append(f"{path}: {len(self.narrowed):,} job(s) asked for more processors than the cell's "
                         f"{self.processors:,} but ran on fewer: imported with their alloc_procs (first: line "
                         f"{number}, job {job}, req_procs {asked:,}, alloc_procs {ran:,})")
        if self.first_unsorted is not None:
            number, t, latest = self.first_unsorted
            lines.append(f"{path}: {self.unsorted:,} job line(s) out of submit order (first: line {number}, submit "
                         f"{t:g} after {latest:g}): imported, submitted in time order")
        if self.bigger:
            number, job, mib = self.bigger[0]
            lines.append(f"{path}: {len(self.bigger):,} job(s) whose tasks ask for more memory than a machine "
                         f"has (first: line {number}, job {job}, {mib:,} MiB per task): imported, but no "
                         "scheduler can place them")
        return lines

    def summary(self) -> str:
        """One line: each field's assumption count (every field, zero or not) and the rows left out."""
        assumed = ", ".join(f"{name} {n:,}" for name, n in self.assumed.items())
        unsorted = ""
        if self.first_unsorted is not None:
            number, t, latest = self.first_unsorted
            unsorted = f" (first: line {number}, submit {t:g} after {latest:g})"
        kinds = ", ".join(f"{kind} {n:,}" for kind, n in self.unusable_kinds.items())
        return (f"unknown (-1) fields assumed: {assumed}; unusable rows skipped: {len(self.unusable):,}"
                f"{f' ({kinds})' if kinds else ''}; "
                f"bad rows skipped: {len(self.bad_lines):,}; rows out of submit order, sorted: "
                f"{self.unsorted:,}{unsorted}; wider than the cell, alloc_procs taken: {len(self.narrowed):,}")


@contextmanager
def _open(path: str):
    """The lines of an SWF log, gzip or plain whatever its name says (by its first bytes); SWFError
    naming the file for a cut or corrupt gzip stream, SWFNotText naming the line for a job line that
    is not UTF-8 (a comment's bytes are read as Latin-1: only shown); a leading byte-order mark is
    dropped."""
    with open(path, "rb") as raw:
        gz = raw.read(2) == GZIP_MAGIC
    with gzip.open(path, "rb") if gz else open(path, "rb") as f:
        yield _lines(path, f)


def _lines(path: str, f):
    number = 0
    try:
        for number, raw in enumerate(f, 1):  # noqa: B007 (read by the except clause)
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                if not raw.lstrip().startswith(b";"):
                    raise SWFNotText(f"{path}: line {number}: not UTF-8 text ({exc.reason} at byte {exc.start}): "
                                     "is this an SWF log?") from None
                line = raw.decode("latin-1")
            yield line.removeprefix("\ufeff") if number == 1 else line
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise SWFError(f"{path}: cut or corrupt after {number:,} lines ({exc})") from None


def read_header(path: str) -> dict[str, str]:
    """The ``; Name: value`` header fields before the first job line."""
    header = {}
    with _open(path) as f:
        for line in f:
            if not line.startswith(";"):
                if line.strip():
                    break
                continue
            match = _HEADER_LINE.match(line)
            if match and match.group(2):
                header[match.group(1)] = match.group(2)
    return header


def node_shape(path: str, header: dict[str, str], nodes: int | None = None) -> tuple[int, int]:
    """(machines, processors a machine): ``MaxNodes`` machines of ``MaxProcs / MaxNodes`` processors
    when both are given and that is whole (SMP nodes: 2 a node on HPC2N), else ``MaxProcs`` machines of
    one (the processors, which jobs count, when the nodes differ), else ``MaxNodes`` of one. ``nodes``
    (``--nodes``) overrides the machine count, keeping the header's processors a machine. SWFError
    when the header gives neither and ``nodes`` is None."""
    sizes = {name: int(header[name]) for name in ("MaxNodes", "MaxProcs")
             if header.get(name, "").isdecimal() and int(header[name]) > 0}
    node, procs = sizes.get("MaxNodes"), sizes.get("MaxProcs")
    if procs:
        checked_nodes(path, procs, "MaxProcs")  # (bounds the processors a machine too)
    per_node = procs // node if node and procs and procs % node == 0 else 1
    if nodes is not None:
        return checked_nodes(path, nodes), per_node
    if node and procs:
        return (checked_nodes(path, node, "MaxNodes"), per_node) if procs % node == 0 else \
            (checked_nodes(path, procs, "MaxProcs"), 1)
    if node or procs:
        return checked_nodes(path, node or procs, "MaxNodes" if node else "MaxProcs"), 1
    raise SWFError(f"{path}: header has no positive MaxNodes or MaxProcs (give --nodes)")


def node_count(path: str, header: dict[str, str]) -> int:
    """Machines in the cell from the header alone (``node_shape``)."""
    return node_shape(path, header)[0]


def checked_nodes(path: str, nodes: int, source: str = "--nodes") -> int:
    """``nodes`` if it is 1..MAX_NODES; SWFError naming where it came from otherwise."""
    if not 1 <= nodes <= MAX_NODES:
        raise SWFError(f"{path}: {source} must be between 1 and {MAX_NODES:,}, got {nodes}")
    return nodes


def parse_job(line: str, number: int, path: str, waits: dict | None = None,
              assumed: dict | None = None, allocated: dict | None = None) -> JobSubmit:
    """The job_submit of one SWF job line; SWFError naming the line and the field (SWFUnusable when
    the line is valid but a field it needs is unknown). With ``waits``, the job's logged wait (field
    3, None when -1: unknown) is stored under its id; with ``assumed``, each field whose -1 was
    replaced by an assumption (``ASSUMPTIONS``) is counted there; with ``allocated``, the job's
    ``alloc_procs`` (-1: unknown) is stored under its id."""
    parts = line.split()
    if len(parts) != len(FIELDS):
        raise SWFError(f"{path}: line {number}: expected {len(FIELDS)} fields, got {len(parts)}")
    values = {}
    for name, text in zip(FIELDS, parts):
        try:
            values[name] = float(text)
        except ValueError:
            raise SWFError(f"{path}: line {number}: field {name}: not a number: {text!r}") from None
        if not math.isfinite(values[name]):
            raise SWFError(f"{path}: line {number}: field {name}: not finite: {text!r}")
    unknown = [name for name in ASSUMPTIONS
               if values[name] == UNKNOWN or (name == "req_procs" and values[name] == 0)]
    if values["submit_s"] == UNKNOWN:
        raise SWFUnusable(f"{path}: line {number}: field submit_s: unknown (-1): no submit time", "no submit time")
    if values["status"] in PARTIAL_STATUSES:
        raise SWFUnusable(f"{path}: line {number}: field status: {values['status']:g}: a partial execution of job "
                          f"{values['job']:g} (its summary line, status 0, 1 or 5, is the job)", "partial execution")
    if values["status"] == CANCELLED and values["run_s"] in (UNKNOWN, 0) and values["alloc_procs"] in (UNKNOWN, 0):
        raise SWFUnusable(f"{path}: line {number}: field status: 5 (cancelled) with run_s {values['run_s']:g} and "
                          f"alloc_procs {values['alloc_procs']:g}: cancelled before it started",
                          "cancelled before it started")
    if values["req_procs"] == UNKNOWN and values["alloc_procs"] == UNKNOWN:
        raise SWFUnusable(f"{path}: line {number}: field req_procs: unknown (-1), and alloc_procs too: "
                          "no processor count", "no processor")
    if values["req_procs"] in (UNKNOWN, 0) and values["alloc_procs"] in (UNKNOWN, 0):
        raise SWFUnusable(f"{path}: line {number}: field req_procs: {values['req_procs']:g}, alloc_procs "
                          f"{values['alloc_procs']:g}: no processor (a job that never got one)", "no processor")
    run = values["run_s"]
    if run == UNKNOWN:
        if values["req_time_s"] == UNKNOWN:
            raise SWFUnusable(f"{path}: line {number}: field run_s: unknown (-1), and req_time_s too: "
                              "no run time", "no run time")
        run = values["req_time_s"]
    procs = values["req_procs"] if values["req_procs"] not in (UNKNOWN, 0) else values["alloc_procs"]
    estimate = values["req_time_s"] if values["req_time_s"] != UNKNOWN else run
    checks = (("job", values["job"] >= 0), ("submit_s", values["submit_s"] >= 0),
              ("run_s", run >= 0), ("req_time_s", estimate >= 0),
              ("req_procs", 1 <= procs <= MAX_TASKS and procs == int(procs)),
              ("req_mem_KB", values["req_mem_KB"] <= MAX_MEMORY_KB))
    for name, ok in checks:
        if not ok:
            shown = (f"{procs:g} (req_procs/alloc_procs)" if name == "req_procs" else
                     f"{run:g} (req_time_s for an unknown run_s)" if name == "run_s" and run != values[name]
                     else f"{values[name]:g}")
            raise SWFError(f"{path}: line {number}: field {name}: invalid value {shown}")
    memory = math.ceil(values["req_mem_KB"] / 1024) if values["req_mem_KB"] > 0 else 0
    user = int(values["user"])
    job = Job(id=f"j{int(values['job'])}", kind=JobKind.BATCH, tasks=int(procs),
              request=Resources(NODE_CPU, memory), owner=f"u{user}" if user >= 0 else "",
              duration_s=run, gang=True, estimate_s=estimate)
    if assumed is not None:
        for name in unknown:
            assumed[name] += 1
    if waits is not None:
        waits[job.id] = values["wait_s"] if values["wait_s"] >= 0 else None
    if allocated is not None:
        allocated[job.id] = values["alloc_procs"]
    return JobSubmit(values["submit_s"], job)


def swf_events(path: str, nodes: int, node_memory_mib: int, stats: SWFStats, skip_bad: bool = False,
               waits: dict | None = None, per_node: int = 1):
    """machine_add for each node (``per_node`` processors) at t = 0, then a job_submit per valid job
    line in file order (with ``waits``: each job's logged wait, ``parse_job``); the lines submitted
    before an earlier one are counted in ``stats.unsorted`` (``sorted_events`` puts them in order)."""
    for i in range(nodes):
        yield MachineAdd(0.0, Machine(id=f"n{i}", capacity=Resources(NODE_CPU * per_node, node_memory_mib)))
    stats.machines, stats.processors = nodes, nodes * per_node
    last = 0.0
    wait = {} if waits is not None else None  # the line's wait, kept once the line is
    assumed = dict.fromkeys(ASSUMPTIONS, 0)  # the line's assumptions, counted once the line is kept
    seen: dict[str, int] = {}  # job id -> its line
    allocated: dict[str, float] = {}  # the line's alloc_procs
    with _open(path) as f, progress("import swf") as advance:
        for number, line in enumerate(f, 1):
            if line.startswith(";") or not line.strip():
                continue
            try:
                event = parse_job(line, number, path, wait, assumed, allocated)
                if event.job.id in seen:
                    raise SWFError(f"{path}: line {number}: field job: job number {event.job.id[1:]} repeats "
                                   f"line {seen[event.job.id]}'s")
            except SWFError as exc:
                if isinstance(exc, SWFUnusable):
                    stats.unusable.append((number, str(exc)))
                    stats.unusable_kinds[exc.kind] = stats.unusable_kinds.get(exc.kind, 0) + 1
                elif not skip_bad:
                    raise
                else:
                    stats.bad_lines.append((number, str(exc)))
                if wait:
                    wait.clear()
                allocated.clear()
                assumed = dict.fromkeys(ASSUMPTIONS, 0)
                continue
            if waits is not None:
                waits.update(wait)
                wait.clear()
            if any(assumed.values()):
                for name, n in assumed.items():
                    stats.assumed[name] += n
                assumed = dict.fromkeys(ASSUMPTIONS, 0)
            seen[event.job.id] = number
            if event.t < last:
                stats.unsorted += 1
                if stats.first_unsorted is None:
                    stats.first_unsorted = (number, event.t, last)
            last = max(last, event.t)
            stats.jobs += 1
            job, ran = event.job, allocated.pop(event.job.id)
            if job.tasks > stats.processors and 1 <= ran <= stats.processors and ran == int(ran):
                stats.narrowed.append((number, job.id, job.tasks, int(ran)))
                job = replace(job, tasks=int(ran))
                event = JobSubmit(event.t, job)
            if job.tasks > stats.processors:
                stats.wider.append((number, job.id, job.tasks))
            if job.request.memory > node_memory_mib:
                stats.bigger.append((number, job.id, job.request.memory))
            advance()
            yield event


def sorted_events(events, unsorted: bool):
    """``events`` in time order: as they come when ``unsorted`` is false, else all read and sorted
    (stably: lines submitted at one instant keep their order, the machines stay first)."""
    return sorted(events, key=lambda event: event.t) if unsorted else events


def ground_truth(path: str, nodes: int, skip_bad: bool, stats: SWFStats | None = None,
                 per_node: int = 1) -> GroundTruth:
    """Each valid job line's logged wait (field 3) as its submit → start delay (``unit="job"``:
    a gang starts whole); jobs whose wait is -1 (unknown) are left out; horizon: the last start.
    ``stats``: the pass's counts (the same as the import's)."""
    waits: dict[str, float | None] = {}
    submitted: dict[str, float] = {}
    for event in swf_events(path, nodes, 1, stats if stats is not None else SWFStats(), skip_bad, waits, per_node):
        if isinstance(event, JobSubmit):
            submitted[event.job.id] = event.t
    delays = {job: [wait] for job, wait in waits.items() if wait is not None and job in submitted}
    submitted = {job: t for job, t in submitted.items() if job in delays}
    horizon = max((submitted[job] + d[0] for job, d in delays.items()), default=0.0)
    notes = (f"swf ground truth (importer revision {IMPORTER_REVISION}): each job's logged wait_s (field 3) as "
             f"its submit -> start delay; {len(waits) - len(delays)} job(s) with an unknown wait (-1) left "
             "out; no occupancy")
    return GroundTruth("job", horizon, submitted, delays, None, notes)


def import_swf(path: str, out, skip_bad: bool = False, nodes: int | None = None,
               node_memory_mib: int | None = None) -> SWFStats:
    """Write the omega trace of an SWF log to ``out``; the counts (and skipped lines). Machines:
    ``node_shape``; ``node_memory_mib`` a machine (default 1024 MiB a processor). The trace has no
    ground truth when no job has a logged wait (a generated log: every wait_s -1). On an error
    nothing is written at ``out``."""
    header = read_header(path)
    nodes, per_node = node_shape(path, header, nodes)
    if node_memory_mib is None:
        node_memory_mib = DEFAULT_NODE_MEMORY_MIB * per_node
    survey = SWFStats()
    truth = ground_truth(path, nodes, skip_bad, survey, per_node)
    no_truth = "; no ground truth: no job has a logged wait_s" if not truth.delays else ""
    trace_header = TraceHeader(
        source=f"swf {path} ({header.get('Computer', '?')}, {header.get('Installation', '?')})",
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        capacity_model=f"swf: {nodes} machines, one per node, each {per_node} processor(s): {NODE_CPU * per_node} "
                       f"millicores and {node_memory_mib} MiB; a job = req_procs tasks of {NODE_CPU} millicores "
                       "as a gang",
        cell=os.path.basename(path).removesuffix(".gz").removesuffix(".swf"),
        notes=f"importer revision {IMPORTER_REVISION}; t = submit_s; duration_s = run_s; estimate_s = req_time_s; "
              f"skip_bad={skip_bad}; "
              f"{survey.summary()}{no_truth}")
    stats = SWFStats(logged_waits=len(truth.delays))
    with TraceWriter(out, trace_header, atomic=True, truth=truth if truth.delays else None) as writer:
        for event in sorted_events(swf_events(path, nodes, node_memory_mib, stats, skip_bad, per_node=per_node),
                                   survey.unsorted > 0):
            writer.write(event)
    return stats
