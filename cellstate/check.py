"""``check``: verify a cell's invariants at ONE revision (one paginated range of its prefix).

Violation kinds:
  undecodable       a value the codec refuses (reported with its key, never skipped silently)
  bad-key           a key of the cell whose shape is not machines/{id}, jobs/{id}, allocs/{job}/{task}
  key-mismatch      a value whose ids differ from its key's (another machine's valid value, …)
  ledger-mismatch   machine.allocated != sum of its allocs' resources
  task-count        machine.task_count != number of its allocs
  over-capacity     machine.allocated exceeds capacity (per resource: each GPU device ``gpu.<i>`` too)
  device-binding    an alloc asking GPUs not held by exactly its count of devices of the machine
                    (cellstate.devices), or naming a device the machine does not have
  gpu-model         an alloc on a machine whose ``gpu_model`` its job's ``gpu_models`` do not allow
  placed-twice      two allocs for one (job, task)
  orphan-alloc      an alloc whose job or machine does not exist
  task-out-of-range an alloc for a task index the job does not have
  task-state        a task whose char is 'a'/'r' without an alloc, or with an alloc but not 'a'/'r'
                    (judged on the effective record: a pending task of a job that is not a gang
                    and that has an alloc is placed, ``JobRecord.with_allocs``)
  task-accounting   pending + placed/running + finished/failed/killed != tasks
  orphaned-reservation  an alloc of a pending task while its job has no gang key: an
                    orphaned gang reservation (docs/CELLSTATE.md, "Gangs larger than one
                    transaction"); with a gang key it is a reservation in progress, legal
  partial-gang      a gang (``Job.gang``) with some tasks placed/running and others pending: a member
                    was evicted (preemption, machine failure) and the rest kept running; a gang
                    is evicted and placed again whole (docs/OMEGA_CORE.md, "Gangs")
  kill-marker       a (decodable) kill marker ``kills/{job}`` whose job is missing or not killed (a kill
                    that stopped between its first txn and the record's; no task of the job can
                    be placed while it stays)
  undecodable/bad-key also cover ``gangs/{job}`` values (reservation records) and ``kills/{job}``
                    values (kill markers)

A machine or job value that does not decode or is misfiled (another machine's valid value
under ``machines/m1``) is reported once, under its own key, and then left out as the schedulers
leave it out (quarantined): its ledger or task states are not checked, and allocations on that
machine or of that job are not orphans; so the keys named are exactly the bad keys. An
undecodable alloc leaves its task unjudged (its machine's ledger stays off by what it held: the
bad value cannot say where that was); a misfiled alloc still counts on the machine it names.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from cellstate.codec.records import decode_alloc, decode_job_record, decode_machine
from cellstate.codec.gang import decode_gang
from cellstate.codec.kill import decode_kill
from cellstate.codec.fields import CodecError
from cellstate.keys import CellKeys
from cellstate.devices import MODEL_LABEL, binding_problem
from cellstate.model import Alloc, ConstraintOp, JobRecord, Machine, TaskState
from cellstate.resources import ZERO, Resources
from cellstate.store import KeyValue, Store

_LIVE = (TaskState.PLACED.value, TaskState.RUNNING.value)


@dataclass(frozen=True, slots=True)
class Violation:
    kind: str
    key: str
    message: str


@dataclass(slots=True)
class Report:
    """What ``check_cell`` found at ``revision``."""

    cell: str
    revision: int
    machines: int = 0
    jobs: int = 0
    allocs: int = 0
    violations: list[Violation] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def add(self, kind: str, key: str, message: str) -> None:
        self.violations.append(Violation(kind, key, message))

    def kinds(self) -> set[str]:
        return {v.kind for v in self.violations}

    def to_dict(self) -> dict:
        return {"cell": self.cell, "revision": self.revision, "ok": self.ok, "machines": self.machines,
                "jobs": self.jobs, "allocs": self.allocs, "violations": [asdict(v) for v in self.violations]}


@dataclass(slots=True)
class _Cell:
    machines: dict[str, Machine] = field(default_factory=dict)
    jobs: dict[str, JobRecord] = field(default_factory=dict)
    allocs: list[tuple[str, Alloc]] = field(default_factory=list)
    undecodable_machines: set[str] = field(default_factory=set)  # undecodable or misfiled
    undecodable_jobs: set[str] = field(default_factory=set)
    bad_alloc_tasks: set[tuple[str, int]] = field(default_factory=set)
    gangs: set[str] = field(default_factory=set)  # jobs with a gang key (a reservation in progress)
    kills: dict[str, str] = field(default_factory=dict)  # job id -> key of its kill marker


def check_cell(store: Store, keys: CellKeys, revision: int | None = None) -> Report:
    """Read the cell at ``revision`` (default: now) and report every invariant violation."""
    snapshot = store.range(keys.prefix, revision)
    report = Report(keys.cell, snapshot.revision)
    cell = _decode(keys, snapshot.kvs, report)
    report.machines, report.jobs, report.allocs = len(cell.machines), len(cell.jobs), len(cell.allocs)
    _check_ledgers(keys, cell, report)
    _check_allocs(keys, cell, report)
    _check_tasks(keys, cell, report)
    _check_kills(cell, report)
    return report


# ------------------------------------------------------------------------------ decoding


def _decode(keys: CellKeys, kvs: tuple[KeyValue, ...], report: Report) -> _Cell:
    cell = _Cell()
    for kv in kvs:
        try:
            kind, parts = keys.parse(kv.key)
        except ValueError as exc:
            report.add("bad-key", kv.key, str(exc))
            continue
        if kind in ("stats", "conflicts"):
            continue
        try:
            _decode_one(kind, parts, kv, cell, report)
        except CodecError as exc:
            report.add("undecodable", kv.key, str(exc))
            _left_out(kind, parts, cell)
    return cell


def _left_out(kind: str, parts: tuple[str, ...], cell: _Cell) -> None:
    """Note the bad value of a key (kind, parts) so the checks leave it out."""
    if kind == "machines":
        cell.undecodable_machines.add(parts[0])
    elif kind == "jobs":
        cell.undecodable_jobs.add(parts[0])
    elif kind == "allocs" and len(parts) == 2 and parts[1].isdigit():
        cell.bad_alloc_tasks.add((parts[0], int(parts[1])))


def _decode_one(kind: str, parts: tuple[str, ...], kv: KeyValue, cell: _Cell, report: Report) -> None:
    if kind == "machines" and len(parts) == 1:
        machine = decode_machine(kv.key, kv.value)
        if machine.id != parts[0]:
            report.add("key-mismatch", kv.key, f"holds machine {machine.id!r}")
            _left_out(kind, parts, cell)
        else:
            cell.machines[parts[0]] = machine
    elif kind == "jobs" and len(parts) == 1:
        record = decode_job_record(kv.key, kv.value)
        if record.id != parts[0]:
            report.add("key-mismatch", kv.key, f"holds job {record.id!r}")
            _left_out(kind, parts, cell)
        else:
            cell.jobs[parts[0]] = record
    elif kind == "gangs" and len(parts) == 1:
        cell.gangs.add(parts[0])  # (held even if its value is bad: the key is what guards)
        gang = decode_gang(kv.key, kv.value)
        if gang.job_id != parts[0]:
            report.add("key-mismatch", kv.key, f"holds the reservation of job {gang.job_id!r}")
    elif kind == "kills" and len(parts) == 1:
        marker = decode_kill(kv.key, kv.value)
        if marker.job_id != parts[0]:
            report.add("key-mismatch", kv.key, f"holds the kill marker of job {marker.job_id!r}")
        else:
            cell.kills[parts[0]] = kv.key  # (a bad value is reported as such, once)
    elif kind == "allocs" and len(parts) == 2:
        alloc = decode_alloc(kv.key, kv.value)
        if (alloc.job_id, str(alloc.task_index)) != parts:
            report.add("key-mismatch", kv.key, f"holds the alloc of {alloc.job_id}/{alloc.task_index}")
        cell.allocs.append((kv.key, alloc))  # (still held on its machine: counted, and maybe placed twice)
    else:
        report.add("bad-key", kv.key, f"unexpected key shape for {kind}")


# -------------------------------------------------------------------------------- checks


def _check_ledgers(keys: CellKeys, cell: _Cell, report: Report) -> None:
    """Each machine's ledger equals the sum of its allocs and stays within capacity."""
    sums: dict[str, Resources] = {}
    counts: dict[str, int] = {}
    for _, alloc in cell.allocs:
        sums[alloc.machine_id] = sums.get(alloc.machine_id, ZERO) + alloc.resources
        counts[alloc.machine_id] = counts.get(alloc.machine_id, 0) + 1
    for machine_id, machine in sorted(cell.machines.items()):
        key = keys.machine(machine_id)
        total = sums.get(machine_id, ZERO)
        if machine.allocated != total:
            report.add("ledger-mismatch", key, f"ledger {machine.allocated.to_dict()} but its allocs "
                       f"sum to {total.to_dict()}")
        if machine.task_count != counts.get(machine_id, 0):
            report.add("task-count", key, f"task_count {machine.task_count} but "
                       f"{counts.get(machine_id, 0)} allocs")
        short = machine.allocated.shortfall(machine.capacity)
        if short:
            report.add("over-capacity", key, f"{short}: allocated {machine.allocated.get(short)} > "
                       f"capacity {machine.capacity.get(short)}")


