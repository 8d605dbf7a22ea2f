"""Transactions of a task's life after placement, as pure builders (the machine agents run them).

Each builder returns ``TxnOps(compares, success, failure)`` for ``Store.txn``; the failure branch
gets every compared key, so a loser sees who changed what. The builders never read the store.

    start    compare job;            put allocs with running=True, put job with those tasks 'r'
    finish   compare machines + job; delete allocs, put machines with released ledgers, put job 'f'
    evict    compare machine + jobs; put machine with a new state and its ledger released (zeroed
             once nothing is left on it), delete allocs, put jobs with those tasks back to 'p'
             (a killed job's tasks to 'k') and the reason — used to fail and to drain a machine;
             the other live members of an evicted gang go in the same txn when it holds them
             (their machines compared and released too)
    repair   compare machine;        put machine up with an empty ledger

Every change or delete of an existing ``allocs/{job}/{task}`` also writes ``jobs/{job}``, so a job
revision that is unchanged proves the allocs a builder was given are unchanged too: that is why
start and finish need no alloc compares. (A placement of a job that is not a gang adds allocs
without writing the record, docs/CELLSTATE.md "Task state out of the record"; the builders get the
effective record of a replica and write its states, so a task placed that way stays placed: a
stored ``p`` with an alloc is placed, and one the builder saw as ``a`` is written ``a``.)
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping, NamedTuple, Sequence

from cellstate.codec.records import encode_job_record
from cellstate.codec.trusted import pack_alloc, pack_machine  # values built here from decoded ones
from cellstate.fastbuild import builder
from cellstate.keys import CellKeys
from cellstate.model import Alloc, JobRecord, Machine, MachineState, TaskState
from cellstate.resources import ZERO, Resources
from cellstate.store import Compare, CompareOp, CompareTarget, Delete, Get, Op, Put, mod_revision_is
from cellstate.txn_rules import txn_request_bytes
from cellstate.plan import JobEntry, MachineEntry

_LIVE = (TaskState.PLACED.value, TaskState.RUNNING.value)
# built without __init__ (cellstate.fastbuild)
_RESOURCES = builder(Resources)
# The ops of a task end, built without __init__ as well (one txn per task end in a replay).
_PUT, _DELETE, _GET, _COMPARE = builder(Put), builder(Delete), builder(Get), builder(Compare)
_MOD, _EQ = CompareTarget.MOD, CompareOp.EQ


class TxnOps(NamedTuple):
    """The three lists of one transaction."""

    compares: list[Compare]
    success: list[Op]
    failure: list[Op]


class LedgerError(ValueError):
    """Releasing an alloc would drive a machine's ledger below zero (the ledger is inconsistent)."""


# ------------------------------------------------------------------------------- start


def start_task_ops(keys: CellKeys, job: JobEntry, allocs: Sequence[Alloc]) -> TxnOps:
    """Mark ``allocs`` (tasks of ``job`` in state 'a') running: alloc ``running=True``, task 'r'.
    ValueError when an alloc is of another job, repeated, or its task is not placed."""
    if not allocs:
        raise ValueError(f"start of job {job.id!r}: no allocs given")
    record = job.record
    seen: set[int] = set()
    success: list[Op] = []
    for alloc in allocs:
        _check_alloc_of(record, alloc, "start", (TaskState.PLACED.value,))
        if alloc.task_index in seen:
            raise ValueError(f"start of job {job.id!r}: task {alloc.task_index} given twice")
        seen.add(alloc.task_index)
        success.append(Put(keys.alloc(alloc.job_id, alloc.task_index), pack_alloc(replace(alloc, running=True))))
    job_key = keys.job(job.id)
    success.append(Put(job_key, encode_job_record(record.with_tasks(sorted(seen), TaskState.RUNNING))))
    return TxnOps([mod_revision_is(job_key, job.mod_revision)], success, [Get(job_key)])


# ------------------------------------------------------------------------------ finish


