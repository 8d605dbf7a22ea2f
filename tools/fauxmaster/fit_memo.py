"""``NothingFitsMemo``: a replayed scheduler skips jobs for which nothing can fit yet.

When a placement ends with tasks still pending after a last decision that found no machine
(``AttemptOutcome.NOTHING_FITS``) or committed every claim it made (``COMMITTED``: the
schedulers leave a task unplaced only when no machine has room for it on the view plus their
own claims), the memo remembers the job with its record's revision. Until released, the job is left out of
the candidates the scheduler orders (``candidates``), so it is neither decided again nor held
for a modelled decision time. If nothing fit a job that had no task placed and no
constraints, its request also becomes a *shape with no room*: any job asking for at least
that much of every resource is left out too, even before its first decision (no machine
with room for it can exist unless one freed room since), and is remembered like the others.
A shape is forgotten when a machine that freed room has room for it. A job is released when

- its record changes (a task ended, was evicted back to pending, a peer placed some…), or
- a machine freed room (``ReplicaView.take_freed_machines``: a ledger shrank, a machine came
  back up or was added) and now has room for one of its tasks (``request.fits_in(free)``,
  the ``resources_fit`` test), on an up machine.

Why a skipped decision would have found nothing: the chains' filters are per machine
(machine_state, different_machine, max_per_machine, resources_fit, constraints) and scorers do
not decide feasibility. At the failed decision every machine failed a filter. A machine that
has not freed room since has only grown its ledger (or not changed), so it still fails; a
machine that freed room but still lacks room for one task fails ``resources_fit``; the job's
own tasks leaving a machine shrink that machine's ledger (so it is tested) and change the
job's record (so the job is released). A shape comes from a job with no tasks placed and no
constraints, so only machine_state and resources_fit can have excluded machines: every up
machine lacked room for it, hence for any larger request, whatever that job's own rules.
Only for schedulers that do not preempt (batch,
service): a preempting decision may find room by eviction as other tasks arrive.
"""

from __future__ import annotations

from cellstate.model import MachineState
from cellstate.resources import Resources
from omega.attempts import AttemptOutcome, PlacementResult
from omega.protocols import JobEntry

NON_PREEMPTING_KINDS = frozenset(("batch", "service"))
_FOUND_NO_MORE = (AttemptOutcome.NOTHING_FITS, AttemptOutcome.COMMITTED)


class NothingFitsMemo:
    """Jobs whose last decision found nothing, by request, until room appears (see the module)."""

    def __init__(self, view):
        self.view = view
        view.track_freed_machines()
        view.track_changed_jobs()
        self._revision: dict[str, int] = {}  # job id → its record's revision when nothing fit
        self._by_request: dict[Resources, set[str]] = {}
        self._request: dict[str, Resources] = {}
        self._shapes: list[tuple[int, Resources]] = []  # (when added, request) no machine had room for
        self._shapes_added = 0
        self._checked: dict[str, int] = {}  # job id → shapes added when it was last checked
        self.skipped = 0  # candidate lists a remembered job was left out of
        self.released = 0

    def __len__(self) -> int:
        return len(self._revision)

    def note(self, job_id: str, result: PlacementResult) -> None:
        """Remember ``job_id`` if the last decision of ``result`` found nothing (and it is
        still pending in the view); forget it otherwise."""
        self._forget(job_id)
        attempts = result.attempts
        if result.job_gone or result.gave_up or not result.pending or not attempts:
            return
        if attempts[-1].outcome not in _FOUND_NO_MORE:
            return
        entry = self.view.job(job_id)
        if entry is None:
            return
        self._remember(entry)
        spec = entry.record.job
        if attempts[-1].outcome is AttemptOutcome.NOTHING_FITS and not spec.constraints and \
                "a" not in entry.record.tasks and "r" not in entry.record.tasks:
            self._add_shape(spec.request)

    def _remember(self, entry: JobEntry) -> None:
        request = entry.record.job.request
        self._revision[entry.id] = entry.mod_revision
        self._request[entry.id] = request
        self._by_request.setdefault(request, set()).add(entry.id)

    def _add_shape(self, request: Resources) -> None:
        shapes = self._shapes
        if any(s.fits_in(request) for _, s in shapes):
            return  # a smaller shape already has no room
        self._shapes_added += 1
        self._shapes = [(n, s) for n, s in shapes if not request.fits_in(s)] + [(self._shapes_added, request)]

    def _has_no_room(self, entry: JobEntry, last_checked: int) -> bool:
        """True when the job asks for at least one of the shapes added after ``last_checked``."""
        request = entry.record.job.request
        return any(n > last_checked and s.fits_in(request) for n, s in self._shapes)

    def candidates(self, pending: list[JobEntry]) -> list[JobEntry]:
        """``pending`` without the remembered jobs (first releasing those whose record changed
        and those that room freed since the last call may fit; a job not seen since the
        last shape was added is checked against the new shapes)."""
        self._release_by_freed_room()
        self._release_changed_jobs()
        revision = self._revision
        if not revision and not self._shapes:
            return pending
        added = self._shapes_added if self._shapes else 0
        checked = self._checked
        out = []
        for entry in pending:
            job_id = entry.record.job.id  # JobEntry.id without the property call: once per pending job
            if job_id in revision:
                self.skipped += 1
                continue
            last = checked.get(job_id, 0)
            if last != added:
                checked[job_id] = added
                if self._has_no_room(entry, last):
                    self._remember(entry)
                    self.skipped += 1
                    continue
            out.append(entry)
        return out

    def _release_changed_jobs(self) -> None:
        revision, view = self._revision, self.view
        for job_id in view.take_changed_jobs():
            seen = revision.get(job_id)
            if seen is None:
                continue
            entry = view.job(job_id)
            if entry is None or entry.mod_revision != seen:
                self._forget(job_id)
                self.released += 1

    def _release_by_freed_room(self) -> None:
        freed = self.view.take_freed_machines()
        if not freed or not (self._by_request or self._shapes):
            return
        frees = []
        for machine_id in freed:
            held = self.view.machine(machine_id)
            if held is not None and held.machine.state is MachineState.UP:
                frees.append(held.machine.free)
        if self._shapes:
            self._shapes = [(n, s) for n, s in self._shapes if not any(s.fits_in(f) for f in frees)]
        for request in [r for r in self._by_request if any(r.fits_in(f) for f in frees)]:
            for job_id in list(self._by_request[request]):
                self._forget(job_id)
                self.released += 1

    def _forget(self, job_id: str) -> None:
        if self._revision.pop(job_id, None) is None:
            return
        request = self._request.pop(job_id)
        group = self._by_request[request]
        group.discard(job_id)
        if not group:
            del self._by_request[request]
