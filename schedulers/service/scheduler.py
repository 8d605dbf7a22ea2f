"""The service scheduler: careful. Diego's ordering, the best machine of all feasible ones:
spread across zones first, then machines within a zone, then the least-loaded machine.

Two ways to find that machine, same choice: the indexed search (default, for the default
chain and chains of the same shape, see ``schedulers.service.search``) scores a few
candidates per zone from a machine index kept across decisions; the full scan
(``exhaustive=True``, and any other chain) checks every machine once per job, then ranks
every feasible machine for every task, re-checking only the touched machines after each
reservation. Gang jobs get all their tasks or none; a failed gang job's reservations are
released before the next decision in the batch is returned.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import repeat
from typing import Sequence

from cellstate.model import Job, JobKind, Machine
from cellstate.plan import Claim, JobEntry
from omega.host import Attachment, SchedulerHost
from omega.protocols import CellView
from schedulers.base import (
    Decision,
    checked_tasks,
    gang_outcome,
    new_claim,
    new_decision,
)
from schedulers.fit_memo import nothing_fits_memo
from schedulers.pipeline import Pipeline, Rejections
from schedulers.placement_cache import HostMemo, PlacementCache
from schedulers.plugin import ScoreContext, Verdict
from schedulers.reservation import Reservations
from schedulers.service.index import MachineIndex
from schedulers.service.search import SpreadSearch, fast_chain


def _size(job: Job) -> tuple[int, int, int]:
    r = job.request
    return r.memory, r.cpu, r.disk


def order_batch(jobs: Sequence[tuple[JobEntry, Sequence[int]]]) -> list[tuple[JobEntry, int]]:
    """Diego's auction order: the first instance of every service job (one with no live
    task yet) by size descending; then batch-kind tasks by size descending; then the
    remaining instances by their rank within their job, then size descending.
    Size is (memory, cpu, disk); ties break by job id, then task index. So one job's tasks
    come in index order (the common case, answered without building the sort keys)."""
    if len(jobs) == 1:
        entry, tasks = jobs[0]
        return list(zip(repeat(entry), sorted(tasks)))
    firsts, batch, rest = [], [], []
    for entry, tasks in jobs:
        spec = entry.record.job
        size = tuple(-x for x in _size(spec))
        ordered = sorted(tasks)
        if spec.kind is JobKind.BATCH:
            batch.extend((size, entry.id, t, entry) for t in ordered)
            continue
        has_live = "a" in entry.record.tasks or "r" in entry.record.tasks
        for rank, t in enumerate(ordered):
            if rank == 0 and not has_live:
                firsts.append((size, entry.id, t, entry))
            else:
                rest.append((rank, size, entry.id, t, entry))
    firsts.sort(key=lambda x: x[:3])
    batch.sort(key=lambda x: x[:3])
    rest.sort(key=lambda x: x[:4])
    return [(x[-1], x[-2]) for x in firsts + batch + rest]


@dataclass(slots=True)
class _JobFeasibility:
    """One job's feasible machines and, for the others, the verdict that excluded them."""

    feasible: dict[str, Machine] = field(default_factory=dict)
    rejected: dict[str, Verdict] = field(default_factory=dict)

    def reason(self) -> str:
        tally = Rejections()
        for verdict in self.rejected.values():
            tally.add(verdict)
        return tally.reason()


