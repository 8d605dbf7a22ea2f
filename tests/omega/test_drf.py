"""Dominant Resource Fairness as a queue order: the paper's example through a real scheduler,
placer and committer on a MemoryStore; progressive filling, weights, ties, priority bands,
incremental usage, bad input."""

from __future__ import annotations

import math

import pytest

from fakeview import FakeClock
from cellstate.check import check_cell
from cellstate.codec.records import encode_machine
from cellstate.committer import StoreCommitter
from cellstate.keys import CellKeys
from cellstate.memory.store import MemoryStore
from cellstate.model import Alloc, Job, JobKind, JobRecord, Machine, MachineState, TaskState
from cellstate.replica.view import ReplicaView
from cellstate.resources import Resources
from cellstate.stats_sink import LeasedStatsSink
from cellstate.store import Put
from cellstate.submit import submit_jobs
from omega.drf import CellUsage, DrfOrder, parse_weight_flags, parse_weights
from cellstate.plan import JobEntry, MachineEntry
from omega.queue import FairOrder, JobQueue, make_order
from omega.runtime import RuntimeOptions, SchedulerProcess
from runtime_helpers import job_records
from schedulers.chains import make_scheduler, retry_policy_for

# The paper's example (Ghodsi et al. §4): <9 CPU, 18 GB>; A's tasks <1 CPU, 4 GB>, B's <3 CPU, 1 GB>.
CELL = Resources(9000, 18 * 1024, 100_000)
A_TASK, B_TASK = Resources(1000, 4 * 1024), Resources(3000, 1024)


def job(job_id, owner, request=A_TASK, tasks=1, priority=0, submitted=0.0, pending=None) -> JobEntry:
    spec = Job(job_id, JobKind.BATCH, tasks, request, priority=priority, owner=owner)
    record = JobRecord.new(spec, submitted)
    if pending is not None:
        record = record.with_tasks(range(pending, tasks), TaskState.PLACED)
    return JobEntry(record, 1)


class CellOf:
    """A CellView of machines, jobs and allocations held in dicts (what DRF reads of a view)."""

    def __init__(self, machines=(Machine("m0", CELL),)):  # noqa: B008 (a frozen Machine)
        self.entries = {m.id: MachineEntry(m, 1) for m in machines}
        self.jobs: dict[str, JobEntry] = {}
        self.on: dict[str, list[Alloc]] = {}

    def machines(self):
        return self.entries.values()

    def allocs_on(self, machine_id):
        return self.on.get(machine_id, [])

    def job(self, job_id):
        return self.jobs.get(job_id)

    def place(self, entry: JobEntry, machine_id="m0", tasks=1) -> None:
        """Charge ``tasks`` tasks of ``entry`` to a machine (its revision moves, as a commit's)."""
        self.jobs[entry.id] = entry
        allocs = self.on.setdefault(machine_id, [])
        for _ in range(tasks):
            allocs.append(Alloc(entry.id, len(allocs), machine_id, entry.record.job.request))
        held = self.entries[machine_id]
        self.entries[machine_id] = MachineEntry(held.machine, held.mod_revision + 1)


def ids(jobs) -> list[str]:
    return [e.id for e in jobs]


def many(owner, count, request, submitted=0.0, priority=0):
    return [job(f"{owner}{i}", owner, request, submitted=submitted, priority=priority) for i in range(count)]


# -- the order itself ---------------------------------------------------------------------------


def test_progressive_filling_reproduces_the_papers_sequence():
    # shares after each pick: A 2/9, B 1/3, A 4/9, B 2/3, A 2/3, then A (tie, owner order)
    order = DrfOrder(CellOf())
    arranged = ids(order.arrange(many("A", 5, A_TASK) + many("B", 3, B_TASK)))
    assert arranged == ["A0", "B0", "A1", "B1", "A2", "A3", "B2", "A4"]


def test_one_arrangement_equals_drf_step_by_step():
    """Placing the first job of each fresh ordering (usage from the view) gives the same
    sequence as one progressive ordering."""
    jobs = many("A", 4, A_TASK) + many("B", 3, B_TASK) + many("C", 3, Resources(2000, 2048))
    at_once = ids(DrfOrder(CellOf()).arrange(jobs))
    view, pending, stepwise = CellOf(), list(jobs), []
    order = DrfOrder(view)
    while pending:
        first = next(iter(order.arrange(pending)))
        view.place(first)
        pending.remove(first)
        stepwise.append(first.id)
    assert stepwise == at_once


@pytest.mark.parametrize("weights, expected", [
    ({}, ["A0", "B0", "A1", "B1", "A2"]),
    ({"A": 3}, ["A0", "B0", "A1", "A2", "A3"]),  # A's shares ÷ 3: 0.07, 0.15, 0.22, 0.30 < B's 1/3
    ({"B": 0.5}, ["A0", "B0", "A1", "A2", "A3"]),  # B's share × 2: 2/3 after one task
], ids=["unweighted", "A-weight-3", "B-weight-half"])
def test_weights_divide_the_dominant_share(weights, expected):
    order = DrfOrder(CellOf(), weights)
    assert ids(order.arrange(many("A", 4, A_TASK) + many("B", 4, B_TASK)))[:5] == expected


