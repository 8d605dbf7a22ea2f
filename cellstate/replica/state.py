"""The decoded content of one cell and its indexes, as kept by a ``Replica``.

``ReplicaState`` applies single key changes (a put of raw bytes, or a delete) and keeps:
machines, jobs and allocations decoded (by ``cellstate.codec.records``; the watch's puts ask the
codec's memo of recent values first, without the decoder's call), ``stats/`` and
``conflicts/`` values raw, the mod_revision of every key it holds, and three indexes
(pending jobs by kind, allocations by machine and by job). A value that fails to decode, or
whose id is not its key's (``machines/{id}``, ``jobs/{id}``, ``allocs/{job}/{task}``), is
quarantined, never fatal: reported to ``on_decode_error(key, error)`` once (not again while the
key stays quarantined for the same reason), recorded in ``quarantine`` and treated as absent
(a quarantined machine takes no claims, a quarantined job is not scheduled); a later good value
(or a delete) clears it. ``kills/`` markers are held raw (``kills_raw``).

Job entries hold the *effective* record (``model.effective_tasks``: a pending task of a job that
is not a gang and that has an allocation is placed), with the stored record's mod_revision, so
every reader sees placements that wrote no record. Kept incrementally: per job the stored
entry (``_raw_jobs``) and the derived task indices (``_derived``); allocation puts and deletes
and record puts note the job (``_dirty``: the new derived tasks, or None to rebuild), and each
apply (a watch batch, a listing, a commit, a single ``_put``/``_delete``) rebuilds each noted
job's effective record once (``_flush_derived``: a copy of the task string, then one byte per
new derived task). A record put of a job with ``MASK_FROM`` allocs or more finds its derived
tasks in C (ints, or numpy from ``NUMPY_FROM`` tasks), against the job's alloc mask
(``_alloc_masks``: one byte per task, 1 where it has an alloc), kept from then on until the job
has no alloc. Allocation puts, deletes, indexes and masks are ``AllocIndex``'s, the state's base
(``cellstate.replica.allocs``).

Not thread-safe: one thread applies and reads (see ``cellstate.replica.watched``).
"""

from __future__ import annotations

import logging
from typing import Callable, Iterable

from cellstate.codec.records import (
    MACHINE_MEMO, RECORD_MEMO, CodecError, decode_alloc, decode_job_record, decode_machine,
)
from cellstate.fastbuild import builder
from cellstate.keys import CellKeys
from cellstate.model import Alloc, JobKind, set_placed
from cellstate.replica.allocs import MASK_FROM, AllocIndex, pending_allocated
from cellstate.replica.shared_decodes import SharedDecodes
from cellstate.plan import AllocEntry, JobEntry, MachineEntry

log = logging.getLogger(__name__)

DecodeErrorHandler = Callable[[str, Exception], None]
_MACHINE_ENTRY, _JOB_ENTRY = builder(MachineEntry), builder(JobEntry)  # entries without __init__'s cost
_EMPTY: dict = {}  # shared, never mutated: the answer for an unknown machine or job


def log_decode_error(key: str, error: Exception) -> None:
    """Default decode-error handler: a warning in the log."""
    log.warning("cell replica: quarantined %s (does not decode or names another id; treated as absent): %s",
                key, error)