class ServiceScheduler:
    """Full-scan placement with zone/machine anti-affinity and least-loaded preference.
    Deterministic: equally ranked machines are broken by machine id."""

    kind = "service"
    unplaced_means_no_room = True  # never preempts; unplaced only when no machine passes (fit_memo)

    def attach(self, host: SchedulerHost) -> Attachment:
        """The nothing-fits memo filters its candidates."""
        return Attachment(candidate_filter=nothing_fits_memo(self, host))

    def __init__(self, name: str, pipeline: Pipeline | None = None, exhaustive: bool = False) -> None:
        """``exhaustive``: always take the full scan (the baseline of the indexed search)."""
        if pipeline is None:
            from schedulers.chain_spec import service_pipeline
            pipeline = service_pipeline({})
        if not isinstance(exhaustive, bool):
            raise ValueError(f"ServiceScheduler {name!r}: exhaustive must be a bool, got {exhaustive!r}")
        self.name = name
        self.pipeline = pipeline
        self.chain = None if exhaustive else fast_chain(pipeline)
        self.index = MachineIndex(self.chain.resources, self.chain.accept) if self.chain else None
        self._base_free: dict = {}  # machine id -> (Machine, its free), see Reservations
        self._placements = PlacementCache()  # jobs' placements across decisions
        self._hosts = HostMemo()  # failing big jobs' hosts in the index, across decisions

    @property
    def exhaustive(self) -> bool:
        """True when every decision takes the full scan."""
        return self.chain is None

    order_batch = staticmethod(order_batch)

    def decide(self, job: JobEntry, tasks: list[int], view: CellView) -> Decision:
        """Claims for ``tasks`` of ``job``, fitting cumulatively on ``view``."""
        return self.decide_batch([(job, tasks)], view)[job.id]

    def decide_batch(self, jobs: Sequence[tuple[JobEntry, Sequence[int]]],
                     view: CellView) -> dict[str, Decision]:
        """Decisions for several jobs in Diego's order, sharing one reservation overlay.
        A gang job that cannot get every task releases its reservations at once."""
        checked = [(job, checked_tasks(job, tasks)) for job, tasks in jobs]
        ids = [job.id for job, _ in checked]
        if len(set(ids)) != len(ids):
            raise ValueError(f"decide_batch: a job is listed twice in {ids}")
        if self.chain is not None:
            return self._decide_indexed(checked, view)
        reservations = Reservations(view)
        states = {job.id: self._scan(job.record.job, view, reservations) for job, _ in checked}
        decisions = {job.id: Decision() for job, _ in checked}
        for job, task in order_batch(checked):
            decision = decisions[job.id]
            if job.record.job.gang and decision.unplaced:
                decision.unplaced[task] = next(iter(decision.unplaced.values()))
                continue
            self._place(job, task, reservations, states[job.id], decision)
            if job.record.job.gang and decision.unplaced:
                self._release(job, decision, reservations)
        return {job.id: gang_outcome(job, tasks, decisions[job.id]) for job, tasks in checked}

    def _decide_indexed(self, checked: list[tuple[JobEntry, list[int]]], view: CellView) -> dict[str, Decision]:
        """``decide_batch`` by the indexed search (same choices as the full scan). With one job,
        nothing is reserved after its first unplaced task, so the rest share that reason."""
        if len(self._base_free) > 2 * view.machine_count() + 1024:
            self._base_free.clear()
        self.index.sync(view)
        reservations = Reservations(view, self._base_free, machines=self.index.machines, placements=self._placements)
        search = SpreadSearch(self.index, self.pipeline, self.chain, reservations, self._hosts)
        decisions = {job.id: new_decision([], {}) for job, _ in checked}
        alone = sorted(checked[0][1]) if len(checked) == 1 else None  # one job: its tasks in order
        try:
            order = zip(repeat(checked[0][0]), alone) if alone is not None else order_batch(checked)
            best, reserve, placement_of = search.best, search.reserve, search.reservations.placement
            for at, (job, task) in enumerate(order):
                decision = decisions[job.id]
                spec = job.record.job
                if spec.gang and decision.unplaced:
                    decision.unplaced[task] = next(iter(decision.unplaced.values()))
                    continue
                machine, why = best(spec, placement_of(job.id))
                if machine is not None:
                    reserve(job.id, machine, spec.request)
                    decision.claims.append(new_claim(task, machine.id, spec.request, ()))
                    continue
                if alone is not None:  # the job's first unplaced task: the rest share its reason
                    decision.unplaced = dict.fromkeys(alone[at:], why)
                else:
                    decision.unplaced[task] = why
                if spec.gang:
                    for claim in decision.claims:
                        search.release(job.id, self.index.machines[claim.machine_id], claim.request)
                    decision.claims.clear()
                if alone is not None:
                    break
        finally:
            search.restore()
        return {job.id: gang_outcome(job, tasks, decisions[job.id]) for job, tasks in checked}

    def _scan(self, spec: Job, view: CellView, reservations: Reservations) -> _JobFeasibility:
        state = _JobFeasibility()
        placement = reservations.placement(spec.id)
        check = self.pipeline.check
        for entry in view.machines():
            machine = entry.machine
            verdict = check(spec, machine, reservations.free(machine), placement.on_machine(machine.id))
            if verdict.ok:
                state.feasible[machine.id] = machine
            else:
                state.rejected[machine.id] = verdict
        return state

    def _resync(self, spec: Job, state: _JobFeasibility, reservations: Reservations) -> None:
        """Re-check the machines this decision reserved on or released (all else is unchanged)."""
        placement = reservations.placement(spec.id)
        for machine_id in reservations.touched:
            machine = state.feasible.pop(machine_id, None)
            if machine is None:
                if state.rejected.pop(machine_id, None) is None:
                    continue  # not in the view when this job scanned it
                machine = self._machine_of(machine_id, reservations)
                if machine is None:
                    continue
            verdict = self.pipeline.check(spec, machine, reservations.free(machine),
                                          placement.on_machine(machine_id))
            if verdict.ok:
                state.feasible[machine_id] = machine
            else:
                state.rejected[machine_id] = verdict

    @staticmethod
    def _machine_of(machine_id: str, reservations: Reservations) -> Machine | None:
        entry = reservations.view.machine(machine_id)
        return entry.machine if entry else None

    def _place(self, job: JobEntry, task: int, reservations: Reservations,
               state: _JobFeasibility, decision: Decision) -> None:
        """Reserve the best-ranked feasible machine for ``task`` or record why none fits."""
        spec = job.record.job
        self._resync(spec, state, reservations)
        ctx = ScoreContext(reservations.placement(job.id))
        rank_of = self.pipeline.rank
        best = best_rank = None
        for machine_id, machine in state.feasible.items():
            rank = rank_of(spec, machine, reservations.free(machine), ctx)
            if best is None or rank > best_rank or (rank == best_rank and machine_id < best.id):
                best, best_rank = machine, rank
        if best is None:
            decision.unplaced[task] = state.reason()
            return
        reservations.reserve(job.id, best, spec.request)
        decision.claims.append(Claim(task, best.id, spec.request))

    def _release(self, job: JobEntry, decision: Decision, reservations: Reservations) -> None:
        """Give back every reservation of ``job`` in this decision (failed gang)."""
        for claim in decision.claims:
            machine = self._machine_of(claim.machine_id, reservations)
            if machine is not None:
                reservations.release(job.id, machine, claim.request)
        decision.claims.clear()
