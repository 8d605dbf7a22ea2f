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
else runs at t = 0 before the schedulers are woken): machine ledgers, one alloc per task
(``scheduler`` = "trace") and the job records with the tasks ``a``, exactly what a
scheduler's commit writes. Batch tasks end ``duration_s`` later as if placed at t = 0.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from itertools import groupby
from operator import attrgetter

import msgpack

from cellstate.codec import ALLOC_MEMO, decode_job_record, decode_machine, encode_job_record
from cellstate.codec_trusted import pack_alloc, pack_machine
from cellstate.fastbuild import builder
from cellstate.model import Alloc, JobKind, JobRecord, Machine, MachineState
from cellstate.resources import Resources
from cellstate.store import Put
from tools.trace.events import TaskPlaced

INITIAL_STATES = ("recorded", "scheduled")
RECORDED_BY = "trace"


def place_recorded(cell, placements: list[TaskPlaced]) -> None:
    """Write ``placements`` (see the module docstring) into ``cell`` (a ``SimCell``) now."""
    placer = _Placer(cell)
    for job_id, run in groupby(placements, _JOB_ID):
        placer.place_run(job_id, run)
    placer.write()


_PLACED, _PENDING = ord("a"), ord("p")
_ALLOC, _RESOURCES = builder(Alloc), builder(Resources)  # without __init__
_JOB_ID = attrgetter("job_id")
_UNREAD = object()


class _Placer:
    """The recorded placements checked so far (a hot loop: ~130,000 at the start of a
    Google-2011 replay): each job and machine is read once, each machine's free amount is
    followed as one ``Resources`` (its ledger is capacity minus that at the end: ints, so
    the same as the requests summed), and the tasks of one job are checked in one pass."""

    def __init__(self, cell):
        self.cell, self.now = cell, cell.core.now
        self.jobs: dict[str, JobRecord | None] = {}  # as read; then with the tasks written
        self.tasks: dict[str, bytearray] = {}  # job → its task states as written so far
        self.machines: dict[str, Machine | None] = {}  # as read
        self.room: dict[str, Resources | None] = {}  # up machine → its free amount so far; else None
        self.per_machine: Counter[tuple[str, str]] = Counter()  # (job with a per-machine rule, machine) → tasks
        self.allocs: list[Alloc] = []
        self.skipped: Counter[str] = Counter()

    def place_run(self, job_id: str, run) -> None:
        """Check and place consecutive placements ``run`` of job ``job_id``, in order."""
        record = self.jobs[job_id] if job_id in self.jobs else self._read_job(job_id)
        skipped = self.skipped
        if record is None or record.killed:
            skipped["job unknown or killed"] += sum(1 for _ in run)
            return
        job, states, room, allocs, now = record.job, self.tasks[job_id], self.room, self.allocs, self.now
        request, priority, ruled = job.request, job.priority, job.different_machine or job.max_per_machine
        cpu, memory, disk, core = request.cpu, request.memory, request.disk, not request.extra
        for p in run:
            task, machine_id = p.task, p.machine_id
            if task >= len(states) or states[task] != _PENDING:
                skipped["task not pending"] += 1
                continue
            left = room.get(machine_id, _UNREAD)
            if left is _UNREAD:
                left = self._read_machine(machine_id)
            if left is None:
                skipped["machine unknown or not up"] += 1
                continue
            if ruled and self._rule_refuses(job, job_id, machine_id):
                skipped["job's per-machine rule"] += 1
                continue
            if core and not left.extra:
                if cpu > left.cpu or memory > left.memory or disk > left.disk:
                    skipped["does not fit the machine's capacity"] += 1
                    continue
                room[machine_id] = _RESOURCES(left.cpu - cpu, left.memory - memory, left.disk - disk, ())
            elif request.fits_in(left):
                room[machine_id] = left - request
            else:
                skipped["does not fit the machine's capacity"] += 1
                continue
            states[task] = _PLACED
            if ruled:
                self.per_machine[job_id, machine_id] += 1
            allocs.append(_ALLOC(job_id, task, machine_id, request, priority, RECORDED_BY, now, False))

    def _read_job(self, job_id: str) -> JobRecord | None:
        record = self.jobs[job_id] = _job_record(self.cell, job_id)
        self.tasks[job_id] = bytearray(record.tasks.encode() if record else b"")
        return record

    def _read_machine(self, machine_id: str) -> Resources | None:
        """Read the machine: its free amount if it is up, else None."""
        machine = self.machines[machine_id] = _machine(self.cell, machine_id)
        left = self.room[machine_id] = machine.free if machine is not None and machine.state is _UP else None
        return left

    def _rule_refuses(self, job, job_id: str, machine_id: str) -> bool:
        """``job``'s ``different_machine`` / ``max_per_machine`` refuse one more task on the machine."""
        here = self.per_machine[job_id, machine_id]
        return bool(here) and bool(job.different_machine or (job.max_per_machine and here >= job.max_per_machine))

    def write(self) -> None:
        """Write what was placed, follow it in the cell, and count what was not."""
        cell, jobs, allocs = self.cell, self.jobs, self.allocs
        for job_id in {a.job_id for a in allocs}:
            jobs[job_id] = replace(jobs[job_id], tasks=self.tasks[job_id].decode())
        ledgers = self._ledgers()
        _write(cell, ledgers, jobs, allocs, self.now)
        _follow(cell, jobs, allocs, self.machines, ledgers)
        counters = cell.counters
        counters.initial_placed += len(allocs)
        for why, n in self.skipped.items():
            counters.initial_not_placed[why] = counters.initial_not_placed.get(why, 0) + n

    def _ledgers(self) -> dict[str, Machine]:
        """The ledger of every machine with an alloc written, by ``RECORDED_BY``: allocated
        is capacity minus the free amount left (the allocs' requests charged to it)."""
        ledgers = {}
        for machine_id, count in Counter(map(_MACHINE_ID, self.allocs)).items():
            m = self.machines[machine_id]
            allocated, tasks = m.capacity - self.room[machine_id], m.task_count + count
            ledgers[machine_id] = m.with_ledger(allocated, tasks, RECORDED_BY)
        return ledgers