def _check_allocs(keys: CellKeys, cell: _Cell, report: Report) -> None:
    """Every alloc has a job and a machine, a task index of its job, and no twin."""
    seen: dict[tuple[str, int], str] = {}
    for key, alloc in cell.allocs:
        task = (alloc.job_id, alloc.task_index)
        if task in seen:
            report.add("placed-twice", key, f"task {alloc.job_id}/{alloc.task_index} also allocated "
                       f"under {seen[task]}")
        seen.setdefault(task, key)
        if alloc.machine_id not in cell.machines and alloc.machine_id not in cell.undecodable_machines:
            report.add("orphan-alloc", key, f"machine {alloc.machine_id!r} does not exist")
        record = cell.jobs.get(alloc.job_id)
        if record is None:
            if alloc.job_id not in cell.undecodable_jobs:
                report.add("orphan-alloc", key, f"job {alloc.job_id!r} does not exist")
        elif alloc.task_index >= record.job.tasks:
            report.add("task-out-of-range", key, f"job {alloc.job_id!r} has {record.job.tasks} tasks")
        machine = cell.machines.get(alloc.machine_id)
        if machine is not None and alloc.resources.extra:
            problem = binding_problem(alloc.resources, machine.capacity)
            if problem is not None:
                report.add("device-binding", key, f"on machine {alloc.machine_id!r}: {problem}")
            if record is not None:
                model = dict(machine.labels).get(MODEL_LABEL, "")
                for c in record.job.constraints:
                    if c.attribute == MODEL_LABEL and c.op is ConstraintOp.IN and model not in c.values:
                        report.add("gpu-model", key, f"machine {alloc.machine_id!r} has GPU model {model!r}, "
                                   f"job {alloc.job_id!r} allows {list(c.values)}")


