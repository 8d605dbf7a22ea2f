"""``ReplicaView``: what a scheduler process reads and refreshes — a ``Replica`` of its cell
plus ``apply_outcome`` (omega's ``PlacementView``), the live peers of a scheduler kind
(from the leased ``stats/`` keys) and a "the cell freed resources" flag.

Freed resources: a machine whose ledger shrank in some dimension (a task ended, was
evicted or its machine failed), a machine that came back up, or a new machine. Deferred
jobs may fit again then, so the scheduler resets their backoff (``take_freed``). With
``track_freed_machines()`` the view also collects which machines freed room
(``take_freed_machines``), for a caller that remembers where nothing fit.
Our own commits only grow ledgers, so they never raise the flag.

Not thread-safe (like the replica): the scheduler's worker thread owns it.
"""

from __future__ import annotations

from typing import Callable

from cellstate.codec.fields import CodecError
from cellstate.keys import CellKeys
from cellstate.model import Machine, MachineState
from cellstate.replica.watched import Replica
from cellstate.replica.state import ReplicaState
from cellstate.codec.stats import decode_stats
from cellstate.store import Store
from cellstate.plan import CommitOutcome, JobEntry, MachineEntry

_UP = MachineState.UP


def frees_resources(old: Machine | None, new: Machine) -> bool:
    """True when ``new`` offers room ``old`` did not: a new machine, one back up, a bigger
    capacity or a ledger that shrank in some dimension."""
    if old is None:
        return new.state is MachineState.UP
    if new.state is not MachineState.UP:
        return False
    if old.state is not MachineState.UP:
        return True
    a, b, capacity = old.allocated, new.allocated, new.capacity
    if capacity is old.capacity or capacity == old.capacity:
        # Same capacity: free grew somewhere iff the ledger shrank there.
        if b.cpu < a.cpu or b.memory < a.memory or b.disk < a.disk:
            return True
        if a.extra == b.extra:
            return False
        after = dict(b.extra)
        return any(after.get(name, 0) < amount for name, amount in a.extra)
    return not new.free.fits_in(old.free)


class _WatchedReplica(Replica):
    """A replica that notices machines freeing resources as the watch applies them."""

    freed = False
    freed_ids: set[str] | None = None  # machines that freed room, when tracked
    changed_ids: set[str] | None = None  # machines whose entry changed, when tracked

    def _set_machine(self, ident: str, entry: MachineEntry) -> None:
        machines = self._machines
        old = machines.get(ident)
        machines[ident] = entry  # ReplicaState._set_machine, inlined: once per ledger change
        if self.changed_ids is not None:
            self.changed_ids.add(ident)
        ids = self.freed_ids
        if ids is None and self.freed:
            return
        new = entry.machine
        if old is None:
            freed = frees_resources(None, new)
        else:
            old = old.machine
            capacity = new.capacity
            if (capacity is old.capacity and new.state is _UP and old.state is _UP
                    and not (capacity.extra or old.allocated.extra or new.allocated.extra)):
                a, b = old.allocated, new.allocated  # frees_resources' usual case, without its call
                freed = b.cpu < a.cpu or b.memory < a.memory or b.disk < a.disk
            else:
                freed = frees_resources(old, new)
        if freed:
            self.freed = True
            if ids is not None:
                ids.add(ident)

    def sync(self) -> int:
        """``Replica.sync``, with the machines and jobs the listing no longer holds noted as
        changed: after a compaction their deletes never reached the watch."""
        machines, jobs = list(self._machines), list(self._jobs)
        revision = super().sync()
        if self.changed_ids is not None:
            self.changed_ids.update(ident for ident in machines if ident not in self._machines)
        if self.changed_jobs is not None:
            self.changed_jobs.update(ident for ident in jobs if ident not in self._jobs)
        return revision

    def _forget(self, kind: str, key: str, ident: str) -> None:
        ReplicaState._forget(self, kind, key, ident)  # not super(): once per delete
        if kind == "machines" and self.changed_ids is not None:
            self.changed_ids.add(ident)