_UP = MachineState.UP
_MACHINE_ID = attrgetter("machine_id")


def _job_record(cell, job_id: str) -> JobRecord | None:
    kv = cell.store.get(cell.keys.job(job_id))
    return None if kv is None else decode_job_record(kv.key, kv.value)


def _machine(cell, machine_id: str) -> Machine | None:
    kv = cell.store.get(cell.keys.machine(machine_id))
    return None if kv is None else decode_machine(kv.key, kv.value)


def _write(cell, ledgers: dict[str, Machine], jobs: dict[str, JobRecord | None],
           allocs: list[Alloc], now: float) -> None:
    placed_jobs = {a.job_id for a in allocs}
    keys = cell.keys
    ops = [_PUT(keys.machine(m), pack_machine(ledgers[m]), 0) for m in sorted(ledgers)]
    ops += [_PUT(keys.alloc(a.job_id, a.task_index), raw, 0) for a, raw in zip(allocs, _packed_allocs(allocs))]
    for job_id in sorted(placed_jobs):
        record = jobs[job_id]
        if "p" not in record.tasks:
            record = replace(record, placed_at=now, reason="")
        ops.append(Put(keys.job(job_id), encode_job_record(record)))
    step = cell.store.max_txn_ops
    for i in range(0, len(ops), step):
        result = cell.store.txn([], ops[i:i + step], [])
        if not result.succeeded:
            raise RuntimeError("recorded initial state: an unconditional txn failed")


_PUT = builder(Put)
_TASK_KEY, _MACHINE_KEY = msgpack.packb("task"), msgpack.packb("machine")


def _packed_allocs(allocs: list[Alloc]) -> list[bytes]:
    """``pack_alloc(a)`` of every alloc (the same bytes, remembered in ``ALLOC_MEMO`` as what they
    decode to), from one template per job: the allocs of a job written here differ only in their
    task index and machine id, which ``codec`` packs as consecutive map entries. The template is
    the job's first alloc packed by ``pack_alloc``, split around that pair of entries (when found
    exactly once). Another alloc of the job is the template with its own pair when its other
    fields are the very objects of the first one (already checked by ``pack_alloc``), its task an
    int >= 0 and its machine id an id (``pack_alloc``'s checks of these two); else ``pack_alloc``."""
    templates: dict[str, tuple[Alloc, bytes, bytes] | None] = {}  # job → (first alloc, bytes before, after)
    entries: dict[str, bytes] = {}  # machine id → its packed map entry
    packed_tasks: dict[int, bytes] = {}  # task index → packed
    packb, remember = msgpack.packb, ALLOC_MEMO.put
    out = []
    for a in allocs:
        job_id, task, machine_id = a.job_id, a.task_index, a.machine_id
        if job_id not in templates:
            raw = pack_alloc(a)
            templates[job_id] = _template(raw, a)
            out.append(raw)
            continue
        template = templates[job_id]
        entry = entries.get(machine_id)
        if entry is None and type(machine_id) is str and machine_id and "/" not in machine_id:
            entry = entries[machine_id] = _MACHINE_KEY + packb(machine_id)
        if template is None or entry is None or type(task) is not int or task < 0:
            out.append(pack_alloc(a))
            continue
        if not _same_rest(a, template[0]):
            out.append(pack_alloc(a))
            continue
        packed = packed_tasks.get(task)
        if packed is None:
            packed = packed_tasks[task] = packb(task)
        raw = b"".join((template[1], packed, entry, template[2]))
        remember(raw, a)
        out.append(raw)
    return out


def _template(raw: bytes, a: Alloc) -> tuple[Alloc, bytes, bytes] | None:
    """``a`` and ``raw`` (``a`` packed) split around its task and machine entries, or None."""
    pair = _TASK_KEY + msgpack.packb(a.task_index) + _MACHINE_KEY + msgpack.packb(a.machine_id)
    at = raw.find(pair)
    if at < 0 or raw.find(pair, at + 1) >= 0:
        return None
    return a, raw[:at] + _TASK_KEY, raw[at + len(pair):]


def _same_rest(a: Alloc, first: Alloc) -> bool:
    """``a``'s fields other than task and machine are the very objects of ``first``'s."""
    return (a.resources is first.resources and a.priority is first.priority and a.scheduler is first.scheduler
            and a.placed_at is first.placed_at and a.running is first.running)


def _follow(cell, jobs: dict[str, JobRecord | None], allocs: list[Alloc], machines: dict[str, Machine | None],
            ledgers: dict[str, Machine]) -> None:
    """Charge the usage ledger (what each ledger gained) and schedule the ends of batch
    tasks, as for a commit."""
    for machine_id, ledger in ledgers.items():
        before = machines[machine_id].allocated
        cell.usage.charge(machine_id, ledger.allocated.cpu - before.cpu, ledger.allocated.memory - before.memory)
    ends: dict[str, dict[int, tuple[str, float]]] = {}  # batch job → its tasks' placements
    for a in allocs:
        spec = jobs[a.job_id].job
        if spec.kind is JobKind.BATCH and spec.duration_s is not None:
            ends.setdefault(a.job_id, {})[a.task_index] = (a.machine_id, a.placed_at)
    for job_id, placed in ends.items():  # a job's tasks end together, as one action
        cell.core.after(jobs[job_id].job.duration_s, cell._ender(job_id, placed))
    if allocs:
        cell.wake()
