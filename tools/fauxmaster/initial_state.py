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
    """Write ``placements`` (see the module docstring) into ``cell`` (a ``SimCell``) now.

    A hot loop (one pass per recorded task, ~130,000 at the start of a Google-2011 replay):
    each machine's free amount is followed as one ``Resources`` (the ledgers are built once
    per machine at the end), and each job's and machine's first read is cached inline."""
    jobs: dict[str, JobRecord | None] = {}
    tasks: dict[str, bytearray] = {}  # job → its task states as written so far
    machines: dict[str, Machine | None] = {}  # as read
    free: dict[str, Resources] = {}  # machine → its free amount after the writes so far
    per_machine: Counter[tuple[str, str]] = Counter()  # (job, machine) → tasks written there
    allocs: list[Alloc] = []
    skipped: Counter[str] = Counter()
    now = cell.core.now
    for p in placements:
        job_id, machine_id = p.job_id, p.machine_id
        if job_id in jobs:
            record = jobs[job_id]
        else:
            record = jobs[job_id] = _job_record(cell, job_id)
            tasks[job_id] = bytearray(record.tasks.encode() if record else b"")
        if machine_id in machines:
            machine = machines[machine_id]
        else:
            machine = machines[machine_id] = _machine(cell, machine_id)
            if machine is not None:
                free[machine_id] = machine.free
        states = tasks[job_id]
        why = _refusal(record, states, machine, free.get(machine_id), p, per_machine[job_id, machine_id])
        if why:
            skipped[why] += 1
            continue
        request, left = record.job.request, free[machine_id]
        free[machine_id] = (  # a core-only vector without __init__
            _RESOURCES(left.cpu - request.cpu, left.memory - request.memory, left.disk - request.disk, ())
            if not (left.extra or request.extra) else left - request)
        states[p.task] = _PLACED
        per_machine[job_id, machine_id] += 1
        allocs.append(_ALLOC(job_id, p.task, machine_id, request, record.job.priority, RECORDED_BY, now, False))
    for job_id in {a.job_id for a in allocs}:
        jobs[job_id] = replace(jobs[job_id], tasks=tasks[job_id].decode())
    _write(cell, _ledgers(machines, allocs), jobs, allocs, now)
    _follow(cell, jobs, allocs)
    counters = cell.counters
    counters.initial_placed += len(allocs)
    for why, n in skipped.items():
        counters.initial_not_placed[why] = counters.initial_not_placed.get(why, 0) + n


_PLACED, _PENDING = ord("a"), ord("p")
_ALLOC, _RESOURCES = builder(Alloc), builder(Resources)  # without their dataclass __init__ (cellstate.fastbuild)


def _job_record(cell, job_id: str) -> JobRecord | None:
    kv = cell.store.get(cell.keys.job(job_id))
    return None if kv is None else decode_job_record(kv.key, kv.value)


def _machine(cell, machine_id: str) -> Machine | None:
    kv = cell.store.get(cell.keys.machine(machine_id))
    return None if kv is None else decode_machine(kv.key, kv.value)


def _refusal(record: JobRecord | None, states: bytearray, machine: Machine | None, free: Resources | None,
             p: TaskPlaced, here: int) -> str:
    """Why the recorded placement ``p`` cannot be written ("" when it can); ``states``: the
    job's task states so far, ``free``: the machine's free amount so far, ``here``: the
    job's tasks written on that machine so far."""
    if record is None or record.killed:
        return "job unknown or killed"
    if p.task >= len(states) or states[p.task] != _PENDING:
        return "task not pending"
    if machine is None or machine.state is not MachineState.UP:
        return "machine unknown or not up"
    job = record.job
    if here and (job.different_machine or (job.max_per_machine and here >= job.max_per_machine)):
        return "job's per-machine rule"
    if not job.request.fits_in(free):
        return "does not fit the machine's capacity"
    return ""


def _ledgers(machines: dict[str, Machine | None], allocs: list[Alloc]) -> dict[str, Machine]:
    """The ledger of every machine with an alloc written: the allocs' requests charged to it,
    in trace order (``Machine.with_claim`` per alloc, summed per machine first)."""
    claimed: dict[str, list] = {}  # machine → [sum of requests, tasks]
    for a in allocs:
        held, request = claimed.get(a.machine_id), a.resources
        if held is None:
            claimed[a.machine_id] = [request, 1]
            continue
        total = held[0]
        held[0] = (_RESOURCES(total.cpu + request.cpu, total.memory + request.memory, total.disk + request.disk, ())
                   if not (total.extra or request.extra) else total + request)  # core-only: no __init__
        held[1] += 1
    return {m: machines[m].with_claim(total, count) for m, (total, count) in claimed.items()}


def _write(cell, ledgers: dict[str, Machine], jobs: dict[str, JobRecord | None],
           allocs: list[Alloc], now: float) -> None:
    placed_jobs = {a.job_id for a in allocs}
    keys = cell.keys
    ops = [Put(keys.machine(m), pack_machine(replace(ledgers[m], writer=RECORDED_BY))) for m in sorted(ledgers)]
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
        if template is None or entry is None or type(task) is not int or task < 0 or not _same_rest(a, template[0]):
            out.append(pack_alloc(a))
            continue
        raw = b"".join((template[1], packb(task), entry, template[2]))
        remember(raw, a)
        out.append(raw)
    return out


def _same_rest(a: Alloc, first: Alloc) -> bool:
    """``a``'s fields other than task and machine are the very objects of ``first``'s."""
    return (a.resources is first.resources and a.priority is first.priority and a.scheduler is first.scheduler
            and a.placed_at is first.placed_at and a.running is first.running)


def _template(raw: bytes, a: Alloc) -> tuple[Alloc, bytes, bytes] | None:
    """``a`` and ``raw`` (``a`` packed) split around its task and machine entries, or None."""
    pair = _TASK_KEY + msgpack.packb(a.task_index) + _MACHINE_KEY + msgpack.packb(a.machine_id)
    at = raw.find(pair)
    if at < 0 or raw.find(pair, at + 1) >= 0:
        return None
    return a, raw[:at] + _TASK_KEY, raw[at + len(pair):]


def _follow(cell, jobs: dict[str, JobRecord | None], allocs: list[Alloc]) -> None:
    """Charge the usage ledger and schedule the ends of batch tasks, as for a commit."""
    ends: dict[str, dict[int, tuple[str, float]]] = {}  # batch job → its tasks' placements
    for a in allocs:
        cell.usage.charge(a.machine_id, a.resources.cpu, a.resources.memory)
        spec = jobs[a.job_id].job
        if spec.kind is JobKind.BATCH and spec.duration_s is not None:
            ends.setdefault(a.job_id, {})[a.task_index] = (a.machine_id, a.placed_at)
    for job_id, placed in ends.items():  # a job's tasks end together, as one action
        cell.core.after(jobs[job_id].job.duration_s, cell._ender(job_id, placed))
    if allocs:
        cell.wake()
