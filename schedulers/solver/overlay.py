"""A ``CellView`` overlay: the view as it would be with some claims committed. The solver
scheduler runs the greedy Borg scorer job after job on it (each job sees the claims of the
jobs before it), as a hint, as a fallback, and for tasks beyond the solver's batch size."""

from __future__ import annotations

from typing import Iterable

from cellstate.model import Alloc, JobKind
from cellstate.plan import AllocEntry, Claim, JobEntry, MachineEntry
from omega.protocols import CellView


class OverlayView:
    """``view`` with ``charge``d claims on the machines' ledgers and as allocations. Changed
    machines carry fresh negative revisions, so nothing keyed by revision mistakes them for
    the ledgers the view has."""

    def __init__(self, view: CellView) -> None:
        self.view = view
        self._machines: dict[str, MachineEntry] = {}
        self._on: dict[str, list[Alloc]] = {}
        self._of: dict[str, list[Alloc]] = {}
        self._revision = 0

    def charge(self, job: JobEntry, claims: Iterable[Claim]) -> None:
        """Take ``claims`` of ``job`` in as if committed (ledgers charged, allocations added)."""
        priority = job.record.job.priority
        for claim in claims:
            entry = self.machine(claim.machine_id)
            if entry is None:
                raise ValueError(f"claim of job {job.id!r} task {claim.task_index} on unknown machine "
                                 f"{claim.machine_id!r}")
            self._revision -= 1
            self._machines[claim.machine_id] = MachineEntry(entry.machine.with_claim(claim.request), self._revision)
            alloc = Alloc(job.id, claim.task_index, claim.machine_id, claim.request, priority)
            self._on.setdefault(claim.machine_id, []).append(alloc)
            self._of.setdefault(job.id, []).append(alloc)

    @property
    def revision(self) -> int:
        return self.view.revision

    def machines(self) -> Iterable[MachineEntry]:
        changed = self._machines
        for entry in self.view.machines():
            yield changed.get(entry.id, entry)

    def machine(self, machine_id: str) -> MachineEntry | None:
        return self._machines.get(machine_id) or self.view.machine(machine_id)

    def machine_count(self) -> int:
        return self.view.machine_count()

    def job(self, job_id: str) -> JobEntry | None:
        return self.view.job(job_id)

    def pending_jobs(self, kind: JobKind | None = None) -> list[JobEntry]:
        return self.view.pending_jobs(kind)

    def allocs_on(self, machine_id: str) -> Iterable[Alloc]:
        return [*self.view.allocs_on(machine_id), *self._on.get(machine_id, ())]

    def allocs_of(self, job_id: str) -> Iterable[Alloc]:
        return [*self.view.allocs_of(job_id), *self._of.get(job_id, ())]

    def alloc_entry(self, job_id: str, task_index: int) -> AllocEntry | None:
        return self.view.alloc_entry(job_id, task_index)