class ReplicaView:
    """A ``PlacementView`` over a synced replica of the cell ``keys`` in ``store``."""

    def __init__(self, store: Store, keys: CellKeys, **replica_options):
        self.replica = _WatchedReplica(store, keys, **replica_options)
        self.replica.sync()
        self._stats_kinds: dict[str, tuple[bytes, str]] = {}
        self.job, self.machine = self.replica.job, self.replica.machine  # hot reads: no __getattr__ hop

    def __getattr__(self, name):
        return getattr(self.replica, name)

    @property
    def revision(self) -> int:
        return self.replica.revision

    def pump(self, timeout: float = 0.0, max_batches: int | None = None) -> int:
        """Apply ready watch batches, waiting up to ``timeout`` s for the first (see Replica.pump)."""
        return self.replica.pump(timeout, max_batches)

    def close(self) -> None:
        self.replica.close()

    def apply_outcome(self, outcome: CommitOutcome) -> None:
        """Take in a commit: its written keys on success, the fresh compared entries on failure."""
        if outcome.committed:
            if outcome.applied:  # the committer's own objects: nothing to decode
                self.replica.apply_commit(outcome.revision, outcome.applied_machines, outcome.applied_jobs,
                                          outcome.applied_allocs, outcome.deleted)
            elif outcome.written or outcome.deleted:
                self.replica.apply_local(outcome.revision, outcome.written, outcome.deleted)
            return
        machines = outcome.fresh_machines
        self._note_fresh_machines(m for m in machines.values() if m)
        if self.replica.changed_ids is not None:
            self.replica.changed_ids.update(machines)
        jobs = {job.id: job for job in (outcome.fresh_job, *outcome.fresh_victims.values()) if job}
        gone_jobs = [job_id for job_id, job in outcome.fresh_victims.items() if job is None]
        gone_machines = [mid for mid, m in machines.items() if m is None]
        bad = outcome.quarantined
        if bad:  # None entries of quarantined keys: unusable, not deleted (the replica quarantines them)
            keys = self.replica.keys
            gone_jobs = [job_id for job_id in gone_jobs if keys.job(job_id) not in bad]
            gone_machines = [mid for mid in gone_machines if keys.machine(mid) not in bad]
        victim_allocs = outcome.fresh_victim_allocs
        gone_allocs = [task for task, entry in victim_allocs.items() if entry is None]
        if bad and gone_allocs:
            keys = self.replica.keys
            gone_allocs = [task for task in gone_allocs if keys.alloc(*task) not in bad]
        self.replica.apply_entries([m for m in machines.values() if m], jobs.values(),
                                   revision=outcome.revision, deleted_machines=gone_machines,
                                   deleted_jobs=gone_jobs, deleted_allocs=gone_allocs,
                                   allocs=[*outcome.fresh_allocs.values(), *(e for e in victim_allocs.values() if e)])
        if bad:
            self.replica.apply_quarantined(bad)

    def _note_fresh_machines(self, entries) -> None:
        """Raise the freed flag for fresh entries (read by a failed commit) that free room:
        the watch will skip their events, so it would not notice them."""
        for entry in entries:
            held = self.replica.machine(entry.id)
            if (held is None or held.mod_revision < entry.mod_revision) and \
                    frees_resources(held.machine if held else None, entry.machine):
                self.replica.freed = True
                if self.replica.freed_ids is not None:
                    self.replica.freed_ids.add(entry.id)

    def take_freed(self) -> bool:
        """True (once) if machines freed resources since the last call."""
        freed, self.replica.freed = self.replica.freed, False
        return freed

    def track_freed_machines(self) -> None:
        """From now on, collect the ids of machines that free room (see ``take_freed_machines``)."""
        if self.replica.freed_ids is None:
            self.replica.freed_ids = set()

    def track_changed_machines(self) -> None:
        """From now on, collect the ids of machines whose entry changed (``take_changed_machines``)."""
        if self.replica.changed_ids is None:
            self.replica.changed_ids = set()

    def take_changed_machines(self) -> set[str]:
        """Ids of the machines whose entry changed (or went away) since the last call
        (tracking must be on)."""
        ids = self.replica.changed_ids
        if ids is None:
            raise RuntimeError("take_changed_machines needs track_changed_machines() first")
        self.replica.changed_ids = set()
        return ids

    def track_changed_jobs(self) -> None:
        """From now on, collect the ids of jobs whose record changed, appeared or went away
        (``take_changed_jobs``)."""
        if self.replica.changed_jobs is None:
            self.replica.changed_jobs = set()

    def take_changed_jobs(self) -> set[str]:
        """Ids of the jobs whose record changed since the last call (tracking must be on)."""
        ids = self.replica.changed_jobs
        if ids is None:
            raise RuntimeError("take_changed_jobs needs track_changed_jobs() first")
        self.replica.changed_jobs = set()
        return ids

    def pending_of_classes(self, classes) -> Callable[[str], JobEntry | None]:
        """job id → its entry if it is pending, not killed and of one of the scheduler
        ``classes`` (``Job.scheduler_class``); None otherwise. One class: the class index's own
        ``get`` (no Python frame per call)."""
        lookups = [self.replica.pending_class_lookup(c) for c in sorted(classes)]
        if len(lookups) == 1:
            return lookups[0]

        def pending(job_id: str) -> JobEntry | None:
            for lookup in lookups:
                entry = lookup(job_id)
                if entry is not None:
                    return entry
            return None
        return pending

    def take_freed_machines(self) -> set[str]:
        """Ids of the machines that freed room since the last call (tracking must be on);
        independent of ``take_freed``'s flag."""
        ids = self.replica.freed_ids
        if ids is None:
            raise RuntimeError("take_freed_machines needs track_freed_machines() first")
        self.replica.freed_ids = set()
        return ids

    def peers(self, kind: str) -> list[str]:
        """Names of the schedulers of ``kind`` whose leased stats key is live, sorted.
        Values that do not decode are ignored (the replica quarantines nothing here)."""
        prefix = self.replica.keys.kind_prefix("stats")
        names = []
        seen = set()
        for key, raw in self.replica.stats_raw.items():
            seen.add(key)
            cached = self._stats_kinds.get(key)
            if cached is None or cached[0] is not raw:
                try:
                    cached = (raw, decode_stats(key, raw).kind)
                except CodecError:
                    cached = (raw, "")
                self._stats_kinds[key] = cached
            if cached[1] == kind:
                names.append(key[len(prefix):])
        for key in set(self._stats_kinds) - seen:
            del self._stats_kinds[key]
        return sorted(names)

