"""The CP-SAT model of one solver batch: boolean ``x[task, machine]`` over each job's
candidate machines, ``placed[task] = sum_m x[task, m] <= 1``, and the helpers the
declarations use (``schedulers/solver/decl.py``). The model holds no policy itself; the
only structure it adds is symmetry breaking among a job's identical tasks (placed tasks
come first and take machines in candidate order), which removes equivalent solutions only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from cellstate.model import Job, Machine
from cellstate.plan import JobEntry
from schedulers.plugin import JobPlacement
from schedulers.solver.decl import ObjectiveTerm

PERCENT = 100  # loads are integer percents of capacity
SOLVED = (cp_model.OPTIMAL, cp_model.FEASIBLE)


@dataclass(slots=True)
class BatchJob:
    """One job of the batch: the tasks to place, its candidate machines (the model's only
    machines for it) and where its tasks already are (existing allocations)."""

    entry: JobEntry
    tasks: list[int]
    candidates: list[Machine]
    existing: JobPlacement = field(default_factory=JobPlacement)

    @property
    def spec(self) -> Job:
        return self.entry.record.job


@dataclass(frozen=True, slots=True)
class Solution:
    """What CP-SAT returned: its status name, the machine of each placed (job, task), the
    wall time of the solve and the objective value (None without a solution)."""

    status: str
    assignment: dict[tuple[int, int], str]
    wall_s: float
    objective: float | None = None

    @property
    def found(self) -> bool:
        return self.status in ("OPTIMAL", "FEASIBLE")


class SolverModel:
    """Variables of one batch and the helpers declarations post constraints with."""

    def __init__(self, jobs: list[BatchJob]) -> None:
        self.model = cp_model.CpModel()
        self.jobs = jobs
        self.machines: dict[str, Machine] = {}
        for job in jobs:
            for m in job.candidates:
                self.machines.setdefault(m.id, m)
        self.index = {mid: i for i, mid in enumerate(self.machines)}
        self.x: dict[tuple[int, int], dict[str, cp_model.IntVar]] = {}
        self.placed: dict[tuple[int, int], cp_model.IntVar] = {}
        self.by_machine: dict[str, list[tuple[int, int, cp_model.IntVar]]] = {mid: [] for mid in self.machines}
        self.terms: list[ObjectiveTerm] = []
        self._loads: dict[str, cp_model.IntVar] = {}
        self._first = self._second = 0
        self.last_status = ""
        self.load_top: dict[str, int] = {}
        """Upper bound of each ``load_percent`` variable made so far."""
        for j, job in enumerate(jobs):
            self._add_job(j, job)

    def _add_job(self, j: int, job: BatchJob) -> None:
        previous = None
        for t in job.tasks:
            row = {m.id: self.model.new_bool_var(f"x[{job.entry.id}/{t},{m.id}]") for m in job.candidates}
            placed = self.model.new_bool_var(f"placed[{job.entry.id}/{t}]")
            self.model.add(sum(row.values()) == placed)
            self.x[(j, t)], self.placed[(j, t)] = row, placed
            for mid, var in row.items():
                self.by_machine[mid].append((j, t, var))
            if previous is not None and row:  # identical tasks: placed ones first, in machine order
                self.model.add(self.placed[previous] >= placed)
                self.model.add(self._slot(previous) <= self._slot((j, t))).only_enforce_if(placed)
            previous = (j, t)

    def _slot(self, key: tuple[int, int]):
        return sum(self.index[mid] * var for mid, var in self.x[key].items())

    # -- helpers for declarations ---------------------------------------------------------

    def tasks_of(self, j: int, machine_id: str) -> list[cp_model.IntVar]:
        """The x variables of job ``j``'s batch tasks on ``machine_id``."""
        return [self.x[(j, t)][machine_id] for t in self.jobs[j].tasks if machine_id in self.x[(j, t)]]

    def forbid(self, j: int, machine_id: str) -> None:
        """No task of job ``j`` on ``machine_id``."""
        for var in self.tasks_of(j, machine_id):
            self.model.add(var == 0)

    def usage(self, machine_id: str, resource: str):
        """What the batch adds on ``machine_id`` of ``resource`` (a linear expression)."""
        return sum(self.jobs[j].spec.request.get(resource) * var for j, _, var in self.by_machine[machine_id])

    def resources(self, machine_id: str) -> tuple[str, ...]:
        """Names of the resources asked for on ``machine_id`` by any job of the batch."""
        names: dict[str, None] = {}
        for j, _, _ in self.by_machine[machine_id]:
            names.update(dict.fromkeys(self.jobs[j].spec.request.names()))
        return tuple(names)

    def load_percent(self, machine_id: str) -> cp_model.IntVar:
        """The machine's load after the batch, in percent: at least ``used/capacity`` of cpu
        and of memory (rounded up; minimizing objectives drive it down to that)."""
        load = self._loads.get(machine_id)
        if load is not None:
            return load
        m = self.machines[machine_id]
        floor = max((-(-PERCENT * m.allocated.get(r) // m.capacity.get(r)) for r in ("cpu", "memory")
                     if m.capacity.get(r) > 0), default=0)
        top = self.load_top[machine_id] = max(PERCENT, floor)
        load = self._loads[machine_id] = self.model.new_int_var(0, top, f"load[{machine_id}]")
        for r in ("cpu", "memory"):
            cap = m.capacity.get(r)
            if cap > 0:
                self.model.add(cap * load >= PERCENT * (m.allocated.get(r) + self.usage(machine_id, r)))
        return load

    # -- objective, hint, solve -----------------------------------------------------------

    def objectives(self, weights: dict[int, int]) -> None:
        """Set the two levels of the objective: the dominant costs (placing tasks), and the
        weighted sum of the other terms (``weights``: by term position), optimized second
        with the first held at its optimum (lexicographic; see ``solve``)."""
        self._first = sum(term.cost for term in self.terms if term.dominant)
        self._second = sum(weights.get(i, 1) * term.cost for i, term in enumerate(self.terms) if not term.dominant)

    def hint(self, chosen: dict[int, list[str]]) -> None:
        """Hint a complete solution: job ``j``'s first tasks on the machines ``chosen[j]``
        (sorted into candidate order, as the symmetry breaking wants), the rest unplaced."""
        for j, job in enumerate(self.jobs):
            picks = sorted((m for m in chosen.get(j, ()) if m in self.index), key=self.index.__getitem__)
            for n, t in enumerate(job.tasks):
                target = picks[n] if n < len(picks) else None
                for mid, var in self.x[(j, t)].items():
                    self.model.add_hint(var, mid == target)
                self.model.add_hint(self.placed[(j, t)], target is not None)

    def solve(self, time_limit_s: float, workers: int, seed: int, work_limit: float | None = None) -> Solution:
        """Minimize the dominant costs, then (if proven optimal and time is left) the other
        terms with the dominant ones held at that optimum, hinted by the first solution; all
        within ``time_limit_s``. With ``work_limit`` each phase also stops after that much
        CP-SAT deterministic time and the second phase does not depend on the wall time
        the first took (reproducible with one worker). Status: OPTIMAL only if every level
        was proven optimal."""
        started = time.perf_counter()
        self.model.minimize(self._first)
        first = self._run(time_limit_s, workers, seed, work_limit)
        if first is None or first[0] != "OPTIMAL" or isinstance(self._second, int):
            return self._solution(first, started)
        left = time_limit_s if work_limit else time_limit_s - (time.perf_counter() - started)
        if left <= 0:
            return self._solution(("FEASIBLE", first[1], first[2]), started)
        self.model.add(self._first <= round(first[2]))
        self.model.clear_hints()
        for key, row in self.x.items():
            for mid, var in row.items():
                self.model.add_hint(var, first[1].get(key) == mid)
            self.model.add_hint(self.placed[key], key in first[1])
        self.model.minimize(self._second)
        second = self._run(left, workers, seed, work_limit)
        return self._solution(second or ("FEASIBLE", first[1], first[2]), started)

    def _run(self, time_limit_s: float, workers: int, seed: int, work_limit: float | None = None):
        """(status name, assignment, objective) of one CP-SAT run; None without a solution."""
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = time_limit_s
        if work_limit:
            solver.parameters.max_deterministic_time = work_limit
        solver.parameters.num_workers = workers
        solver.parameters.random_seed = seed
        status = solver.solve(self.model)
        self.last_status = solver.status_name(status)
        if status not in SOLVED:
            return None
        assignment = {key: mid for key, row in self.x.items() for mid, var in row.items() if solver.value(var)}
        return solver.status_name(status), assignment, solver.objective_value

    def _solution(self, found, started: float) -> Solution:
        wall = time.perf_counter() - started
        if found is None:
            return Solution(self.last_status, {}, wall)
        return Solution(found[0], found[1], wall, found[2])
