"""The batch scheduler: fast. Power-of-k-choices over a seeded shuffle of machine ids.

Per task: walk the shuffled ids from a cursor, ``sample_size`` machines per round, until
``k`` feasible machines are found, and take the best ranked. After ``sample_rounds``
fruitless rounds, scan the whole shuffled list so an almost full cell still finds its
last hole. On a view that reports its changed machines (``ReplicaView``) and a chain the
index handles exactly, the rounds and that scan examine only the machines whose free
resources hold the request (``schedulers.free_index``): the same machines are found in the
same order, the cursor ends in the same place and the rejection tally (the job's reason) is
the same. Tasks of a job are identical and reservations only shrink what is free, so once
a full scan finds nothing, the job's remaining tasks are unplaced with the same reason.

Peers of the batch class (``share_machines``, called by the live runtime with the live
peers): all of them order the machines by one shared shuffle and each starts its walks at a
random point of its own equal part of that order, so peers prefer disjoint machines first
and fewer commits fail on a machine another peer has just written. Alone (and in replays,
which do not call it) a scheduler starts anywhere in its own shuffle, as before.
"""

from __future__ import annotations

import random

from cellstate.model import Job, Machine
from cellstate.resources import Resources
from cellstate.plan import JobEntry
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
from schedulers.free_index import FreeIndex, chain_applies, first_fit
from schedulers.pipeline import NO_MACHINES, Pipeline, Rejections
from schedulers.placement_cache import HostMemo, PlacementCache
from schedulers.plugin import JobPlacement, score_context
from schedulers.reservation import Reservations


