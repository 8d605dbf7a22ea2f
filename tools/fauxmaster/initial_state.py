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

from cellstate.codec import decode_job_record, decode_machine
from cellstate.codec_trusted import pack_alloc, pack_machine
from cellstate.fastbuild import builder
from cellstate.model import Alloc, JobKind, JobRecord, Machine, MachineState
from cellstate.record_pack import pack_job_record
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
        request = record.job.request
        free[machine_id] = free[machine_id] - request
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
_ALLOC = builder(Alloc)  # an Alloc without its dataclass __init__ (cellstate.fastbuild)


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
        held = claimed.get(a.machine_id)
        if held is None:
            claimed[a.machine_id] = [a.resources, 1]
        else:
            held[0] = held[0] + a.resources
            held[1] += 1
    return {m: machines[m].with_claim(total, count) for m, (total, count) in claimed.items()}


def _write(cell, ledgers: dict[str, Machine], jobs: dict[str, JobRecord | None],
           allocs: list[Alloc], now: float) -> None:
    placed_jobs = {a.job_id for a in allocs}
    keys = cell.keys
    ops = [Put(keys.machine(m), pack_machine(replace(ledgers[m], writer=RECORDED_BY))) for m in sorted(ledgers)]
    ops += [Put(keys.alloc(a.job_id, a.task_index), pack_alloc(a)) for a in allocs]
    for job_id in sorted(placed_jobs):
        record = jobs[job_id]
        if "p" not in record.tasks:
            record = replace(record, placed_at=now, reason="")
        ops.append(Put(keys.job(job_id), pack_job_record(record)))
    step = cell.store.max_txn_ops
    for i in range(0, len(ops), step):
        result = cell.store.txn([], ops[i:i + step], [])
        if not result.succeeded:
            raise RuntimeError("recorded initial state: an unconditional txn failed")


def _follow(cell, jobs: dict[str, JobRecord | None], allocs: list[Alloc]) -> None:
    """Charge the usage ledger and schedule the ends of batch tasks, as for a commit."""
    for a in allocs:
        cell.usage.charge(a.machine_id, a.resources.cpu, a.resources.memory)
        spec = jobs[a.job_id].job
        if spec.kind is JobKind.BATCH and spec.duration_s is not None:
            cell.core.after(spec.duration_s, cell._ender(a.job_id, a.task_index, a.machine_id, a.placed_at))
    if allocs:
        cell.wake()
