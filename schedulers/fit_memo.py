"""``NothingFitsMemo``: a scheduler's cycle skips jobs for which nothing can fit yet.

A scheduler whose unplaced tasks mean no room (batch, service) offers the memo to its host as
its candidate filter (``nothing_fits_memo``, from its ``attach``: ``omega.host``), so the live
process and the replay both use it. It lives with the policies, not in the core: whether it is
exact is a property of the scheduler's chain (its filters' traits, below).

Pending jobs are grouped by request. A group *sleeps* when no up machine has room for its
request: every job of it is left out of the candidates the scheduler orders (``remembers``),
so it is neither decided again nor held for a modelled decision time, and the scheduler's
queue leaves the whole group out at once (``JobQueue.set_group_asleep``). A group falls
asleep when a *shape with no room* covers its request: a job with no task placed and no
constraints whose last decision found no machine (``AttemptOutcome.NOTHING_FITS``), decided
task by task (not all-or-nothing: a gang places nothing when only some of its tasks fit),
makes its request such a shape, and any request at least that large of every resource has no
room either. A group wakes when a machine that freed room (``ReplicaView.take_freed_machines``: a
ledger shrank, a machine came back up or was added) has room for one of its tasks, on an up
machine (``request.fits_in(free)``, the ``resources_fit`` test); the shapes it has room for
are forgotten too. A job joining an asleep group (submitted, changed) sleeps with it.

One job can also be remembered on its own (*solo*), in an awake group: when its last decision
found no machine or committed every claim it made (``COMMITTED``: the schedulers leave a task
unplaced only when no machine has room for it on the view plus their own claims) but it does
not make a shape (constraints, tasks placed). It is released when its record changes (a task
ended, was evicted back to pending, a peer placed some…) or when its group's request finds
room as above; it sleeps with its group if the group falls asleep.

Why a skipped decision would have found nothing: the chain's filters each declare that only a
machine freeing room (``ROOM``) or the job's record changing (``JOB``) can lift a rejection
(``FilterTraits.lifted_by``; the built-in machine_state, different_machine, max_per_machine,
resources_fit and constraints do) and scorers do not decide feasibility. An asleep group's request had no room on any up machine when a
shape covered it (the shape's own decision saw none, and every machine that freed room since
was tested at the next refresh), and every machine that freed room since was tested against
the request: the others only grew their ledgers. So no up machine has room for it now,
whatever the job's constraints, its tasks placed or its record's changes. A solo job failed
on every machine at its decision; a machine that has not freed room since still fails, one
that freed room but lacks room for a task fails ``resources_fit``, and the job's own tasks
leaving a machine change its record. Only for schedulers that declare
``unplaced_means_no_room`` (batch, service: they do not preempt and leave a task unplaced only
when no machine passes their filters for it): a preempting decision may find room by
eviction as other tasks arrive (``memo_applies``). The memo reads the view's change feed
(``omega.protocols.ChangeFeed``: ``take_freed_machines``) and the cycle hands it the changed
jobs (``take_changed_jobs``).

Incremental (``refresh``): each round looks only at the jobs whose record changed, the jobs
noted since, the machines that freed room and the shapes added since. The requests of asleep
groups and of solo jobs are held in numpy arrays (``RequestIndex``), so a freed machine finds
the requests it now has room for in one vectorized compare. Falling asleep and waking cost
O(groups) and are handed to the queue as group changes, not job by job
(tests/tools/test_fauxmaster_fit_memo.py decides every remembered job after every refresh).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Protocol

import numpy as np

from cellstate.model import MachineState
from cellstate.resources import Resources
from omega.attempts import AttemptOutcome, PlacementResult
from cellstate.plan import JobEntry
from schedulers.plugin import JOB, ROOM, filter_traits
from schedulers.row_slots import RowSlots, with_row

if TYPE_CHECKING:
    from omega.host import SchedulerHost
    from schedulers.pipeline import Pipeline

_FOUND_NO_MORE = (AttemptOutcome.NOTHING_FITS, AttemptOutcome.COMMITTED)
_NEVER = np.iinfo(np.int64).max  # a removed request's row: fits in nothing

_LIFTED_BY_KNOWN = frozenset({ROOM, JOB})  # events the memo follows: freed machines, changed records


class MemoDeclarations(Protocol):
    """What a scheduler declares for the memo: ``unplaced_means_no_room`` (it never preempts
    and leaves a task unplaced only when no machine passes its filters for it) and its chain
    (None: it has none the memo can read)."""

    unplaced_means_no_room: bool
    pipeline: Pipeline | None


def memo_applies(scheduler: MemoDeclarations) -> bool:
    """True when the memo is exact for ``scheduler``: it declares ``unplaced_means_no_room``
    and every filter of its chain declares that only ``ROOM`` and ``JOB`` events lift its
    rejections."""
    if scheduler.unplaced_means_no_room is not True:
        return False
    pipeline = scheduler.pipeline
    if pipeline is None:
        return False
    for f in pipeline.filters:
        lifted_by = filter_traits(f).lifted_by
        if lifted_by is None or not lifted_by <= _LIFTED_BY_KNOWN:
            return False
    return True


def nothing_fits_memo(scheduler: MemoDeclarations, host: SchedulerHost) -> NothingFitsMemo | None:
    """The memo a scheduler offers its host as its candidate filter (``omega.host.Attachment``):
    one over the host's view when the host allows it (``skip_nothing_fits``) and the memo is
    exact for the scheduler (``memo_applies``); else None."""
    if not host.skip_nothing_fits or not memo_applies(scheduler):
        return None
    return NothingFitsMemo(host.view, host.all_or_nothing, host.explains_waits)


PendingLookup = Callable[[str], JobEntry | None]
"""job id → its entry if it is pending for this scheduler (its kinds, not killed), else None."""

GroupKey = tuple[int, int, int, tuple[tuple[str, int], ...]]
"""A request group's key: its request's fields, equal exactly when the requests are, hashed
without a Python call (the queue hashes a job's group at every change of it)."""


def group_key(request: Resources) -> GroupKey:
    """The key of ``request``'s group."""
    return request.cpu, request.memory, request.disk, request.extra


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

    def fitting(self, frees: list[Resources], most: tuple[int, int, int] | None = None) -> list[Resources]:
        """The held requests that fit in at least one of ``frees`` (``most``: their
        ``core_maximum``, if known)."""
        requests = self._slots.keys
        if not self._slots or not frees:
            return []
        core = self._core[:len(requests)]
        # A request with room in some free vector fits their per-resource maximum: only the
        # rows that do are compared with each free vector.
        cpu, memory, disk = most or core_maximum(frees)
        room = core[:, 0] <= cpu  # column by column: cheaper than a row-wise all() of 3
        room &= core[:, 1] <= memory
        room &= core[:, 2] <= disk
        rows = room.nonzero()[0]
        if len(frees) > 1 and len(rows):
            free = np.array([(f.cpu, f.memory, f.disk) for f in frees], dtype=np.int64)
            held = core[rows]
            fits = held[:, 0:1] <= free[:, 0]  # row x free, resource by resource
            fits &= held[:, 1:2] <= free[:, 1]
            fits &= held[:, 2:3] <= free[:, 2]
            rows = rows[fits.any(axis=1)]
        out = []
        for row in rows.tolist():
            request = requests[row]
            if not request.extra or any(request.fits_in(free) for free in frees):
                out.append(request)
        return out


@dataclass(slots=True)
class _Group:
    """The pending jobs of one request: asleep or not, and its solo remembered jobs
    (job id → the record's revision when remembered)."""

    request: Resources
    key: GroupKey  # the queue's name for it
    members: set[str] = field(default_factory=set)
    asleep: bool = False
    solo: dict[str, int] = field(default_factory=dict)
    indexed: bool = False  # its request is in the RequestIndex (asleep or has solo jobs)


@dataclass(slots=True)
class MemoChanges:
    """What a ``refresh`` changed: groups (by key) that fell asleep (True) or woke (False),
    and jobs whose candidacy may have changed one by one (noted, released, remembered solo)."""

    groups: dict[GroupKey, bool] = field(default_factory=dict)
    touched: set[str] = field(default_factory=set)


class NothingFitsMemo:
    """Pending jobs by request, asleep while no machine has room for it (see the module)."""

    def __init__(self, view, all_or_nothing: bool = False, explain_waits: bool = False):
        """``all_or_nothing``: the scheduler commits every job all-or-nothing (gang jobs are
        committed so in any case). ``explain_waits``: a job is left out only once a decision
        of it was noted, so its record says why it waits (a job joining an asleep group is
        decided once first; the live host's choice, ``SchedulerHost.explains_waits``)."""
        self.view = view
        self.all_or_nothing = all_or_nothing
        self._unexplained: set[str] | None = set() if explain_waits else None
        """Filed jobs not decided since they were filed (None: not explaining waits)."""
        view.track_freed_machines()
        self._groups: dict[GroupKey, _Group] = {}
        self._filed: dict[str, _Group] = {}  # job id → its group
        self._requests = RequestIndex()  # the requests of indexed groups
        self._shapes: list[Resources] = []  # requests no up machine has room for
        self._new_shapes: list[Resources] = []  # shapes noted since the last refresh
        self._noted: set[str] = set()  # noted since the last refresh
        self._changes = MemoChanges()
        self.released = 0  # jobs released by room or a record change (a group's jobs count)

    def __len__(self) -> int:
        return sum(len(g.members) if g.asleep else len(g.solo) for g in self._groups.values())

    def remembers(self, job_id: str) -> bool:
        """True while ``job_id`` is left out of the candidates."""
        group = self._filed.get(job_id)
        if group is None or (self._unexplained is not None and job_id in self._unexplained):
            return False
        return group.asleep or job_id in group.solo

    def solo(self, job_id: str) -> bool:
        """True while ``job_id`` is remembered on its own (its group is awake)."""
        group = self._filed.get(job_id)
        return group is not None and job_id in group.solo

    def group_of(self, job_id: str) -> GroupKey | None:
        """The key of the request group the job is filed in (None: not a pending job of the
        memo, or one to be decided before its group can leave it out: ``explain_waits``)."""
        group = self._filed.get(job_id)
        if group is None or (self._unexplained is not None and job_id in self._unexplained):
            return None
        return group.key

    def remembered(self) -> Iterator[str]:
        """The ids of the jobs left out."""
        unexplained = self._unexplained
        for group in self._groups.values():
            held = group.members if group.asleep else group.solo
            yield from held if not unexplained else (j for j in held if j not in unexplained)

    def note(self, job_id: str, result: PlacementResult) -> None:
        """Remember ``job_id`` on its own if the last decision of ``result`` found nothing
        (and it is still pending in the view), making its request a shape when it can; forget
        it otherwise."""
        self._noted.add(job_id)  # (handed back as touched: the queue files it again, in its group)
        if self._unexplained is not None:
            self._unexplained.discard(job_id)
        group = self._filed.get(job_id)
        if group is not None:
            self._unsolo(job_id, group)
        attempts = result.attempts
        if result.job_gone or result.gave_up or not result.pending or not attempts:
            return
        if attempts[-1].outcome not in _FOUND_NO_MORE:
            return
        entry = self.view.job(job_id)
        if entry is None or group is None:
            return
        if not group.asleep:
            group.solo[job_id] = entry.mod_revision
            self._index(group)
        spec = entry.record.job
        if attempts[-1].outcome is AttemptOutcome.NOTHING_FITS and not spec.constraints and \
                not (spec.gang or self.all_or_nothing) and "a" not in entry.record.tasks and \
                "r" not in entry.record.tasks:
            self._add_shape(spec.request)  # (a gang placing nothing may have had room for some tasks)

    def _add_shape(self, request: Resources) -> None:
        if any(s.fits_in(request) for s in self._shapes) or any(s.fits_in(request) for s in self._new_shapes):
            return  # a smaller shape already has no room
        self._shapes = [s for s in self._shapes if not request.fits_in(s)]
        self._new_shapes = [s for s in self._new_shapes if not request.fits_in(s)] + [request]

    # -- round by round ------------------------------------------------------------------------

    def refresh(self, changed: Iterable[str], pending: PendingLookup) -> MemoChanges:
        """Bring the memo up to the view (module docstring): wake the groups a machine that
        freed room now has room for (and release their solo jobs), file the ``changed`` jobs
        (``pending`` tells which are pending for this scheduler) and release the solo ones
        whose record changed, then put to sleep the groups the new shapes cover."""
        changes = self._changes = MemoChanges(touched=self._noted)
        self._noted = set()
        self._wake_by_freed_room()
        filed = self._filed
        for job_id in changed:
            entry = pending(job_id)
            if entry is not None or job_id in filed:
                self._file(job_id, entry)
        self._sleep_by_new_shapes()
        return changes

    def _file(self, job_id: str, entry: JobEntry | None) -> None:
        """File a changed job in its request's group (or out, if not pending)."""
        group = self._filed.get(job_id)
        request = None if entry is None else entry.record.job.request
        if group is not None and group.request is not request and (
                request is None or group.key != (request.cpu, request.memory, request.disk, request.extra)):
            self._leave(job_id, group)  # the key is group_key's, built inline
            group = None
        if request is None:
            return
        if group is None:
            self._join(job_id, request)
            return
        seen = group.solo.get(job_id)
        if seen is not None and seen != entry.mod_revision:
            self._unsolo(job_id, group)
            self.released += 1
            self._changes.touched.add(job_id)

    def _join(self, job_id: str, request: Resources) -> None:
        key = group_key(request)
        group = self._groups.get(key)
        if group is None:
            self._groups[key] = group = _Group(request, key)
            if any(s.fits_in(request) for s in self._shapes):
                self._set_asleep(group, True)
        group.members.add(job_id)
        self._filed[job_id] = group
        if self._unexplained is not None:
            self._unexplained.add(job_id)

    def _leave(self, job_id: str, group: _Group) -> None:
        del self._filed[job_id]
        if self._unexplained is not None:
            self._unexplained.discard(job_id)
        group.members.discard(job_id)
        self._unsolo(job_id, group)
        if not group.members:
            if group.asleep:
                self._set_asleep(group, False)  # the queue forgets it too
            self._unindex(group)
            del self._groups[group.key]

    def _unsolo(self, job_id: str, group: _Group) -> None:
        if group.solo.pop(job_id, None) is not None and not group.solo and not group.asleep:
            self._unindex(group)

    def _set_asleep(self, group: _Group, asleep: bool) -> None:
        group.asleep = asleep
        self._changes.groups[group.key] = asleep
        if group.solo:  # solo jobs now follow the group
            self._changes.touched.update(group.solo)
            group.solo.clear()
        if asleep:
            self._index(group)
        else:
            self._unindex(group)

    def _index(self, group: _Group) -> None:
        if not group.indexed:
            group.indexed = True
            self._requests.add(group.request)

    def _unindex(self, group: _Group) -> None:
        if group.indexed:
            group.indexed = False
            self._requests.remove(group.request)

    def _wake_by_freed_room(self) -> None:
        freed = self.view.take_freed_machines()
        if not freed or not (self._requests or self._shapes or self._new_shapes):
            return
        up, machine_of = MachineState.UP, self.view.machine
        frees = [held.machine.free for held in map(machine_of, freed)
                 if held is not None and held.machine.state is up]
        if not frees:
            return
        most = core_maximum(frees)
        if self._shapes or self._new_shapes:
            self._shapes = _without_room_in(self._shapes, frees, most)
            self._new_shapes = _without_room_in(self._new_shapes, frees, most)
        for request in self._requests.fitting(frees, most):
            group = self._groups[group_key(request)]
            self.released += len(group.members) if group.asleep else len(group.solo)
            if group.asleep:
                self._set_asleep(group, False)
            else:
                self._changes.touched.update(group.solo)
                group.solo.clear()
                self._unindex(group)

    def _sleep_by_new_shapes(self) -> None:
        new, self._new_shapes = self._new_shapes, []
        if not new:
            return
        cpu, memory, disk = (min(s.cpu for s in new), min(s.memory for s in new), min(s.disk for s in new))
        for group in self._groups.values():
            request = group.request
            if group.asleep or request.cpu < cpu or request.memory < memory or request.disk < disk:
                continue  # smaller than every new shape in some resource
            if any(s.fits_in(request) for s in new):
                self._set_asleep(group, True)
        self._shapes += new


def core_maximum(frees: list[Resources]) -> tuple[int, int, int]:
    """The largest cpu, memory and disk of ``frees`` (not empty)."""
    if len(frees) == 1:
        free = frees[0]
        return free.cpu, free.memory, free.disk
    return max(f.cpu for f in frees), max(f.memory for f in frees), max(f.disk for f in frees)


def _without_room_in(shapes: list[Resources], frees: list[Resources],
                     most: tuple[int, int, int]) -> list[Resources]:
    """The shapes that fit in none of ``frees`` (a shape larger than their largest cpu,
    memory or disk, ``most``, is kept without a look at each)."""
    if not shapes:
        return shapes
    cpu, memory, disk = most
    return [s for s in shapes if s.cpu > cpu or s.memory > memory or s.disk > disk
            or not any(s.fits_in(f) for f in frees)]
