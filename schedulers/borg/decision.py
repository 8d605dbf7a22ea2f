"""One Borg decision: ``decide(sched, state, job, tasks, view)`` takes the scheduler's
configuration and its ``SearchState`` and returns the decision and the state. Per task it
fills a search (``schedulers.borg.search``: one per equivalence class), takes the best
machine, and when none is feasible runs the pipeline's post-filter stage (Borg's preemption,
``schedulers.plugins.preemption``); it reserves on the machine chosen, evicting the victims
nominated."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cellstate.model import Alloc, Job, Machine
from cellstate.plan import Claim, JobEntry
from omega.protocols import CellView
from schedulers.base import Decision
from schedulers.borg.index import LoadIndex
from schedulers.borg.search import Search
from schedulers.borg.state import SearchState
from schedulers.pipeline import NO_MACHINES
from schedulers.reservation import Reservations

if TYPE_CHECKING:
    from schedulers.borg.cache import Entry
    from schedulers.borg.scheduler import BorgScheduler


def decide(sched: BorgScheduler, state: SearchState, job: JobEntry, tasks: list[int],
           view: CellView) -> tuple[Decision, SearchState]:
    """Claims for ``tasks`` (checked) of ``job``, fitting cumulatively on ``view``, and the state
    to keep for the next decision."""
    ids = machine_ids(sched, state, view)
    counters = state.counters
    counters.decisions += 1
    counters.tasks += len(tasks)
    if not ids:
        return Decision([], {t: NO_MACHINES for t in tasks}), state
    if state.index is not None:
        state.index.refresh(view, state.changed)
        state.changed.clear()
    decider = Decider(sched, state, job, view, ids)
    decision = decider.run(tasks)
    state.changed.update(decider.touched)
    if sched.cache is not None:
        sched.cache.trim()
    return decision, state


def machine_ids(sched: BorgScheduler, state: SearchState, view: CellView) -> list[str]:
    """All machine ids, sorted then shuffled by the scheduler's seeded rng (listed again when
    the count changes, or when a listed machine disappeared: ``state.relist``)."""
    count = view.machine_count()
    if count != state.count:
        state.ids = sorted(entry.id for entry in view.machines())
        if sched.relaxed:
            sched.rng.shuffle(state.ids)
        state.count = len(state.ids)
        state.base_free.clear()
        state.floors.clear()
        state.changed.clear()
        packed = sched.relaxed and sched.walk_start == "packed"
        state.index = LoadIndex(state.ids, view, sweep=sched.sweep, hybrid=sched.hybrid,
                                checked=sched.checked, bounds=sched.prover is not None) if packed else None
    return state.ids


def start_of_walk(sched: BorgScheduler, state: SearchState, n: int) -> int:
    """Where a decision's walk over the ``n`` shuffled machines starts: ``first`` at the
    start of the permutation (first-fit order: packs), ``sticky`` where the previous
    decision found its first feasible machine (next-fit order), ``random`` anywhere
    (spreads: consecutive decisions see different machines). 0 without randomization,
    and for ``packed`` (it walks the load index: ``schedulers.borg.index``; the shuffled
    order only when that walk found nothing feasible)."""
    if not sched.relaxed or sched.walk_start in ("first", "packed"):
        return 0
    return sched.rng.randrange(n) if sched.walk_start == "random" else state.sticky % n


def table_for(sched: BorgScheduler, spec: Job, task: int | None) -> dict[str, Entry] | None:
    """The cache table of the class of ``spec`` (or of one task when classes are off)."""
    if sched.cache is None or sched.signer is None:
        return None
    key = sched.signer.signature(spec) if task is None else ("task", spec.id, task)
    return sched.cache.table(sched.signer.class_of(key))


class Decider:
    """One decision: the reservation overlay, the per-class searches and the post-filter stage.
    It is the post-filters' context (``schedulers.pipeline.PostFilterContext``)."""

    def __init__(self, sched: BorgScheduler, state: SearchState, job: JobEntry, view: CellView,
                 ids: list[str]) -> None:
        self.sched, self.state, self.job, self.view, self.ids = sched, state, job, view, ids
        self.spec = job.record.job
        self.res = Reservations(view, state.base_free)
        self.placement = self.res.placement(job.id)
        self.touched: set[str] = set()
        self.evicted: set[tuple[str, int]] = set()
        self.floors = state.floors
        self.options = sched.k if sched.relaxed else None
        self.cursor = start_of_walk(sched, state, len(ids))

    def run(self, tasks: list[int]) -> Decision:
        sched, state = self.sched, self.state
        counters, pipeline, classes = state.counters, sched.pipeline, sched.classes
        decision = Decision()
        search = None
        for i, task in enumerate(tasks):
            if search is None or not classes:
                search = Search(self, table_for(sched, self.spec, None if classes else task))
            want = sched.k if sched.relaxed else len(self.ids)
            search.fill(want)
            machine = search.best()
            victims: list[Alloc] = []
            if machine is None:
                counters.fits_nowhere += 1
                if pipeline.post_filters:
                    counters.preemption_passes += 1
                    nominated = pipeline.post_filter(self)
                    if nominated is not None:
                        machine, victims = nominated
            if machine is None:
                reason = search.rejections.reason()
                decision.unplaced.update((t, reason) for t in tasks[i:])
                break
            self._reserve(machine, victims)
            decision.claims.append(Claim(task, machine.id, self.spec.request,
                                         tuple((a.job_id, a.task_index) for a in victims)))
            self.cursor = search.cursor
            if classes and i + 1 < len(tasks):
                search.refresh(machine)  # without classes the next task walks afresh:
            elif state.index is not None and i + 1 < len(tasks):  # its walk and bounds see what is left
                state.index.file_reserved(machine, self.res.free(machine))
            if i == 0 and search.first_feasible is not None:
                state.sticky = search.first_feasible
        return decision

    def _reserve(self, machine: Machine, victims: list[Alloc]) -> None:
        for a in victims:
            self.res.release(a.job_id, machine, a.resources)
            self.evicted.add((a.job_id, a.task_index))
        self.res.reserve(self.job.id, machine, self.spec.request)
        self.touched.add(machine.id)
        self.state.counters.preemptions += bool(victims)