def finish_batch_limit(max_txn_ops: int) -> int:
    """Allocs one finish txn can end: each deletes an alloc and (at worst) puts a machine, and
    the job record is one more put (at least one, whatever the limit)."""
    return max(1, (max_txn_ops - 1) // 2)


def finish_task_ops(keys: CellKeys, job: JobEntry, allocs: Sequence[Alloc],
                    machines: Mapping[str, MachineEntry], writer: str) -> TxnOps:
    """End ``allocs`` of ``job`` (tasks 'a' or 'r'): delete them, release them from their machines'
    ledgers (``writer`` recorded) and set their tasks to 'f'. ``machines`` must hold the machine of
    every alloc. ValueError on a foreign, repeated or not-live task or a missing machine;
    LedgerError when a ledger would go negative."""
    if not allocs:
        raise ValueError(f"finish of job {job.id!r}: no allocs given")
    record = job.record
    ledgers: dict[str, tuple[Resources, int]] = {}  # machine → (allocated, tasks) after the releases
    tasks: list[int] = []
    seen: set[int] = set()
    deletes: list[Op] = []
    job_id, states, alloc_key = record.job.id, record.tasks, keys.alloc
    for alloc in allocs:
        index = alloc.task_index
        if not (alloc.job_id == job_id and 0 <= index < len(states) and states[index] in _LIVE):
            _check_alloc_of(record, alloc, "finish", _LIVE)
        if index in seen:
            raise ValueError(f"finish of job {job.id!r}: task {index} given twice")
        seen.add(index)
        machine_id = alloc.machine_id
        held = ledgers.get(machine_id)
        if held is None:
            entry = machines.get(machine_id)
            if entry is None:
                raise ValueError(f"finish of {alloc.job_id}/{index}: no ledger of machine {machine_id!r} given")
            held = entry.machine.allocated, entry.machine.task_count
        allocated, request = held[0], alloc.resources
        allocated, count = (  # released(ledger, [alloc]); a core-only vector without __init__
            _RESOURCES(allocated.cpu - request.cpu, allocated.memory - request.memory,
                       allocated.disk - request.disk, ()) if not (allocated.extra or request.extra)
            else allocated - request), held[1] - 1
        if count < 0 or allocated.cpu < 0 or allocated.memory < 0 or allocated.disk < 0 or allocated.extra \
                and allocated.is_negative():
            _negative_ledger(machines[machine_id].machine.id, 1, allocated, count)
        ledgers[machine_id] = (allocated, count)
        tasks.append(index)
        deletes.append(_DELETE(alloc_key(alloc.job_id, index), False))
    return _finish_txn(keys, job, tasks, deletes, ledgers, machines, writer)


def _finish_txn(keys: CellKeys, job: JobEntry, tasks: list[int], deletes: list[Op],
                ledgers: dict[str, tuple[Resources, int]], machines: Mapping[str, MachineEntry],
                writer: str) -> TxnOps:
    """The finish txn: compare each released machine and the job, delete the allocs, put the
    released ledgers and the record with ``tasks`` 'f'."""
    compares, failure = [], []
    success: list[Op] = deletes
    reads = keys.machine_reads
    for machine_id, (allocated, count) in ledgers.items():
        key, get = reads.get(machine_id) or keys.machine_read(machine_id)
        entry = machines[machine_id]
        compares.append(_COMPARE(key, _MOD, _EQ, entry.mod_revision))  # mod_revision_is
        failure.append(get)
        success.append(_PUT(key, pack_machine(entry.machine.with_ledger(allocated, count, writer)), 0))
    job_key = keys.job(job.id)
    compares.append(_COMPARE(job_key, _MOD, _EQ, job.mod_revision))
    failure.append(_GET(job_key, False))
    success.append(_PUT(job_key, encode_job_record(job.record.with_tasks(tasks, TaskState.FINISHED)), 0))
    return TxnOps(compares, success, failure)


# ------------------------------------------------------------------------------- evict


class Eviction(NamedTuple):
    """One eviction txn and the allocs it removes from the machine (the rest need further txns);
    ``collateral``: the allocs it removes from other machines (the rest of an evicted gang)."""

    ops: TxnOps
    evicted: list[Alloc]
    collateral: list[Alloc] = []


def fail_machine_ops(keys: CellKeys, machine: MachineEntry, allocs: Sequence[Alloc],
                     jobs: Mapping[str, JobEntry | None], writer: str, max_ops: int,
                     max_bytes: int | None = None, gangs: GangRest | None = None) -> Eviction:
    """Machine down: ``allocs`` must be every alloc on it. As many as fit one txn are evicted with
    reason "machine X failed"; when that is all of them the ledger is zeroed. ``gangs``: the other
    live members of gang jobs among them (``evict_ops``)."""
    return evict_ops(keys, machine, allocs, jobs, state=MachineState.DOWN,
                     reason=f"machine {machine.id} failed", writer=writer, max_ops=max_ops,
                     max_bytes=max_bytes, zero_when_empty=True, gangs=gangs)


def drain_machine_ops(keys: CellKeys, machine: MachineEntry, service_allocs: Sequence[Alloc],
                      jobs: Mapping[str, JobEntry | None], writer: str, max_ops: int,
                      max_bytes: int | None = None) -> Eviction:
    """Machine draining: the given (service) allocs are moved off it, reason "machine X draining";
    the rest keep running and the ledger is only released by what is moved."""
    return evict_ops(keys, machine, service_allocs, jobs, state=MachineState.DRAINING,
                     reason=f"machine {machine.id} draining", writer=writer, max_ops=max_ops,
                     max_bytes=max_bytes, zero_when_empty=False)


GangRest = Mapping[str, Sequence[tuple[Alloc, MachineEntry]]]
"""Gang job id -> its other live allocs (on other machines), each with its machine as seen."""


def evict_ops(keys: CellKeys, machine: MachineEntry, allocs: Sequence[Alloc],
              jobs: Mapping[str, JobEntry | None], *, state: MachineState, reason: str, writer: str,
              max_ops: int, max_bytes: int | None = None, zero_when_empty: bool,
              gangs: GangRest | None = None) -> Eviction:
    """Put the machine in ``state`` and evict the first allocs (grouped by job) that fit
    ``max_ops`` per branch and ``max_bytes`` per request. ``jobs`` maps each alloc's job id to its
    entry (None: the job is gone; its revision is compared as 0). A gang runs whole or not at all:
    for a gang job of ``gangs`` whose allocs here are all taken, its other live allocs are evicted
    in the same txn when they fit it too (their machines compared at the revisions given and put
    with the ledgers released; ``Eviction.collateral``); else they are left for ``evict_gang``.
    ValueError on an alloc of another machine or a job missing from ``jobs``; LedgerError on a
    ledger that would go negative."""
    if max_ops < 3:
        raise ValueError(f"eviction needs max_ops >= 3 (machine, one alloc, one job), got {max_ops}")
    by_job = _group_by_job(machine.id, allocs, jobs)
    taken: list[Alloc] = []
    records: dict[str, bytes] = {}
    others: dict[str, tuple[MachineEntry, list[Alloc]]] = {}
    collateral: list[Alloc] = []
    ops_used = 1  # the machine put
    for job_id, group in by_job.items():
        entry = jobs[job_id]
        room = max_ops - ops_used - (entry is not None)
        if room < 1:
            break
        chosen = group[:room]
        ops_used += len(chosen) + (entry is not None)
        rest = gangs.get(job_id, ()) if gangs and entry is not None and len(chosen) == len(group) else ()
        rest = [(a, m) for a, m in rest if a.machine_id != machine.id]
        new_machines = {m.id for a, m in rest if m.id not in others}
        if rest and ops_used + len(rest) + len(new_machines) <= max_ops:
            ops_used += len(rest) + len(new_machines)
            for alloc, seen in rest:
                others.setdefault(seen.id, (seen, []))[1].append(alloc)
                collateral.append(alloc)
            chosen_all = chosen + [a for a, _ in rest]
        else:
            chosen_all = chosen
        if entry is not None:
            records[job_id] = encode_job_record(_evicted_record(entry.record, chosen_all, reason))
        taken.extend(chosen)
        if len(chosen) < len(group):
            break
    ops = _eviction_txn(keys, machine, taken, jobs, records, state, writer,
                        zero=zero_when_empty and len(taken) == len(allocs), others=others)
    if max_bytes is not None and len(taken) > 1 and txn_request_bytes(*ops) > max_bytes:
        half = len(taken) // 2
        return evict_ops(keys, machine, taken[:half], jobs, state=state, reason=reason, writer=writer,
                         max_ops=max_ops, max_bytes=max_bytes, zero_when_empty=False)
    return Eviction(ops, taken, collateral)


def _group_by_job(machine_id: str, allocs: Sequence[Alloc], jobs: Mapping) -> dict[str, list[Alloc]]:
    by_job: dict[str, list[Alloc]] = {}
    for alloc in allocs:
        if alloc.machine_id != machine_id:
            raise ValueError(f"evict from machine {machine_id!r}: alloc {alloc.job_id}/{alloc.task_index} "
                             f"is on machine {alloc.machine_id!r}")
        if alloc.job_id not in jobs:
            raise ValueError(f"evict from machine {machine_id!r}: no entry (or None) given for job "
                             f"{alloc.job_id!r}")
        by_job.setdefault(alloc.job_id, []).append(alloc)
    return by_job


def _evicted_record(record: JobRecord, allocs: Sequence[Alloc], reason: str) -> JobRecord:
    """Live tasks of ``allocs`` back to 'p' with ``reason`` (to 'k' when the job is killed)."""
    tasks = [a.task_index for a in allocs
             if 0 <= a.task_index < len(record.tasks) and record.tasks[a.task_index] in _LIVE]
    if record.killed:
        return record.with_tasks(tasks, TaskState.KILLED)
    return replace(record.with_tasks(tasks, TaskState.PENDING), reason=reason)


def _eviction_txn(keys: CellKeys, machine: MachineEntry, taken: list[Alloc], jobs: Mapping,
                  records: dict[str, bytes], state: MachineState, writer: str, zero: bool,
                  others: Mapping[str, tuple[MachineEntry, list[Alloc]]] = {}) -> TxnOps:
    ledger = replace(machine.machine, allocated=ZERO, task_count=0) if zero else released(machine.machine, taken)
    machine_key = keys.machine(machine.id)
    compares = [mod_revision_is(machine_key, machine.mod_revision)]
    failure: list[Op] = [Get(machine_key)]
    success: list[Op] = [Put(machine_key, pack_machine(replace(ledger, state=state, writer=writer)))]
    success.extend(Delete(keys.alloc(a.job_id, a.task_index)) for a in taken)
    for seen, rest in others.values():  # the rest of evicted gangs, on their machines
        key = keys.machine(seen.id)
        compares.append(mod_revision_is(key, seen.mod_revision))
        failure.append(Get(key))
        success.append(Put(key, pack_machine(replace(released(seen.machine, rest), writer=writer))))
        success.extend(Delete(keys.alloc(a.job_id, a.task_index)) for a in rest)
    for job_id in dict.fromkeys(a.job_id for a in taken):
        key = keys.job(job_id)
        entry = jobs[job_id]
        compares.append(mod_revision_is(key, 0 if entry is None else entry.mod_revision))
        failure.append(Get(key))
        if job_id in records:
            success.append(Put(key, records[job_id]))
    return TxnOps(compares, success, failure)


# ------------------------------------------------------------------------------ repair


def repair_machine_ops(keys: CellKeys, machine: MachineEntry, writer: str) -> TxnOps:
    """Bring a machine back up with an empty ledger (call only when no alloc is on it)."""
    key = keys.machine(machine.id)
    fresh = replace(machine.machine, state=MachineState.UP, allocated=ZERO, task_count=0, writer=writer)
    return TxnOps([mod_revision_is(key, machine.mod_revision)], [Put(key, pack_machine(fresh))], [Get(key)])


# ------------------------------------------------------------------------------ shared


def released(machine: Machine, allocs: Sequence[Alloc]) -> Machine:
    """``machine`` with ``allocs`` taken off its ledger; LedgerError if it would go negative."""
    for alloc in allocs:
        machine = machine.with_release(alloc.resources)
    if machine.allocated.is_negative() or machine.task_count < 0:
        _negative_ledger(machine.id, len(allocs), machine.allocated, machine.task_count)
    return machine


def _negative_ledger(machine_id: str, releases: int, allocated, task_count: int) -> None:
    raise LedgerError(f"machine {machine_id!r}: releasing {releases} alloc(s) leaves a negative "
                      f"ledger ({allocated.to_dict()}, {task_count} tasks); "
                      "the ledger does not match its allocs (run `omega check`)")


def _check_alloc_of(record: JobRecord, alloc: Alloc, what: str, allowed: tuple[str, ...]) -> None:
    tasks, index = record.tasks, alloc.task_index
    if alloc.job_id == record.job.id and 0 <= index < len(tasks) and tasks[index] in allowed:
        return  # (the messages below are built only when one is raised: a task end checks one alloc)
    where = f"{what} of {alloc.job_id}/{alloc.task_index}"
    if alloc.job_id != record.id:
        raise ValueError(f"{where}: alloc is not of job {record.id!r}")
    if not 0 <= alloc.task_index < len(record.tasks):
        raise ValueError(f"{where}: job {record.id!r} has {len(record.tasks)} tasks")
    char = record.tasks[alloc.task_index]
    raise ValueError(f"{where}: task state is {char!r}, expected one of {list(allowed)}")
