"""``import_google2011``: the two passes (package docstring) written as one omega trace, with
the cell's machines (capacity model or machine_events, plain or overcommit) and the ground truth."""

from __future__ import annotations

import heapq
from datetime import UTC, datetime

from cellstate.model import Machine
from cellstate.resources import Resources
from tools.trace.events import JobSubmit, MachineAdd, MachineRemove, TaskPlaced
from tools.trace.format import TraceHeader, TraceWriter
from tools.trace.google2011.batches import ImportStats, job_and_task_events
from tools.trace.google2011.cell import (
    ADD, CapacityModel, CellModel, MachineEvents, Overcommit, overcommit_cell, read_machine_events,
)
from tools.trace.google2011.schema import (
    CPU_SCALE, DISK_SCALE, IMPORTER_REVISION, MEMORY_SCALE, PRODUCTION_PRIORITY, SUBMIT_LATENCY_S, WINDOW_START_US,
    trace_time,
)
from tools.trace.google2011.survey import Survey, ground_truth, survey


def import_google2011(task_events, job_events, out, capacity: CapacityModel | None = None,
                      limit: int | None = None, cell: str = "google-2011", cell_model: CellModel | None = None,
                      machine_events: str | None = None, keep_unscheduled_at_open: bool = False) -> ImportStats:
    """Write the omega trace of task_events/job_events parts to ``out``; the counts. On an
    error nothing is written at ``out``. ``task_events``/``job_events``: a part file, or
    consecutive part files in time order (one trace); a trace that does not start at 0 opens at
    its first row with the state inferred from its rows (``opening_rows``). ``cell_model``: overcommit (default) or plain;
    ``machine_events``: the trace's machine_events part file (real capacities, machines added
    and removed), else the capacity model's seeded draw (``tools.trace.google2011.cell``)."""
    capacity = capacity or CapacityModel()
    cell_model = cell_model or CellModel()
    s = survey(task_events, job_events, limit)
    if not keep_unscheduled_at_open:
        s.left_out_rows = frozenset(s.held_at_open.values())
    stats = ImportStats()
    if s.dropped_job_rows:
        stats.skipped["job_events rows dropped (not 8 columns)"] = s.dropped_job_rows
    for what, n in s.grouping.items():  # printed with the import summary
        stats.skipped[f"inferred grouping: {what}"] = n
    for what, n in s.carried.items():
        stats.skipped[f"inferred opening state: tasks {what}"] = n
    if s.window_us != WINDOW_START_US:
        stats.warnings.append(
            "the trace does not start at part 0: tasks running or pending throughout that show no row in the parts "
            "read are not seen, so the opening state is partial and the ground truth's occupancy is a lower bound "
            "(import parts 0..N as one trace to compare occupancy)")
    if s.window_us != WINDOW_START_US and machine_events is None:
        stats.skipped["inferred cell: machines named by the parts' task rows (--machine-events gives them all)"] = \
            len(s.machine_ids)
    if cell_model.name == "plain" and machine_events is None:  # the cell of importer revision 3, unchanged
        machines = [Machine(id=f"m{m}", capacity=capacity.capacity(m)) for m in s.machine_ids]
        text, events = capacity.describe(), job_and_task_events(s, stats)
    else:
        machines, text, events = _cell(s, capacity, cell_model, machine_events, stats)
    header = TraceHeader(
        source=f"google clusterdata-2011-2 task_events={s.source} job_events={_names(job_events)}"
               + (f" machine_events={machine_events}" if machine_events else "")
               + (f" limit={limit} rows" if limit is not None else ""),
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        capacity_model=text, cell=cell, submit_latency_s=SUBMIT_LATENCY_S,
        notes=f"importer revision {IMPORTER_REVISION}; submissions reach the scheduler {SUBMIT_LATENCY_S:g} s late "
              f"(calibrated on part 0, docs/EXPERIMENTS.md); t = max(0, (timestamp_us - {s.window_us})/1e6) (the window "
              f"opens at {s.window_us} us" + ("" if not s.carried else "; the opening state inferred from the part's "
                                              "rows: " + ", ".join(f"{n} tasks {what}" for what, n in s.carried.items()))
              + ("" if keep_unscheduled_at_open else
                 f"; {len(s.left_out_rows)} tasks pending at the opening that no row schedules left out (held by "
                 "what the imported tables do not carry; --keep-unscheduled-at-open keeps them)")
              + "); a batch = the "
              "consecutive SUBMIT rows of a job with no SCHEDULE of the job (after t = 0) nor other row of a "
              "task of the batch between them, equal priority, requests and different-machine flag, no task twice; submitted at its last row; "
              "inferred: " + ", ".join(f"{what} {n}" for what, n in s.grouping.items())
              + "; see docs/TRACE_FORMAT.md")
    truth = ground_truth(s, [m.capacity for m in machines])
    with TraceWriter(out, header, atomic=True, truth=truth) as writer:
        for machine in machines:
            writer.write(MachineAdd(0.0, machine))
        stats.events["MachineAdd"] += len(machines)
        for event in events:
            writer.write(event)
            stats.events[type(event).__name__] += 1
    return stats