def test_ties_go_to_owner_then_submission_then_job_id():
    jobs = [job("b-old", "b", submitted=1.0), job("a-z", "a", submitted=2.0), job("a-y", "a", submitted=2.0),
            job("a-old", "a", submitted=1.5)]
    # equal shares (zero) → owner "a" first (its oldest job); b catches up; tied again → a, by id
    assert ids(DrfOrder(CellOf()).arrange(jobs)) == ["a-old", "b-old", "a-y", "a-z"]


def test_current_usage_from_the_view_puts_the_heavy_owner_last():
    view = CellOf()
    view.place(job("old", "A", tasks=2), tasks=2)  # A holds 8 GB: share 4/9
    order = DrfOrder(view)
    assert order.shares() == {"A": pytest.approx(8 / 18)}
    assert ids(order.arrange(many("A", 2, A_TASK) + many("B", 3, B_TASK))) == ["B0", "B1", "A0", "A1", "B2"]


def test_priority_bands_come_first_and_shares_carry_over():
    jobs = [job("lo-b", "B", B_TASK, priority=0), job("hi-a1", "A", priority=5), job("hi-a2", "A", priority=5),
            job("lo-a", "A", priority=0, submitted=0.0)]
    # A's high-priority demand (8 GB, 4/9) counts in the low band: B's 0 goes first there
    assert ids(DrfOrder(CellOf()).arrange(jobs)) == ["hi-a1", "hi-a2", "lo-b", "lo-a"]


def test_pending_demand_is_request_times_pending_tasks():
    big = job("big", "A", A_TASK, tasks=4, pending=2)  # 2 tasks pending: 8 GB, share 4/9
    jobs = [big, job("a2", "A", submitted=1.0), *many("B", 2, B_TASK, submitted=1.0)]
    assert ids(DrfOrder(CellOf()).arrange(jobs)) == ["big", "B0", "B1", "a2"]


def test_resources_the_cell_lacks_do_not_count():
    order = DrfOrder(CellOf())
    gpu = job("gpu", "A", Resources.of(100, 100, gpu=1))
    assert ids(order.arrange([gpu, job("b", "B", B_TASK)])) == ["gpu", "b"]
    assert order.usage.capacity.get("gpu") is None


# -- usage kept incrementally --------------------------------------------------------------------


def _recount(view) -> dict[str, dict[str, int]]:
    used: dict[str, dict[str, int]] = {}
    for entry in view.machines():
        for alloc in view.allocs_on(entry.machine.id):
            owner = view.job(alloc.job_id).record.job.owner
            for name, amount in alloc.resources.to_dict().items():
                if amount:
                    used.setdefault(owner, {}).setdefault(name, 0)
                    used[owner][name] += amount
    return used


def test_usage_rescans_only_changed_machines_and_drops_gone_ones():
    view = CellOf([Machine(f"m{i}", CELL) for i in range(4)])
    usage = CellUsage()
    view.place(job("a", "A", tasks=2), "m0", 2)
    view.place(job("b", "B", B_TASK), "m1")
    usage.refresh(view)
    assert usage.rescanned == 4 and usage.used == _recount(view)
    assert usage.capacity["cpu"] == 4 * 9000
    usage.refresh(view)
    assert usage.rescanned == 0
    view.place(job("b2", "B", B_TASK), "m2")
    usage.refresh(view)
    assert usage.rescanned == 1 and usage.used == _recount(view)
    del view.entries["m1"], view.on["m1"]  # machine gone with its allocation
    down = view.entries["m3"]
    view.entries["m3"] = MachineEntry(Machine("m3", CELL, state=MachineState.DOWN), down.mod_revision + 1)
    usage.refresh(view)
    assert usage.used == _recount(view) == {"A": {"cpu": 2000, "memory": 8192}, "B": {"cpu": 3000, "memory": 1024}}
    assert usage.capacity["cpu"] == 2 * 9000  # m1 gone, m3 down


def test_allocation_of_a_job_not_yet_seen_is_counted_once_the_job_arrives():
    view = CellOf()
    early = job("early", "A")
    view.place(early)
    del view.jobs["early"]
    usage = CellUsage()
    usage.refresh(view)
    assert usage.used == {}
    view.jobs["early"] = early
    usage.refresh(view)
    assert usage.used == {"A": {"cpu": 1000, "memory": 4096}}


# -- the classic example end to end: real scheduler, placer, committer, MemoryStore ----------------


