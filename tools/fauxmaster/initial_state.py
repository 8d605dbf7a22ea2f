"""Start a replay from the recorded cell: write a trace's ``task_placed`` events of t = 0 as
allocations on their recorded machines (Omega's trace-driven simulator and Borg's Fauxmaster
start from the recorded state instead of scheduling it again).

``INITIAL_STATES``: ``recorded`` (the default: the cell the trace opens with, as recorded; a
trace without ``task_placed`` events replays the same either way) or ``scheduled`` (the
events are ignored and the schedulers place every task submitted at t = 0).

A recorded placement is written only where it fits the trace's stated capacity model, in
trace order: the task is pending in a live job, its machine is up and has room for the
job's request (every resource: ``Resources.fits_in`` the machine's free amount, as the
``resources_fit`` filter checks), and the job's ``different_machine`` / ``max_per_machine``
rules hold. Anything else stays pending for the schedulers; the cell's counters say how many
were written (``initial_placed``) and why the others were not (``initial_not_placed``).
The writes are one bulk write (txns of at most the store's op limit, no compares: nothing
else runs at t = 0 before the schedulers are woken): machine ledgers, the job records with the
tasks ``a`` and one alloc per task (``scheduler`` = "trace"), in that order, as a scheduler's
commit that writes the record puts them. Batch tasks end ``duration_s`` later as if placed at t = 0.
"""

from __future__ import annotations

from collections import Counter
from itertools import groupby
from operator import attrgetter, itemgetter

from cellstate.codec.records import decode_alloc, decode_job_record, decode_machine, encode_job_record
from cellstate.codec.trusted import pack_alloc, pack_machine
from cellstate.fastbuild import builder
from cellstate.model import Alloc, JobKind, JobRecord, Machine, MachineState
from cellstate.resources import Resources
from cellstate.store import Put

INITIAL_STATES = ("recorded", "scheduled")
RECORDED_BY = "trace"


def place_recorded(cell, placements: list[tuple[str, int, str]]) -> None:
    """Write ``placements`` (the (job, task, machine) of the t = 0 ``task_placed`` events, in
    trace order; see the module docstring) into ``cell`` (a ``SimCell``) now."""
    placer = _Placer(cell)
    for job_id, run in groupby(placements, _JOB_ID):
        placer.place_run(job_id, run)
    placer.write()


_PLACED, _PENDING = ord("a"), ord("p")
_ALLOC, _RESOURCES, _PUT = builder(Alloc), builder(Resources), builder(Put)  # without __init__
_JOB_ID = itemgetter(0)
_UNREAD = object()