class BatchScheduler:
    """Randomized first fit / best of ``k`` sampled feasible machines."""

    kind = "batch"
    unplaced_means_no_room = True
    """It never preempts and leaves a task unplaced only when no machine passes its filters for
    it (on the view plus its own claims): its cycle may skip it while nothing fits (fit_memo)."""

    def attach(self, host: SchedulerHost) -> Attachment:
        """Told its live peers (``share_machines``); the nothing-fits memo filters its candidates."""
        return Attachment(share_machines=self.share_machines, candidate_filter=nothing_fits_memo(self, host))

    def __init__(self, name: str, rng: random.Random, k: int = 2, sample_size: int = 16,
                 sample_rounds: int = 3, pipeline: Pipeline | None = None) -> None:
        for label, value in (("k", k), ("sample_size", sample_size), ("sample_rounds", sample_rounds)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"BatchScheduler {name!r}: {label} must be an int >= 1, got {value!r}")
        if not isinstance(rng, random.Random):
            raise ValueError(f"BatchScheduler {name!r}: rng must be a random.Random, got {rng!r}")
        if pipeline is None:
            from schedulers.chain_spec import batch_pipeline
            pipeline = batch_pipeline({})
        self.name = name
        self.rng = rng
        self.k = k
        self.sample_size = sample_size
        self.sample_rounds = sample_rounds
        self.pipeline = pipeline
        self._ids: list[str] = []
        self._count = -1
        self._cursor = 0
        self._base_free: dict = {}  # machine id -> (Machine, its free): saves recomputing ledgers
        self._placements = PlacementCache()  # jobs' placements across decisions
        self._hosts = HostMemo()  # a failing big job's hosts in the free index, across decisions
        self._index: FreeIndex | None = None
        self._indexed_chain: tuple[tuple, bool, tuple] = ((), False, ((), None))  # (filters, chain_applies, first_fit)
        self._crew: tuple[str, ...] = ()  # the live peers of its class, itself included (share_machines)
        self._part = (0, 0)  # the part of the ids its walks start in: [start, end)

    def share_machines(self, crew) -> None:
        """The live schedulers of this one's class (itself included or not): with more than
        one, the machines are ordered by a shuffle every peer shares and this scheduler starts
        its walks in its own part of it (see the module docstring)."""
        crew = tuple(sorted(set(crew) | {self.name}))
        if crew != self._crew:
            self._crew = crew
            self._count = -1  # order the ids again

    def decide(self, job: JobEntry, tasks: list[int], view: CellView) -> Decision:
        """Claims for ``tasks`` of ``job``, fitting cumulatively on ``view``."""
        tasks = checked_tasks(job, tasks)
        ids = self._machine_ids(view)
        if not ids:
            return gang_outcome(job, tasks, new_decision([], dict.fromkeys(tasks, NO_MACHINES)))
        spec = job.record.job
        reservations = Reservations(view, self._base_free, placements=self._placements)
        placement = reservations.placement(job.id)
        start, end = self._part
        self._cursor = start + self.rng.randrange(end - start)
        index = self._index_for(view, spec.request)
        decision = new_decision([], {})
        claims, request = decision.claims, spec.request
        binds = request.extra and self.pipeline.binds  # the chain chooses devices (Pipeline.bind)
        for i, task in enumerate(tasks):
            machine, reason = self._place_one(spec, view, reservations, placement, index)
            if machine is None:
                decision.unplaced = dict.fromkeys(tasks[i:] if i else tasks, reason)
                break
            bound = self.pipeline.bind(spec, machine, reservations.free(machine)) if binds else request
            reservations.reserve(job.id, machine, bound)
            claims.append(new_claim(task, machine.id, bound, ()))
        return gang_outcome(job, tasks, decision)

    def _machine_ids(self, view: CellView) -> list[str]:
        """The cached shuffled machine ids, refreshed when the machine count changed."""
        count = view.machine_count()
        if count != self._count:
            self._ids = ids = sorted(entry.id for entry in view.machines())
            crew, n = self._crew, len(ids)
            if len(crew) > 1:
                random.Random(f"omega-batch-peers/{n}").shuffle(ids)  # the same order at every peer
                at = crew.index(self.name)
                self._part = (at * n // len(crew), max((at + 1) * n // len(crew), at * n // len(crew) + 1))
            else:
                self.rng.shuffle(ids)
                self._part = (0, n)
            self._count = n
            self._base_free.clear()
        return self._ids

    def _place_one(self, spec: Job, view: CellView, reservations: Reservations, placement: JobPlacement,
                   index: FreeIndex | None) -> tuple[Machine | None, str]:
        """The machine for one task: sampling rounds, then the full scan (by ``index`` if given)."""
        for _ in range(self.sample_rounds):
            if index is None:
                machine = self._walk(spec, view, reservations, placement, self.sample_size, None)
            else:
                machine = self._sample(index, spec, view, reservations, placement)
            if machine is not None:
                return machine, ""
        rejections = Rejections()
        if index is None:
            machine = self._walk(spec, view, reservations, placement, len(self._ids), rejections)
        else:
            machine = self._indexed_scan(index, spec, view, reservations, placement, rejections)
        return machine, "" if machine is not None else rejections.reason()

    def _index_for(self, view: CellView, request: Resources) -> FreeIndex | None:
        """The free index of ``view`` (built or refreshed), None when it does not apply."""
        if request.extra or not hasattr(view, "take_changed_machines") or not self._chain_indexed():
            return None
        index = self._index
        if index is None or index.view is not view or index.ids is not self._ids:
            index = self._index = FreeIndex(view, self._ids)
        else:
            index.refresh()
        return index

    def _chain_indexed(self) -> bool:
        """``chain_applies`` to the pipeline's filters, computed once per filters tuple."""
        filters = self.pipeline.filters
        if self._indexed_chain[0] is not filters:
            self._indexed_chain = (filters, chain_applies(filters), first_fit(filters))
        return self._indexed_chain[1]

    def _indexed_scan(self, index: FreeIndex, spec: Job, view: CellView, reservations: Reservations,
                      placement: JobPlacement, rejections: Rejections) -> Machine | None:
        """The full scan over the index's candidates only (see the module docstring)."""
        ids, n = self._ids, len(self._ids)
        placed = placement.machines
        feasible: list[tuple[Machine, Resources]] = []
        candidates = index.candidates(spec.request, self._cursor)
        for i in candidates:
            machine, free = self._examine(spec, view, reservations, placed, ids[i], rejections)
            if machine is None:
                continue
            feasible.append((machine, free))
            if len(feasible) >= self.k:
                self._cursor = i + 1 if i + 1 < n else 0
                return self._best(spec, feasible, placement)
        if not feasible:  # the full walk would have tallied every other machine too
            self._tally_the_rest(index, spec, view, reservations, placement, rejections)
        return self._best(spec, feasible, placement)

    def _tally_the_rest(self, index: FreeIndex, spec: Job, view: CellView, reservations: Reservations,
                        placement: JobPlacement, rejections: Rejections) -> None:
        """Tally the verdicts of the machines an indexed scan that found nothing did not examine.
        Machines not up go through the filters. The job's hosts that a filter before
        resources_fit rejects are tallied by that verdict, computed once per count of tasks
        (those filters read only the job and its tasks on an up machine, and each rejects from
        some count on: when none rejects the job's largest count, no host is looked up). Every
        other up machine lacks room in the view: resources_fit names its first short resource.
        (A machine this decision reserved on had room for the request in the view, so it was a
        candidate, examined with its reserved free.)"""
        ids, counts, placed = self._ids, rejections.counts, placement.machines
        for i in index.not_up():
            self._examine(spec, view, reservations, placed, ids[i], rejections)
        before, fit = self._indexed_chain[2]  # the chain's resource fit: the index applies
        blocked: list[int] = []
        if self._may_reject_hosts(index, spec, view, before, max(placed.values(), default=0)):
            hosts = self._hosts.get(spec.id, placed, index, index.hosts, index.join_hosts, placement.stamp)
            for here, group in index.hosts_without_room(spec.request, placed, hosts):
                machine = view.machine(ids[group[0]]).machine
                free = reservations.free(machine)
                verdict = next((v for v in (f.fits(spec, machine, free, here) for f in before) if not v.ok), None)
                if verdict is not None:
                    key = (verdict.plugin, verdict.reason)
                    counts[key] = counts.get(key, 0) + len(group)
                    blocked.extend(group)
        for short, count in index.first_short(spec.request, blocked).items():
            counts[(fit.name, short)] = counts.get((fit.name, short), 0) + count

    def _may_reject_hosts(self, index: FreeIndex, spec: Job, view: CellView, before, top: int) -> bool:
        """False when no filter of ``before`` rejects ``top`` tasks of the job on an up machine."""
        up = index.some_up() if top > 0 and before else None
        if up is None:
            return False
        machine = view.machine(self._ids[up]).machine
        return not all(f.fits(spec, machine, machine.free, top).ok for f in before)

    def _examine(self, spec: Job, view: CellView, reservations: Reservations, placed: dict,
                 machine_id: str, rejections: Rejections) -> tuple[Machine | None, Resources | None]:
        """(machine, its free) when every filter passes, else (None, None) with the verdict tallied."""
        entry = view.machine(machine_id)
        if entry is None:
            self._count = -1  # the cell changed under the cached ids: refresh next time
            return None, None
        machine = entry.machine
        free = reservations.free(machine)
        verdict = self.pipeline.check(spec, machine, free, placed.get(machine_id, 0))
        if not verdict.ok:
            rejections.add(verdict)
            return None, None
        return machine, free

    def _sample(self, index: FreeIndex, spec: Job, view: CellView, reservations: Reservations,
                placement: JobPlacement) -> Machine | None:
        """``_walk`` of ``sample_size`` machines without a tally, examining only those the index
        does not show short of the request (they fail resources_fit, or an earlier filter)."""
        ids, n = self._ids, len(self._ids)
        start, count = self._cursor, min(self.sample_size, n)
        filters, placed = self.pipeline.filters, placement.machines
        feasible: list[tuple[Machine, Resources]] = []
        for offset in index.worth_examining(spec.request, start, count):
            at = start + offset if start + offset < n else start + offset - n
            entry = view.machine(ids[at])
            if entry is None:
                self._count = -1  # the cell changed under the cached ids: refresh next time
                continue
            machine = entry.machine
            free = reservations.free(machine)
            here = placed.get(machine.id, 0)
            for f in filters:  # Pipeline.check, inlined
                if not f.fits(spec, machine, free, here).ok:
                    break
            else:
                feasible.append((machine, free))
                if len(feasible) >= self.k:
                    self._cursor = at + 1 if at + 1 < n else 0
                    return self._best(spec, feasible, placement)
        self._cursor = start + count if start + count < n else start + count - n
        return self._best(spec, feasible, placement)

    def _walk(self, spec: Job, view: CellView, reservations: Reservations, placement: JobPlacement,
              limit: int, rejections: Rejections | None) -> Machine | None:
        """Examine up to ``limit`` machines from the cursor; the best of the first k feasible.
        Exclusions are tallied into ``rejections`` when given (the full scan)."""
        ids, n = self._ids, len(self._ids)
        filters = self.pipeline.filters
        placed = placement.machines
        feasible: list[tuple[Machine, Resources]] = []
        cursor = self._cursor
        for _ in range(min(limit, n)):
            machine_id = ids[cursor]
            cursor = cursor + 1 if cursor + 1 < n else 0
            entry = view.machine(machine_id)
            if entry is None:
                self._count = -1  # the cell changed under the cached ids: refresh next time
                continue
            machine = entry.machine
            free = reservations.free(machine)
            here = placed.get(machine_id, 0)
            for f in filters:  # Pipeline.check, inlined: this loop is the scheduler's hot path
                verdict = f.fits(spec, machine, free, here)
                if not verdict.ok:
                    break
            else:
                verdict = None
            if verdict is not None:
                if rejections is not None:
                    rejections.add(verdict)
                continue
            feasible.append((machine, free))
            if len(feasible) >= self.k:
                break
        self._cursor = cursor
        return self._best(spec, feasible, placement)

    def _best(self, spec: Job, feasible: list[tuple[Machine, Resources]],
              placement: JobPlacement) -> Machine | None:
        """The first best-ranked of the ``feasible`` machines (None: none)."""
        if len(feasible) <= 1 or not self.pipeline.stages:
            return feasible[0][0] if feasible else None
        ctx, rank = score_context(placement, ()), self.pipeline.rank
        best, free = feasible[0]
        best_rank = rank(spec, best, free, ctx)
        for machine, free in feasible[1:]:
            machine_rank = rank(spec, machine, free, ctx)
            if machine_rank > best_rank:
                best, best_rank = machine, machine_rank
        return best