def run_cell(order: str, batch_jobs: int, weights=None) -> dict[str, int]:
    """Serve the paper's cell with one batch scheduler until nothing more fits; tasks placed
    per owner (A's jobs submitted before B's, 8 one-task jobs each)."""
    store, keys = MemoryStore(), CellKeys("drf")
    store.txn((), [Put(keys.machine("m0"), encode_machine(Machine("m0", CELL)))])
    submit_jobs(store, keys, [Job(f"a{i}", JobKind.BATCH, 1, A_TASK, owner="A") for i in range(8)], 1.0)
    submit_jobs(store, keys, [Job(f"b{i}", JobKind.BATCH, 1, B_TASK, owner="B") for i in range(8)], 2.0)
    view = ReplicaView(store, keys)
    options = RuntimeOptions(batch_jobs=batch_jobs, order=order, drf_weights=weights or {})
    process = SchedulerProcess(make_scheduler("batch", "drf-batch", 1), view, StoreCommitter(store, keys),
                               LeasedStatsSink(store, keys, "drf-batch"), retry=retry_policy_for("batch"),
                               clock=FakeClock(), options=options)
    for _ in range(100):
        if not process.work_round():
            break
    else:
        raise AssertionError("the scheduler never ran out of jobs to try")
    assert check_cell(store, keys).ok
    placed = {"A": 0, "B": 0}
    for record in job_records(store, keys):
        placed[record.job.owner] += record.tasks.count("a")
    return placed


@pytest.mark.parametrize("order, batch_jobs, weights, expected", [
    ("drf", 1, None, {"A": 3, "B": 2}),
    ("drf", 16, None, {"A": 3, "B": 2}),
    ("drf", 16, {"A": 3}, {"A": 4, "B": 1}),
    ("fair", 1, None, {"A": 4, "B": 1}),  # round-robin has no memory of usage: oldest owner each round
], ids=["drf-one-job-per-round", "drf-one-select", "drf-weighted", "fair-differs"])
def test_papers_example_end_to_end(order, batch_jobs, weights, expected):
    assert run_cell(order, batch_jobs, weights) == expected


# -- the queue hook and bad input ------------------------------------------------------------------


def test_queue_select_uses_the_order_and_skips_backing_off_jobs_before_ordering():
    queue = JobQueue("s1", order=DrfOrder(CellOf()))
    jobs = many("A", 3, A_TASK) + many("B", 2, B_TASK)
    queue.defer("A0", now=0.0)
    # A0 backs off: its demand is not charged, so A1 is A's first job
    assert ids(queue.select(jobs, [], now=0.1, limit=4)) == ["A1", "B0", "A2", "B1"]
    assert isinstance(JobQueue("s1").order, FairOrder)


@pytest.mark.parametrize("name, view, weights, message", [
    ("lottery", None, None, "unknown queue order 'lottery'; known: fair, drf"),
    ("drf", None, None, "needs the cell view"),
    ("fair", None, {"A": 2}, "given, but the queue order is 'fair'"),
    ("drf", CellOf(), {"A": 0}, "must be a finite number > 0"),
], ids=["unknown-name", "drf-without-view", "weights-with-fair", "zero-weight"])
def test_make_order_refuses_bad_input(name, view, weights, message):
    with pytest.raises(ValueError, match=message):
        make_order(name, view, weights)


@pytest.mark.parametrize("weights, message", [
    ({"A": -1}, "finite number > 0, got -1"),
    ({"A": math.nan}, "finite number > 0"),
    ({"A": math.inf}, "finite number > 0"),
    ({"A": "2"}, "must be a number, got '2'"),
    ({"A": True}, "must be a number"),
    ({"": 1}, "non-empty string"),
    ([("A", 1)], "must map owner names"),
], ids=["negative", "nan", "inf", "string", "bool", "empty-owner", "not-a-mapping"])
def test_bad_weights_are_refused(weights, message):
    with pytest.raises(ValueError, match=message):
        parse_weights(weights)
    with pytest.raises(ValueError, match=message):
        RuntimeOptions(order="drf", drf_weights=weights)


@pytest.mark.parametrize("flags, message", [
    (["A"], "expected OWNER=WEIGHT"),
    (["=2"], "expected OWNER=WEIGHT"),
    (["A=two"], "'two' is not a number"),
    (["A=1", "A=2"], "given twice"),
    (["A=0"], "finite number > 0"),
], ids=["no-equals", "no-owner", "not-a-number", "duplicate", "zero"])
def test_bad_weight_flags_are_refused(flags, message):
    with pytest.raises(ValueError, match=message):
        parse_weight_flags(flags)


def test_weight_flags_parse():
    assert parse_weight_flags(["A=2", " B = 0.5"]) == {"A": 2.0, "B": 0.5}


def test_runtime_options_refuse_an_unknown_order():
    with pytest.raises(ValueError, match="unknown queue order 'drff'"):
        RuntimeOptions(order="drff")