class _Placer:
    """The recorded placements checked so far (a hot loop: ~130,000 at the start of a
    Google-2011 replay): each job and machine is read once, each up machine's free amount is
    followed as a ``[cpu, memory, disk]`` list while it is core-only (else as ``Resources``;
    its ledger is capacity minus that at the end: ints, so the same as the requests summed),
    and the tasks of one job are checked, built and packed in one pass."""

    def __init__(self, cell):
        self.cell, self.now = cell, cell.core.now
        self.jobs: dict[str, JobRecord | None] = {}  # as read
        self.tasks: dict[str, bytearray] = {}  # job → its task states as written so far
        self.machines: dict[str, Machine | None] = {}  # as read
        self.room: dict[str, list | Resources | None] = {}  # up machine → its free amount so far; else None
        self.per_machine: dict[str, dict[str, int]] = {}  # job with a per-machine rule → machine → its tasks
        self.allocs: list[Alloc] = []
        self.puts: list[Put] = []  # of the allocs, in order
        self.ends: dict[str, dict[int, tuple[str, float]]] = {}  # batch job with a duration → its placements
        self.skipped: Counter[str] = Counter()

    def place_run(self, job_id: str, run) -> None:
        """Check and place consecutive placements ``run`` of job ``job_id``, in order."""
        record = self.jobs[job_id] if job_id in self.jobs else self._read_job(job_id)
        skipped = self.skipped
        if record is None or record.killed:
            skipped["job unknown or killed"] += sum(1 for _ in run)
            return
        job, states, room, now = record.job, self.tasks[job_id], self.room, self.now
        request, priority = job.request, job.priority
        here = self.per_machine.setdefault(job_id, {}) if job.different_machine or job.max_per_machine else None
        cpu, memory, disk, core = request.cpu, request.memory, request.disk, not request.extra
        allocs, puts, pack = self.allocs, self.puts, pack_alloc
        ends, key_prefix, tasks = self._ends(job_id, job), self.cell.keys.job_allocs(job_id), len(states)
        for _, task, machine_id in run:
            if task >= tasks or states[task] != _PENDING:
                skipped["task not pending"] += 1
                continue
            left = room.get(machine_id, _UNREAD)
            if left is _UNREAD:
                left = self._read_machine(machine_id)
            if left is None:
                skipped["machine unknown or not up"] += 1
                continue
            if here is not None and machine_id in here and _rule_refuses(job, here[machine_id]):
                skipped["job's per-machine rule"] += 1
                continue
            if core and type(left) is list:
                if cpu > left[0] or memory > left[1] or disk > left[2]:
                    skipped["does not fit the machine's capacity"] += 1
                    continue
                left[0] -= cpu
                left[1] -= memory
                left[2] -= disk
            elif not self._take(machine_id, left, request):
                skipped["does not fit the machine's capacity"] += 1
                continue
            states[task] = _PLACED
            if here is not None:
                here[machine_id] = here.get(machine_id, 0) + 1
            alloc = _ALLOC(job_id, task, machine_id, request, priority, RECORDED_BY, now, False)
            allocs.append(alloc)
            puts.append(_PUT(f"{key_prefix}{task}", pack(alloc), 0))
            if ends is not None:
                ends[task] = (machine_id, now)
        if ends and job_id not in self.ends:
            self.ends[job_id] = ends  # in the order of the jobs' first placements

    def _read_job(self, job_id: str) -> JobRecord | None:
        record = self.jobs[job_id] = _job_record(self.cell, job_id)
        self.tasks[job_id] = bytearray(record.tasks.encode() if record else b"")
        return record

    def _read_machine(self, machine_id: str) -> list | Resources | None:
        """Read the machine: its free amount if it is up (a list while core-only), else None."""
        machine = self.machines[machine_id] = _machine(self.cell, machine_id)
        if machine is None or machine.state is not _UP:
            left = None
        else:
            free = machine.free
            left = free if free.extra else [free.cpu, free.memory, free.disk]
        self.room[machine_id] = left
        return left

    def _take(self, machine_id: str, left: list | Resources, request: Resources) -> bool:
        """Take ``request`` from the machine's free amount ``left`` if it fits (``fits_in``)."""
        free = _resources(left)
        if not request.fits_in(free):
            return False
        self.room[machine_id] = free - request
        return True

    def _ends(self, job_id: str, job) -> dict[int, tuple[str, float]] | None:
        """The placements of a batch job with a duration (whose tasks end), else None."""
        if job.kind is not JobKind.BATCH or job.duration_s is None:
            return None
        ends = self.ends.get(job_id)
        return {} if ends is None else ends

    def write(self) -> None:
        """Write what was placed, follow it in the cell, and count what was not."""
        cell, jobs, allocs = self.cell, self.jobs, self.allocs
        ledgers = self._ledgers()
        placed = self._placed_jobs()
        _write(cell, ledgers, placed, self.puts, self.now)
        cell.initial_jobs.update(job_id for job_id in placed if _PENDING not in self.tasks[job_id])
        _follow(cell, ledgers, self.machines, {job_id: jobs[job_id].job.duration_s for job_id in self.ends},
                self.ends)
        if allocs:
            cell.wake()
        counters = cell.counters
        counters.initial_placed += len(allocs)
        for why, n in self.skipped.items():
            counters.initial_not_placed[why] = counters.initial_not_placed.get(why, 0) + n

    def _placed_jobs(self) -> dict[str, JobRecord]:
        """The record of every job with a task placed, with its tasks as placed."""
        jobs, tasks = self.jobs, self.tasks
        return {job_id: jobs[job_id].with_progress(tasks[job_id].decode(), jobs[job_id].reason,
                                                   jobs[job_id].first_attempt_at, jobs[job_id].placed_at)
                for job_id in {a.job_id for a in self.allocs}}

    def _ledgers(self) -> dict[str, Machine]:
        """The ledger of every machine with an alloc written, by ``RECORDED_BY``: allocated
        is capacity minus the free amount left (the allocs' requests charged to it)."""
        ledgers = {}
        for machine_id, count in Counter(map(_MACHINE_ID, self.allocs)).items():
            m = self.machines[machine_id]
            allocated, tasks = m.capacity - _resources(self.room[machine_id]), m.task_count + count
            ledgers[machine_id] = m.with_ledger(allocated, tasks, RECORDED_BY)
        return ledgers