def _names(paths) -> str:
    return str(paths) if isinstance(paths, str) else ",".join(map(str, paths))


def _physical(s: Survey, capacity: CapacityModel, machine_events: str | None,
              stats: ImportStats) -> tuple[list[str], dict[str, Resources], MachineEvents | None, str]:
    """The machine ids up at t = 0, their physical capacities, the machine_events table and the
    capacities in words."""
    if machine_events is None:
        return (list(s.machine_ids), {m: capacity.capacity(m) for m in s.machine_ids}, None,
                "physical capacities: " + capacity.describe())
    table = read_machine_events(machine_events, s.window_us, s.last_us)
    ids = sorted(set(s.machine_ids) | set(table.at_open), key=int)
    physical = {}
    for m in ids:
        physical[m] = _capacity_of(m, table.at_open.get(m, (None, None)), capacity, stats,
                                   "machine not up in machine_events at t = 0" if m not in table.at_open else "")
    if table.updates_ignored:
        stats.skipped["machine_events UPDATE rows after t = 0 (not applied: no capacity-change event)"] = \
            table.updates_ignored
    return ids, physical, table, (
        f"physical capacities: machine_events={machine_events} (normalized CPUs and memory scaled as the "
        f"tasks'; each machine's last ADD/UPDATE at or before the window opens; ADD/REMOVE after it -> "
        f"machine_add/machine_remove; blank amounts and machines it lacks: " + capacity.describe() + ")")


def _capacity_of(machine_id: str, amounts: tuple[float | None, float | None], capacity: CapacityModel,
                 stats: ImportStats, missing: str = "") -> Resources:
    """Physical capacity of a machine from machine_events amounts (blanks: the capacity model's draw)."""
    cpu, memory = amounts
    if cpu is None or memory is None:
        stats.skipped[missing or "machine_events capacity blank (drawn from the capacity model)"] += 1
        drawn = capacity.normalized(machine_id)
        cpu = drawn[0] if cpu is None else cpu
        memory = drawn[1] if memory is None else memory
    return Resources(round(cpu * CPU_SCALE), round(memory * MEMORY_SCALE), DISK_SCALE)


def _cell(s: Survey, capacity: CapacityModel, cell_model: CellModel, machine_events: str | None,
          stats: ImportStats):
    """(the machines at t = 0, the capacity model in words, the other events in time order) of
    the cell model and capacities (``tools.trace.google2011.cell``). The overcommit model reads
    pass 2's t = 0 events first (its capacities hold the recorded t = 0 state), then hands them on."""
    ids, physical, table, text = _physical(s, capacity, machine_events, stats)
    overcommit = cell_model.name == "overcommit"
    events = job_and_task_events(s, stats, prod_extra=overcommit)
    oc: Overcommit | None = None
    if overcommit:
        prefix, jobs, placed = [], {}, []
        for event in events:
            prefix.append(event)
            if event.t > 0:
                break
            if isinstance(event, JobSubmit):
                jobs[event.job.id] = event.job
            elif isinstance(event, TaskPlaced) and event.job_id in jobs:
                job = jobs[event.job_id]
                placed.append((event.machine_id[1:], job.request, job.priority >= PRODUCTION_PRIORITY))
        oc = overcommit_cell(physical, placed, cell_model.reclaim, CPU_SCALE, MEMORY_SCALE)
        events = _chain(prefix, events)
        text = oc.describe(CPU_SCALE, MEMORY_SCALE) + "; " + text
        machines = [Machine(id=f"m{m}", capacity=oc.capacity(m)) for m in ids]
    else:
        text = "cell model plain (every task against capacity); " + text
        machines = [Machine(id=f"m{m}", capacity=physical[m]) for m in ids]
    if table is not None and table.later:
        events = heapq.merge(events, _machine_changes(table, capacity, oc, stats, s.window_us), key=_T)
    return machines, text, events


def _T(event) -> float:
    return event.t


def _chain(prefix: list, rest):
    yield from prefix
    yield from rest


def _machine_changes(table: MachineEvents, capacity: CapacityModel, oc: Overcommit | None, stats: ImportStats,
                     window_us: int):
    """machine_add / machine_remove of the machine_events rows after t = 0, in time order."""
    for ts, machine_id, kind, cpu, memory in table.later:
        t = trace_time(ts, window_us)
        if kind == ADD:
            phys = _capacity_of(machine_id, (cpu, memory), capacity, stats)
            cap = phys if oc is None else oc.later(phys.cpu, phys.memory, phys.disk)
            yield MachineAdd(t, Machine(id=f"m{machine_id}", capacity=cap))
        else:
            yield MachineRemove(t, f"m{machine_id}")
