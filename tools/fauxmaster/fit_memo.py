"""``NothingFitsMemo``: a replayed scheduler skips jobs for which nothing can fit yet.

When a placement ends with tasks still pending after a last decision that found no machine
(``AttemptOutcome.NOTHING_FITS``) or committed every claim it made (``COMMITTED``: the
schedulers leave a task unplaced only when no machine has room for it on the view plus their
own claims), the memo remembers the job with its record's revision. Until released, the job is left out of
the candidates the scheduler orders (``remembers``), so it is neither decided again nor held
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

Incremental (``refresh``): each round looks only at the jobs whose record changed, the jobs
noted since, and the machines that freed room. Remembered jobs are grouped by request, the
requests held in numpy arrays (``RequestIndex``), so a freed machine finds the requests it
now has room for in one vectorized compare; the open (not remembered) pending jobs are also
grouped by request, so a new shape is tested once per distinct request. A job is tested
against the shapes added since it was last tested, as a pass over every pending job per
round would (tests/tools/test_fauxmaster_fit_memo.py replays both ways).
"""

from __future__ import annotations

from typing import Callable, Iterable

import numpy as np

from cellstate.model import MachineState
from cellstate.resources import Resources
from omega.attempts import AttemptOutcome, PlacementResult
from omega.protocols import JobEntry
from schedulers.row_slots import RowSlots, with_row

NON_PREEMPTING_KINDS = frozenset(("batch", "service"))
_FOUND_NO_MORE = (AttemptOutcome.NOTHING_FITS, AttemptOutcome.COMMITTED)
_NEVER = np.iinfo(np.int64).max  # a removed request's row: fits in nothing

PendingLookup = Callable[[str], JobEntry | None]
"""job id → its entry if it is pending for this scheduler (its kinds, not killed), else None."""


class RequestIndex:
    """A set of distinct requests; ``fitting(frees)`` finds those with room in some free
    vector: cpu, memory and disk compared in numpy, extra resources checked exactly after."""

    def __init__(self) -> None:
        self._slots: RowSlots[Resources] = RowSlots()
        self._core = np.full((64, 3), _NEVER, dtype=np.int64)

    def __len__(self) -> int:
        return len(self._slots)

    def add(self, request: Resources) -> None:
        if request in self._slots:
            return
        row = self._slots.take(request)
        self._core = with_row(self._core, row, _NEVER)
        self._core[row] = (request.cpu, request.memory, request.disk)

    def remove(self, request: Resources) -> None:
        self._core[self._slots.release(request)] = _NEVER

    def fitting(self, frees: list[Resources]) -> list[Resources]:
        """The held requests that fit in at least one of ``frees``."""
        requests = self._slots.keys
        if not self._slots or not frees:
            return []
        core = self._core[:len(requests)]
        hit = np.zeros(len(core), dtype=bool)
        for free in frees:
            hit |= (core[:, 0] <= free.cpu) & (core[:, 1] <= free.memory) & (core[:, 2] <= free.disk)
        out = []
        for row in np.flatnonzero(hit).tolist():
            request = requests[row]
            if not request.extra or any(request.fits_in(free) for free in frees):
                out.append(request)
        return out