_UP = MachineState.UP


def _rule_refuses(job, here: int) -> bool:
    """``job``'s ``different_machine`` / ``max_per_machine`` refuse one more task on a machine
    with ``here`` (>= 1) of its tasks."""
    return bool(job.different_machine or (job.max_per_machine and here >= job.max_per_machine))


_MACHINE_ID = attrgetter("machine_id")


def _resources(left: list | Resources) -> Resources:
    """A free amount followed as a list, as ``Resources``."""
    return _RESOURCES(left[0], left[1], left[2], ()) if type(left) is list else left


def _job_record(cell, job_id: str) -> JobRecord | None:
    """The job's effective record (``JobRecord.with_allocs``: a pending task with an alloc is
    placed), or None. A job no placement has attempted yet (``first_attempt_at`` unset: the
    first placement writes the record) has no such task, so its allocs are not read (at t = 0
    that is nearly every job)."""
    kv = cell.store.get(cell.keys.job(job_id))
    if kv is None:
        return None
    record = decode_job_record(kv.key, kv.value)
    if record.job.gang or record.first_attempt_at is None:
        return record
    allocs = cell.store.range(cell.keys.job_allocs(job_id)).kvs
    return record.with_allocs([decode_alloc(a.key, a.value) for a in allocs]) if allocs else record


def _machine(cell, machine_id: str) -> Machine | None:
    kv = cell.store.get(cell.keys.machine(machine_id))
    return None if kv is None else decode_machine(kv.key, kv.value)


def _write(cell, ledgers: dict[str, Machine], jobs: dict[str, JobRecord], alloc_puts: list[Put],
           now: float) -> None:
    """The ledgers, the allocs' puts and the job records (placed at ``now`` when no task is
    left pending), in txns of at most the store's op limit."""
    keys = cell.keys
    ops = [_PUT(keys.machine(m), pack_machine(ledgers[m]), 0) for m in sorted(ledgers)]
    for job_id in sorted(jobs):  # the records before the allocs, as a placement puts them
        record = jobs[job_id]
        if "p" not in record.tasks:
            record = record.with_progress(record.tasks, "", record.first_attempt_at, now)
        ops.append(Put(keys.job(job_id), encode_job_record(record)))
    ops += alloc_puts
    step = cell.store.max_txn_ops
    for i in range(0, len(ops), step):
        result = cell.store.txn([], ops[i:i + step], [])
        if not result.succeeded:
            raise RuntimeError("recorded initial state: an unconditional txn failed")


def _follow(cell, ledgers: dict[str, Machine], machines: dict[str, Machine | None],
            durations: dict[str, float], ends: dict[str, dict[int, tuple[str, float]]]) -> None:
    """Charge the usage ledger (what each ledger gained) and schedule the ends of batch tasks
    (a job's tasks end together, ``durations[job]`` later, as one action), as for a commit."""
    for machine_id, ledger in ledgers.items():
        before = machines[machine_id].allocated
        cell.usage.charge(machine_id, ledger.allocated.cpu - before.cpu, ledger.allocated.memory - before.memory)
        if ledger.allocated.extra or before.extra:
            cell.usage.charge_extra(machine_id, (ledger.allocated - before).extra)
    for job_id, placed in ends.items():
        cell.core.after(durations[job_id], cell._ender(job_id, placed))
