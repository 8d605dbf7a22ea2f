"""The solver scheduler (kind ``solver``): DCM-style placement (Suresh et al., OSDI'20) with
OR-tools CP-SAT. A batch of pending tasks — one job's (``decide``) or several jobs'
(``decide_batch``) — becomes one model: boolean ``x[task, machine]`` over each job's capped
candidate machines, the declared hard constraints and a weighted sum of the declared
objectives (``schedulers/solver/decl.py``, ``solver_policies.py``), solved within
``time_limit_s``.

The Borg scorer's greedy choice (job after job on an overlay of the claims before it) is
computed first: it hints the solver, its machines stay candidates, and it is the fallback
when the solver has no solution in time (or places fewer tasks than it): unplaced reasons
and ``counters`` say so. Claims are checked to fit cumulatively before they are returned.
With ``lookahead_jobs`` > 0, ``decide`` solves the job together with the next pending jobs
(fair queue order) and keeps their plans; such a job's later ``decide`` returns its plan if
its record is unchanged and every claim still passes the hard filters on the current view.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from cellstate.plan import Claim, JobEntry
from omega.protocols import CellView
from omega.queue import fair_order
from schedulers.base import Decision, checked_tasks, gang_outcome, needs_nothing
from schedulers.borg.scheduler import BorgScheduler
from schedulers.reservation import Reservations
from schedulers.solver.candidates import CandidatePicker, placement_of
from schedulers.solver.config import SolverConfig
from schedulers.solver.decl import CONSTRAINT, OBJECTIVE, resolve
from schedulers.solver.model import BatchJob, Solution, SolverModel
from schedulers.solver.overlay import OverlayView

Item = tuple[JobEntry, list[int]]


@dataclass(slots=True)
class SolverCounters:
    """Cumulative: solves and their outcomes, tasks decided and by whom, CP-SAT wall time."""

    solves: int = 0
    optimal: int = 0
    feasible: int = 0
    no_solution: int = 0
    fallbacks: int = 0
    tasks: int = 0
    solver_placed: int = 0
    greedy_placed: int = 0
    lookahead_hits: int = 0
    solve_s: float = 0.0
    statuses: dict[str, int] = field(default_factory=dict)


class SolverScheduler:
    """See the module docstring. ``config``: a ``SolverConfig`` or its keys."""

    kind = "solver"
    attach = needs_nothing

    def __init__(self, name: str, seed: int = 0, config: SolverConfig | Mapping[str, Any] | None = None):
        self.name, self.seed = name, seed
        self.config = SolverConfig.of(config)
        self.constraints = resolve(self.config.constraints, CONSTRAINT)
        self.objectives = resolve(self.config.objectives, OBJECTIVE)
        self.picker = CandidatePicker(self.config.candidates, self.config.prefilter)
        self.greedy = None
        if self.config.fallback == "borg":
            self.greedy = BorgScheduler(f"{name}/greedy", random.Random(seed), preemption=False, score_cache=False)
        self.counters = SolverCounters()
        self.last: Solution | None = None
        self._plans: dict[str, tuple[int, tuple[int, ...], Decision]] = {}

    def decide(self, job: JobEntry, tasks: list[int], view: CellView) -> Decision:
        """Claims for ``tasks`` of ``job`` (with ``lookahead_jobs``: solved with other jobs)."""
        tasks = checked_tasks(job, tasks)
        planned = self._planned(job, tasks, view)
        if planned is not None:
            self.counters.lookahead_hits += 1
            return planned
        items: list[Item] = [(job, tasks)]
        if self.config.lookahead_jobs:
            named = job.record.job.scheduler  # a job naming its class: look ahead at that class's jobs only
            others = [e for e in fair_order(view.pending_jobs())
                      if e.id != job.id and (not named or e.record.job.scheduler == named)]
            items += [(e, e.record.pending_tasks()) for e in others[:self.config.lookahead_jobs]]
        decisions = self._decide_items(items, view)
        self._plans = {e.id: (e.mod_revision, tuple(t), decisions[e.id]) for e, t in items[1:]}
        return decisions[job.id]

    def decide_batch(self, jobs: Sequence[JobEntry], view: CellView) -> dict[str, Decision]:
        """One decision per job (by id) for all pending tasks of ``jobs``, solved together:
        the claims of all of them fit cumulatively on ``view``."""
        ids = [entry.id for entry in jobs]
        if len(set(ids)) != len(ids):
            raise ValueError(f"decide_batch: a job is listed twice in {ids}")
        return self._decide_items([(e, checked_tasks(e, e.record.pending_tasks())) for e in jobs], view)

    # -- one batch ------------------------------------------------------------------------

    def _decide_items(self, items: list[Item], view: CellView) -> dict[str, Decision]:
        solve, overflow = _split(items, self.config.max_tasks)
        overlay = OverlayView(view)
        greedy = self._greedy(solve, overlay) if self.greedy is not None else None
        decisions = self._solve(solve, view, greedy) if solve else {}
        self._verify(solve, decisions, view)
        overlay = OverlayView(view)
        for entry, _ in solve:
            overlay.charge(entry, decisions[entry.id].claims)
        for entry, tasks in overflow:  # beyond max_tasks: the greedy scorer, after the solved claims
            extra = self._greedy([(entry, tasks)], overlay)[entry.id] if self.greedy is not None else \
                Decision([], {t: "solver: beyond max_tasks and no fallback" for t in tasks})
            merged = decisions.setdefault(entry.id, Decision())
            merged.claims.extend(extra.claims)
            merged.unplaced.update(extra.unplaced)
        self.counters.tasks += sum(len(tasks) for _, tasks in items)
        return {e.id: gang_outcome(e, tasks, decisions.get(e.id) or Decision()) for e, tasks in items}

    def _greedy(self, items: list[Item], overlay: OverlayView) -> dict[str, Decision]:
        """The Borg scorer's choice for each job in turn, each seeing the claims before it."""
        out = {}
        for entry, tasks in items:
            decision = self.greedy.decide(entry, list(tasks), overlay)
            overlay.charge(entry, decision.claims)
            out[entry.id] = decision
        return out

    def _solve(self, items: list[Item], view: CellView, greedy: dict[str, Decision] | None) -> dict[str, Decision]:
        jobs, why_not = [], {}
        for entry, tasks in items:
            existing = placement_of(view, entry.id)
            keep = [c.machine_id for c in greedy[entry.id].claims] if greedy else ()
            candidates, rejections = self.picker.pick(entry.record.job, existing, view, keep)
            jobs.append(BatchJob(entry, list(tasks), candidates, existing))
            why_not[entry.id] = rejections.reason()
        sm = SolverModel(jobs)
        for declaration in self.constraints:
            declaration.add(sm)
        weights = {}
        for declaration in self.objectives:
            term = declaration.add(sm)
            if term is not None:
                weights[len(sm.terms)] = self.config.weight(declaration.name)
                sm.terms.append(term)
        sm.objectives(weights)
        if greedy:
            sm.hint({j: [c.machine_id for c in greedy[job.entry.id].claims] for j, job in enumerate(jobs)})
        solution = sm.solve(float(self.config.time_limit_s), self.config.workers, self.seed,
                            self.config.deterministic_time)
        return self._choose(jobs, solution, greedy, why_not)

    def _choose(self, jobs: list[BatchJob], solution: Solution, greedy, why_not: dict[str, str]):
        """The solver's claims, or the greedy ones (reasons say why) when it has none or
        places fewer tasks."""
        c = self.counters
        c.solves += 1
        c.solve_s += solution.wall_s
        c.statuses[solution.status] = c.statuses.get(solution.status, 0) + 1
        c.optimal += solution.status == "OPTIMAL"
        c.feasible += solution.status == "FEASIBLE"
        c.no_solution += not solution.found
        self.last = solution
        greedy_count = sum(len(d.claims) for d in greedy.values()) if greedy else -1
        if solution.found and len(solution.assignment) >= greedy_count:
            c.solver_placed += len(solution.assignment)
            return _from_solution(jobs, solution, why_not)
        c.fallbacks += 1
        what = (f"solver {solution.status} after {solution.wall_s:.3f}s" if not solution.found else
                f"solver placed {len(solution.assignment)} < greedy {greedy_count}")
        if greedy is None:
            return {job.entry.id: Decision([], {t: f"{what}; no fallback" for t in job.tasks}) for job in jobs}
        c.greedy_placed += greedy_count
        return {job_id: Decision(list(d.claims), {t: f"{what}; greedy fallback: {why}" for t, why in d.unplaced.items()})
                for job_id, d in greedy.items()}

    def _verify(self, items: list[Item], decisions: dict[str, Decision], view: CellView) -> None:
        """Drop (with a reason) any claim that would not fit cumulatively on the view's
        ledgers: the committer refuses an overcommitting plan."""
        res = Reservations(view)
        for entry, _ in items:
            decision = decisions[entry.id]
            kept = []
            for claim in decision.claims:
                m = view.machine(claim.machine_id)
                if m is not None and claim.request.fits_in(res.free(m.machine)):
                    res.reserve(entry.id, m.machine, claim.request)
                    kept.append(claim)
                else:
                    decision.unplaced[claim.task_index] = f"solver: claim on {claim.machine_id} would overcommit it"
            decision.claims[:] = kept

    def _planned(self, job: JobEntry, tasks: list[int], view: CellView) -> Decision | None:
        """The lookahead plan of ``job`` if its record is unchanged and every claim still
        passes the hard filters, cumulatively, on ``view``; None otherwise."""
        plan = self._plans.pop(job.id, None)
        if plan is None or plan[0] != job.mod_revision or plan[1] != tuple(tasks):
            return None
        decision = plan[2]
        res, spec, check = Reservations(view), job.record.job, self.picker.pipeline
        placement = res.placement(job.id)
        for claim in decision.claims:
            entry = view.machine(claim.machine_id)
            if entry is None:
                return None
            free = res.free(entry.machine)
            ok = claim.request.fits_in(free) if check is None else \
                check.check(spec, entry.machine, free, placement.on_machine(claim.machine_id)).ok
            if not ok:
                return None
            res.reserve(job.id, entry.machine, claim.request)
        return Decision(list(decision.claims), dict(decision.unplaced))


def _split(items: list[Item], max_tasks: int) -> tuple[list[Item], list[Item]]:
    """The items within ``max_tasks`` tasks (the job crossing it is cut) and the rest."""
    solve, overflow, left = [], [], max_tasks
    for entry, tasks in items:
        head, tail = tasks[:left], tasks[left:]
        if head:
            solve.append((entry, head))
        if tail:
            overflow.append((entry, tail))
        left -= len(head)
    return solve, overflow


def _from_solution(jobs: list[BatchJob], solution: Solution, why_not: dict[str, str]) -> dict[str, Decision]:
    out = {}
    for j, job in enumerate(jobs):
        decision = out[job.entry.id] = Decision()
        request = job.spec.request
        for t in job.tasks:
            machine_id = solution.assignment.get((j, t))
            if machine_id is not None:
                decision.claims.append(Claim(t, machine_id, request))
            elif not job.candidates:
                decision.unplaced[t] = why_not[job.entry.id]
            else:
                decision.unplaced[t] = (f"solver ({solution.status}): no room among {len(job.candidates)} "
                                        f"candidate machines")
    return out