class NothingFitsMemo:
    """Jobs whose last decision found nothing, by request, until room appears (see the module)."""

    def __init__(self, view):
        self.view = view
        view.track_freed_machines()
        self._revision: dict[str, int] = {}  # job id → its record's revision when nothing fit
        self._by_request: dict[Resources, set[str]] = {}
        self._request: dict[str, Resources] = {}
        self._requests = RequestIndex()  # the keys of _by_request
        self._shapes: list[tuple[int, Resources]] = []  # (when added, request) no machine had room for
        self._shapes_added = 0
        self._open: dict[Resources, dict[str, None]] = {}  # pending, not remembered, tested up to _tested
        self._open_request: dict[str, Resources] = {}
        self._tested = 0  # shapes added when the open jobs were last tested (0: none there)
        self._entering: dict[str, Resources] = {}  # pending, not remembered, not yet tested
        self._checked: dict[str, int] = {}  # job id → shapes added when it was last tested (not open)
        self._noted: set[str] = set()  # remembered or forgotten by ``note`` since the last refresh
        self.skipped = 0  # remembered jobs left out of the candidates, summed over refreshes
        self.released = 0

    def __len__(self) -> int:
        return len(self._revision)

    def remembers(self, job_id: str) -> bool:
        """True while ``job_id`` is left out of the candidates."""
        return job_id in self._revision

    def remembered(self) -> Iterable[str]:
        """The ids of the jobs left out (a live view)."""
        return self._revision.keys()

    def note(self, job_id: str, result: PlacementResult) -> None:
        """Remember ``job_id`` if the last decision of ``result`` found nothing (and it is
        still pending in the view); forget it otherwise."""
        self._noted.add(job_id)
        self._forget(job_id)
        attempts = result.attempts
        if result.job_gone or result.gave_up or not result.pending or not attempts:
            return
        if attempts[-1].outcome not in _FOUND_NO_MORE:
            return
        entry = self.view.job(job_id)
        if entry is None:
            return
        self._close(job_id)
        self._remember(entry)
        spec = entry.record.job
        if attempts[-1].outcome is AttemptOutcome.NOTHING_FITS and not spec.constraints and \
                "a" not in entry.record.tasks and "r" not in entry.record.tasks:
            self._add_shape(spec.request)

    def _remember(self, entry: JobEntry) -> None:
        request = entry.record.job.request
        job_id = entry.record.job.id
        self._revision[job_id] = entry.mod_revision
        self._request[job_id] = request
        group = self._by_request.get(request)
        if group is None:
            self._by_request[request] = group = set()
            self._requests.add(request)
        group.add(job_id)

    def _forget(self, job_id: str) -> None:
        if self._revision.pop(job_id, None) is None:
            return
        request = self._request.pop(job_id)
        group = self._by_request[request]
        group.discard(job_id)
        if not group:
            del self._by_request[request]
            self._requests.remove(request)

    def _add_shape(self, request: Resources) -> None:
        shapes = self._shapes
        if any(s.fits_in(request) for _, s in shapes):
            return  # a smaller shape already has no room
        self._shapes_added += 1
        self._shapes = [(n, s) for n, s in shapes if not request.fits_in(s)] + [(self._shapes_added, request)]

    # -- round by round ------------------------------------------------------------------------

    def refresh(self, changed: Iterable[str], pending: PendingLookup) -> set[str]:
        """Bring the memo up to the view (module docstring): release the remembered jobs a
        machine that freed room may now hold and those whose record changed, take in the
        ``changed`` jobs (``pending`` tells which are pending for this scheduler), test the
        open jobs against the shapes added since they were last tested. Returns the other ids
        whose candidacy may have changed (released, remembered, noted)."""
        touched, self._noted = self._noted, set()
        touched |= self._release_by_freed_room()
        revision, view = self._revision, self.view
        for job_id in changed:
            seen = revision.get(job_id)
            if seen is None:
                continue
            entry = view.job(job_id)
            if entry is None or entry.mod_revision != seen:
                self._forget(job_id)
                self.released += 1
                touched.add(job_id)
        for ids in (changed, touched):
            for job_id in ids:
                self._admit(job_id, pending(job_id))
        touched |= self._test_open()
        self.skipped += len(revision)
        return touched

    def _admit(self, job_id: str, entry: JobEntry | None) -> None:
        """File a job as open (pending, not remembered) or not."""
        if entry is None or job_id in self._revision:
            self._close(job_id)
            return
        request = entry.record.job.request
        held = self._open_request.get(job_id)
        if held is None:
            self._entering[job_id] = request
        elif held != request:
            self._close(job_id)
            self._checked[job_id] = self._tested
            self._entering[job_id] = request

    def _close(self, job_id: str) -> None:
        """The job is no longer open; remember when it was last tested."""
        request = self._open_request.pop(job_id, None)
        if request is None:
            self._entering.pop(job_id, None)
            return
        group = self._open[request]
        del group[job_id]
        if not group:
            del self._open[request]
        self._checked[job_id] = self._tested

    def _test_open(self) -> set[str]:
        """Test the open jobs against the shapes added since they were last tested (the open
        ones by request, the entering ones one by one); remember those a shape covers. With no
        shape left, the mark is 0: any later shape is new to every job."""
        shapes = self._shapes
        added = self._shapes_added if shapes else 0
        remembered: set[str] = set()
        new = [s for n, s in shapes if n > self._tested] if added != self._tested else []
        if new:
            for request in [r for r in self._open if any(s.fits_in(r) for s in new)]:
                for job_id in self._open.pop(request):
                    del self._open_request[job_id]
                    self._checked[job_id] = added
                    remembered.add(job_id)
        checked = self._checked
        for job_id, request in self._entering.items():
            last = checked.pop(job_id, 0)
            if last != added and any(n > last and s.fits_in(request) for n, s in shapes):
                checked[job_id] = added
                remembered.add(job_id)
                continue
            self._open_request[job_id] = request
            self._open.setdefault(request, {})[job_id] = None
        self._entering.clear()
        self._tested = added
        view = self.view
        for job_id in remembered:
            self._remember(view.job(job_id))
        return remembered

    def _release_by_freed_room(self) -> set[str]:
        freed = self.view.take_freed_machines()
        if not freed or not (self._by_request or self._shapes):
            return set()
        frees = []
        for machine_id in freed:
            held = self.view.machine(machine_id)
            if held is not None and held.machine.state is MachineState.UP:
                frees.append(held.machine.free)
        if self._shapes:
            self._shapes = [(n, s) for n, s in self._shapes if not any(s.fits_in(f) for f in frees)]
        released: set[str] = set()
        for request in self._requests.fitting(frees):
            for job_id in list(self._by_request[request]):
                self._forget(job_id)
                released.add(job_id)
        self.released += len(released)
        return released