def _check_tasks(keys: CellKeys, cell: _Cell, report: Report) -> None:
    """A task is 'a'/'r' iff it has an alloc; the state counts add up to the task count."""
    allocated: dict[str, set[int]] = {}
    allocs_of: dict[str, list[Alloc]] = {}
    for _, alloc in cell.allocs:
        allocated.setdefault(alloc.job_id, set()).add(alloc.task_index)
        allocs_of.setdefault(alloc.job_id, []).append(alloc)
    for job_id, record in sorted(cell.jobs.items()):
        key = keys.job(job_id)
        record = record.with_allocs(allocs_of.get(job_id, ()))  # placements that wrote no record
        with_alloc = allocated.get(job_id, set())
        unknown = {t for j, t in cell.bad_alloc_tasks if j == job_id} if cell.bad_alloc_tasks else ()
        live_without = [i for i, c in enumerate(record.tasks) if c in _LIVE and i not in with_alloc
                        and i not in unknown]  # (a task whose alloc key holds a bad value: not judged)
        alloc_not_live = sorted(i for i in with_alloc if i < len(record.tasks) and record.tasks[i] not in _LIVE)
        reserved = [i for i in alloc_not_live if record.tasks[i] == "p"]
        if reserved:  # a gang reservation: legal while its gang key exists (docs/CELLSTATE.md)
            alloc_not_live = [i for i in alloc_not_live if record.tasks[i] != "p"]
            if job_id not in cell.gangs:
                report.add("orphaned-reservation", key, f"orphaned gang reservation: pending task(s) "
                           f"{_few(reserved)} have an alloc but the job has no gang key")
        if live_without:
            report.add("task-state", key, f"task(s) {_few(live_without)} placed/running without an alloc")
        if alloc_not_live:
            report.add("task-state", key, f"task(s) {_few(alloc_not_live)} have an alloc but are not "
                       "placed/running")
        if record.job.gang and not record.killed:
            live = [i for i, c in enumerate(record.tasks) if c in _LIVE]
            pending = [i for i, c in enumerate(record.tasks) if c == "p"]
            if live and pending:
                report.add("partial-gang", key, f"gang of {record.job.tasks} tasks partly running: task(s) "
                           f"{_few(live)} placed/running while task(s) {_few(pending)} are pending")
        counted = sum(record.count(s) for s in TaskState)
        if counted != record.job.tasks:
            report.add("task-accounting", key, f"{counted} task states for {record.job.tasks} tasks")


def _check_kills(cell: _Cell, report: Report) -> None:
    """Every kill marker names a job that is killed (a job whose record does not decode is
    left out, as everywhere)."""
    for job_id, key in sorted(cell.kills.items()):
        record = cell.jobs.get(job_id)
        if record is None:
            if job_id not in cell.undecodable_jobs:
                report.add("kill-marker", key, f"kill marker of job {job_id!r}, which does not exist")
        elif not record.killed:
            report.add("kill-marker", key, f"kill marker of job {job_id!r}, which is not killed "
                       "(an unfinished kill: no task of it can be placed; kill it again)")


def _few(indices: list[int]) -> str:
    shown = ", ".join(map(str, indices[:8]))
    return shown + (f" … ({len(indices)} in all)" if len(indices) > 8 else "")