class ReplicaState(AllocIndex):
    """Decoded cell content with incremental indexes (see the module docstring)."""

    changed_jobs: set[str] | None = None  # jobs whose record changed, appeared or went away, when tracked

    def __init__(self, keys: CellKeys, on_decode_error: DecodeErrorHandler | None = None,
                 shared_decodes: SharedDecodes | None = None):
        self.keys = keys
        self.on_decode_error = on_decode_error or log_decode_error
        share = shared_decodes.decoder if shared_decodes is not None else (lambda decode: decode)
        self._decode_machine, self._decode_job, self._decode_alloc = (
            share(decode_machine), share(decode_job_record), share(decode_alloc))
        self._prefix = keys.prefix
        self._plen = len(self._prefix)
        self._alloc_prefix = keys.kind_prefix("allocs")
        self._job_prefix, self._machine_prefix = keys.kind_prefix("jobs"), keys.kind_prefix("machines")
        self._put_kind = {
            "machines": self._put_machine, "jobs": self._put_job, "allocs": self._put_alloc,
            "stats": self._put_stats, "conflicts": self._put_conflict, "gangs": self._put_gang,
            "kills": self._put_kill,
        }
        self.quarantine: dict[str, str] = {}  # key -> why its value was refused
        self.stats_raw: dict[str, bytes] = {}
        self.conflicts_raw: dict[str, bytes] = {}
        self.gangs_raw: dict[str, bytes] = {}  # gangs/{job} (reservations in progress): raw, by key
        self.kills_raw: dict[str, bytes] = {}  # kills/{job} (kill markers): raw, by key
        self._mod: dict[str, int] = {}  # key -> mod_revision (or a local delete's revision)
        self._machines: dict[str, MachineEntry] = {}
        self._jobs: dict[str, JobEntry] = {}  # effective records (see the module docstring)
        self._raw_jobs: dict[str, JobEntry] = {}  # the stored records
        self._derived: dict[str, set[int]] = {}  # job -> its derived task indices (non-empty sets only)
        self._dirty: dict[str, list[int] | None] = {}  # job -> new derived tasks, or None: rebuild
        # job -> the revision of a record taken ahead of the watch (a failed commit's read): its
        # allocs held may be older than the record, so none is derived until the watch is there
        self._ahead: dict[str, int] = {}
        self._allocs: dict[str, Alloc] = {}  # by key
        self._pending: dict[JobKind, dict[str, JobEntry]] = {kind: {} for kind in JobKind}
        # the same entries by scheduler class (``Job.scheduler_class``): the jobs a scheduler serves
        self._pending_class: dict[str, dict[str, JobEntry]] = {}
        self._allocs_on: dict[str, dict[str, Alloc]] = {}  # machine -> alloc key -> alloc
        self._allocs_of: dict[str, dict[int, Alloc]] = {}
        # job -> one byte per task, 1 where it has an alloc: kept from MASK_FROM allocs on (when
        # a record is put), until the job has none, so a record put tests its tasks in C
        self._alloc_masks: dict[str, bytearray] = {}
        # machine(id) and job(id): the schedulers' hottest reads, so the dicts' own ``get``
        # (no Python frame per call); the dicts live as long as the state (``_reset`` clears them).
        self.machine: Callable[[str], MachineEntry | None] = self._machines.get
        self.job: Callable[[str], JobEntry | None] = self._jobs.get

    def _reset(self) -> None:
        """Forget everything (every dict is cleared in place)."""
        for held in (self.quarantine, self.stats_raw, self.conflicts_raw, self.gangs_raw, self.kills_raw, self._mod,
                     self._machines, self._jobs, self._raw_jobs, self._derived, self._dirty, self._ahead, self._allocs,
                     self._allocs_on, self._allocs_of, self._alloc_masks, *self._pending.values(),
                     *self._pending_class.values()):
            held.clear()

    # -- reads ---------------------------------------------------------------------------

    def machines(self) -> Iterable[MachineEntry]:
        """Live view of every machine entry (no copy; do not hold across applies)."""
        return self._machines.values()

    def machine(self, machine_id: str) -> MachineEntry | None:
        """One machine's entry, None when the replica has none by that id."""
        return self._machines.get(machine_id)

    def machine_count(self) -> int:
        return len(self._machines)

    def jobs(self) -> Iterable[JobEntry]:
        return self._jobs.values()

    def pending_jobs(self, kind: JobKind | None = None) -> list[JobEntry]:
        """Jobs with at least one pending task and not killed, of ``kind`` (None: any)."""
        if kind is None:
            return [entry for by_id in self._pending.values() for entry in by_id.values()]
        return list(self._pending[kind].values())

    def pending_lookup(self, kind: JobKind) -> Callable[[str], JobEntry | None]:
        """job id → the job's entry if it is of ``kind``, not killed and has a pending task:
        the pending index's own ``get`` (one lookup, no Python frame per call; the index lives
        as long as the state; ``pending_jobs`` lists them all)."""
        return self._pending[kind].get

    def pending_class_lookup(self, scheduler_class: str) -> Callable[[str], JobEntry | None]:
        """job id → the job's entry if its scheduler class (``Job.scheduler_class``) is
        ``scheduler_class``, it is not killed and has a pending task: the class index's own
        ``get``, as ``pending_lookup``."""
        by_id = self._pending_class.get(scheduler_class)
        if by_id is None:
            by_id = self._pending_class[scheduler_class] = {}
            for by_kind in self._pending.values():  # (filled as the kind index is from now on)
                for ident, entry in by_kind.items():
                    if entry.record.job.scheduler_class == scheduler_class:
                        by_id[ident] = entry
        return by_id.get

    def allocs(self) -> Iterable[Alloc]:
        return self._allocs.values()

    def allocs_on(self, machine_id: str) -> Iterable[Alloc]:
        return self._allocs_on.get(machine_id, _EMPTY).values()

    def alloc_entry(self, job_id: str, task_index: int) -> AllocEntry | None:
        """The allocation of one task with the mod_revision this replica holds for it."""
        key = self.keys.alloc(job_id, task_index)
        alloc = self._allocs.get(key)
        return None if alloc is None else AllocEntry(alloc, self._mod.get(key, 0))

    def allocs_of(self, job_id: str) -> Iterable[Alloc]:
        return self._allocs_of.get(job_id, _EMPTY).values()

    def stats(self) -> dict[str, bytes]:
        """Raw ``stats/`` values by key (the monitor decodes them)."""
        return self.stats_raw

    def mod_revision(self, key: str) -> int:
        """The mod_revision this replica holds for ``key`` (0: unknown or deleted)."""
        return self._mod.get(key, 0)

    # -- single-key changes ----------------------------------------------------------------

    def _put(self, key: str, raw: bytes, mod: int) -> None:
        """Store the value of ``key`` at ``mod``; a bad value is quarantined, never fatal."""
        self._mod[key] = mod
        self._store_value(key, raw, mod)
        if self._dirty:
            self._flush_derived()

    def _store_value(self, key: str, raw: bytes, mod: int) -> None:
        """``_put`` but for the mod record (the caller's business)."""
        kind, _, ident = key[self._plen:].partition("/")
        try:
            handler = self._put_kind[kind]
        except KeyError:
            self._reject(key, ValueError(f"key {key!r} has unknown kind {kind!r} "
                                         f"(expected one of {', '.join(self._put_kind)})"))
            return
        try:
            handler(key, ident, raw, mod)
        except CodecError as exc:
            self._forget(kind, key, ident)
            self._reject(key, exc)
            return
        if self.quarantine and key in self.quarantine:  # (usually empty: no lookup)
            del self.quarantine[key]

    def _delete(self, key: str) -> None:
        """Forget ``key`` (its mod record is the caller's business)."""
        kind, _, ident = key[self._plen:].partition("/")
        self._forget(kind, key, ident)
        if self.quarantine:
            self.quarantine.pop(key, None)
        if self._dirty:
            self._flush_derived()

    def _reject(self, key: str, error: Exception) -> None:
        why = str(error)
        if self.quarantine.get(key) == why:
            return  # reported when it came (the same bad value again, or read back by a failed commit)
        self.quarantine[key] = why
        try:
            self.on_decode_error(key, error)
        except Exception:  # a faulty handler must not break the replica
            log.exception("decode-error handler failed for %s", key)

    def _forget(self, kind: str, key: str, ident: str) -> None:
        """Drop the value of ``key`` (of ``kind``, named ``ident``) from the content and its
        indexes (subclasses note machines going away here; allocs go by ``_drop_alloc``)."""
        if kind == "allocs":
            self._drop_alloc(key)
        elif kind == "machines":
            self._machines.pop(ident, None)
        elif kind == "jobs":
            self._raw_jobs.pop(ident, None)
            self._derived.pop(ident, None)
            self._dirty.pop(ident, None)
            self._ahead.pop(ident, None)
            old_job = self._jobs.pop(ident, None)
            if old_job is not None:
                self._pending[old_job.record.job.kind].pop(ident, None)
                if self._pending_class:
                    self._unpend_class(old_job, ident)
            if self.changed_jobs is not None:
                self.changed_jobs.add(ident)
        elif kind == "stats":
            self.stats_raw.pop(key, None)
        elif kind == "conflicts":
            self.conflicts_raw.pop(key, None)
        elif kind == "gangs":
            self.gangs_raw.pop(key, None)
        elif kind == "kills":
            self.kills_raw.pop(key, None)

    # -- by kind ----------------------------------------------------------------------------

    def _store_machine(self, key: str, raw: bytes, mod: int) -> None:
        """``_store_value`` of a key under ``machines/``, without the dispatch by kind (a value
        that does not decode or match its key takes ``_store_value``'s path)."""
        machine = MACHINE_MEMO.get(raw) if type(raw) is bytes else None  # (see _put_allocs)
        if machine is None:
            try:
                machine = self._decode_machine(key, raw)
            except CodecError:
                pass
        if machine is None or key[len(self._machine_prefix):] != machine.id:
            self._store_value(key, raw, mod)
            return
        self._set_machine(machine.id, _MACHINE_ENTRY(machine, mod))
        if self.quarantine and key in self.quarantine:
            del self.quarantine[key]

    def _store_job(self, key: str, raw: bytes, mod: int) -> None:
        """``_store_machine`` for a key under ``jobs/``."""
        record = RECORD_MEMO.get(raw) if type(raw) is bytes else None  # (see _put_allocs)
        if record is None:
            try:
                record = self._decode_job(key, raw)
            except CodecError:
                pass
        if record is None or key[len(self._job_prefix):] != record.job.id:
            self._store_value(key, raw, mod)
            return
        self._set_job(record.job.id, _JOB_ENTRY(record, mod))  # (the record's id: see _put_job)
        if self.quarantine and key in self.quarantine:
            del self.quarantine[key]

    def _put_machine(self, key: str, ident: str, raw: bytes, mod: int) -> None:
        machine = self._decode_machine(key, raw)
        if machine.id != ident:
            raise CodecError(key, "id", f"machine id {machine.id!r} does not match its key")
        self._set_machine(machine.id, _MACHINE_ENTRY(machine, mod))  # (see _put_job)

    def _set_machine(self, ident: str, entry: MachineEntry) -> None:
        """Hold ``entry`` for machine ``ident`` (subclasses watch ledgers change here)."""
        self._machines[ident] = entry

    def _put_job(self, key: str, ident: str, raw: bytes, mod: int) -> None:
        record = self._decode_job(key, raw)
        if record.job.id != ident:
            raise CodecError(key, "spec.id", f"job id {record.job.id!r} does not match its key")
        # The id the record carries (equal to ident): one str object across the job's versions,
        # so the index lookups below compare by identity with a cached hash.
        self._set_job(record.job.id, _JOB_ENTRY(record, mod))

    def _set_job(self, ident: str, entry: JobEntry) -> None:
        """Hold ``entry``, the stored record of job ``ident``: its effective record is held
        now when no task of it is derived, else noted for ``_flush_derived`` (the stored one
        held meanwhile, so the jobs keep their order)."""
        self._raw_jobs[ident] = entry
        record = entry.record
        of = self._allocs_of.get(ident)
        if of and not record.job.gang:
            tasks = record.tasks
            if "p" not in tasks:  # (C: most records put have no pending task)
                derived = None
            elif self._ahead and ident in self._ahead:
                derived = self._current_derived(ident, tasks, of)
            elif len(of) < MASK_FROM:
                n = len(tasks)
                derived = {i for i in of if i < n and tasks[i] == "p"}
            else:  # the same in C: the allocated tasks among the pending ones
                mask = self._alloc_masks.get(ident)
                if mask is None:
                    mask = self._new_alloc_mask(ident, of)
                derived = pending_allocated(tasks, mask)
            if derived:
                self._derived[ident] = derived
                self._dirty[ident] = None
            elif ident in self._derived:
                del self._derived[ident]
        elif ident in self._derived:
            del self._derived[ident]
        self._store_effective(ident, entry)

    def _store_effective(self, ident: str, entry: JobEntry) -> None:
        """Hold ``entry`` (an effective record) for job ``ident``, in the pending index when it
        has a pending task and is not killed; note ``ident`` in ``changed_jobs`` when tracked."""
        record = entry.record
        old = self._jobs.get(ident)
        self._jobs[ident] = entry
        kind = record.job.kind
        if old is not None and old.record.job.kind is not kind:
            self._pending[old.record.job.kind].pop(ident, None)
        pending = not record.killed and "p" in record.tasks
        if pending:
            self._pending[kind][ident] = entry
        else:
            self._pending[kind].pop(ident, None)
        if self._pending_class:  # (no class index asked for: nothing to keep)
            job = record.job
            scheduler_class = job.scheduler or job.kind._value_  # (Job.scheduler_class, without its call)
            if old is not None and old.record.job is not job and old.record.job.scheduler_class != scheduler_class:
                self._unpend_class(old, ident)
            by_class = self._pending_class.get(scheduler_class)
            if by_class is not None:
                if pending:
                    by_class[ident] = entry
                else:
                    by_class.pop(ident, None)
        if self.changed_jobs is not None:
            self.changed_jobs.add(ident)

    def _note_alloc(self, job_id: str, task: int) -> None:
        """An allocation of ``job_id``'s task ``task`` was put: the task is derived if the
        stored record has it pending (and the job is no gang)."""
        raw = self._raw_jobs.get(job_id)
        if raw is None:
            return  # (no record yet: its put derives from the allocations held)
        if self._ahead and job_id in self._ahead \
                and self._mod.get(self.keys.alloc(job_id, task), 0) < self._ahead[job_id]:
            return  # (an alloc older than a record held ahead of the watch: see _set_job_ahead)
        record = raw.record
        tasks = record.tasks
        if task < len(tasks) and tasks[task] == "p" and not record.job.gang:
            derived = self._derived.get(job_id)
            if derived is None:
                self._derived[job_id] = derived = set()
            derived.add(task)
            dirty = self._dirty
            if job_id not in dirty:
                dirty[job_id] = [task]
            else:
                new = dirty[job_id]
                if new is not None:
                    new.append(task)

    def _set_job_ahead(self, ident: str, entry: JobEntry, revision: int) -> None:
        """Hold ``entry`` (a record read at ``revision``, ahead of the watch) as ``_set_job``, but
        until the watch reaches ``revision`` (``_caught_up``) derive tasks only from allocations
        written at or after it (``_current_derived``): older ones may have been deleted meanwhile
        (the watch has not brought the delete yet) and would place their task again. Too few
        placed tasks only cost a failed commit (its alloc compare); one too many could be written
        into the record by a writer of the effective view (``lifecycle_txn``, the committer)."""
        self._ahead[ident] = max(revision, self._ahead.get(ident, 0))
        self._set_job(ident, entry)

    def _current_derived(self, ident: str, tasks: str, of: dict[int, Alloc]) -> set[int]:
        """The derived tasks of a job held ahead of the watch: only allocations written at or
        after the record's read (the owner's own commits, a failed commit's reads) count."""
        ahead, mods, alloc_key, n = self._ahead[ident], self._mod, self.keys.alloc, len(tasks)
        return {i for i in of if i < n and tasks[i] == "p" and mods.get(alloc_key(ident, i), 0) >= ahead}

    def _caught_up(self, revision: int) -> None:
        """The watch reached ``revision``: the jobs held ahead of it up to there derive again."""
        for ident, ahead in list(self._ahead.items()):
            if ahead <= revision:
                del self._ahead[ident]
                raw = self._raw_jobs.get(ident)
                if raw is not None:
                    self._set_job(ident, raw)

    def _unnote_alloc(self, job_id: str, task: int) -> None:
        """The allocation of ``job_id``'s task ``task`` went away: no longer derived."""
        derived = self._derived.get(job_id)
        if derived is not None and task in derived:
            derived.discard(task)
            if not derived:
                del self._derived[job_id]
            self._dirty[job_id] = None

    def _flush_derived(self) -> None:
        """Rebuild the effective record of each job noted since the last flush: from the stored
        record with every derived task (a rebuild), or from the effective record held with the
        new derived tasks only (ASCII task strings through a bytearray: ``model.set_placed``)."""
        dirty, self._dirty = self._dirty, {}
        raw_jobs, derived_of, allocs_of, jobs = self._raw_jobs, self._derived, self._allocs_of, self._jobs
        for ident, new in dirty.items():
            raw = raw_jobs.get(ident)
            if raw is None:
                continue
            derived = derived_of.get(ident)
            of = allocs_of.get(ident)
            if not derived or of is None:
                if jobs.get(ident) is not raw:
                    self._store_effective(ident, raw)
                continue
            held = jobs.get(ident)
            if new is None or held is None:
                base, tasks = raw.record, derived
            else:
                base, tasks = held.record, new
            changes = [(i, of[i].running) for i in tasks if i in of]
            record = raw.record
            states = set_placed(base.tasks, changes) if changes else base.tasks
            self._store_effective(ident, _JOB_ENTRY(record.with_progress(
                states, record.reason, record.first_attempt_at, record.placed_at), raw.mod_revision))

    def _unpend_class(self, old: JobEntry, ident: str) -> None:
        by_class = self._pending_class.get(old.record.job.scheduler_class)
        if by_class is not None:
            by_class.pop(ident, None)

    def _put_stats(self, key: str, ident: str, raw: bytes, mod: int) -> None:
        self.stats_raw[key] = raw

    def _put_conflict(self, key: str, ident: str, raw: bytes, mod: int) -> None:
        self.conflicts_raw[key] = raw

    def _put_gang(self, key: str, ident: str, raw: bytes, mod: int) -> None:
        self.gangs_raw[key] = raw

    def _put_kill(self, key: str, ident: str, raw: bytes, mod: int) -> None:
        self.kills_raw[key] = raw
