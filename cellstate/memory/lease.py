"""Leases of ``MemoryStore``, as etcd keeps them: a lease expires ``ttl`` seconds after its
grant or last refresh on the store's clock, and its end deletes every key attached to it in
one revision. Expiry is lazy: checked on every store operation and by ``expire_leases()``."""

from __future__ import annotations

from dataclasses import dataclass, field

from cellstate.store import StoreError

LEASE_NOT_FOUND = "requested lease not found"


@dataclass(slots=True)
class Lease:
    ttl: int
    deadline: float
    keys: set[str] = field(default_factory=set)


class MemoryLeases:
    """The lease operations of ``MemoryStore`` (a mixin: the store holds ``_leases``, its
    lock, clock and revision, and deletes keys through ``_write_delete`` and ``_commit``)."""

    def grant_lease(self, ttl: int) -> int:
        if type(ttl) is not int or ttl < 1:
            raise ValueError(f"lease ttl must be a positive int of seconds, got {ttl!r}")
        with self._lock:
            self._start_op()
            lease = next(self._lease_ids)
            self._leases[lease] = Lease(ttl, self.clock() + ttl)
            return lease

    def refresh_lease(self, lease: int) -> None:
        with self._lock:
            self._start_op()
            entry = self._lease(lease)
            entry.deadline = self.clock() + entry.ttl

    def revoke_lease(self, lease: int) -> None:
        """Delete the lease and, in one revision, every key attached to it."""
        with self._lock:
            self._start_op()
            self._lease(lease)
            self._drop_lease(lease)

    def expire_leases(self) -> list[int]:
        """Revoke every lease whose deadline has passed; returns their ids, oldest first."""
        if not self._leases:
            return []
        with self._lock:
            now = self.clock()
            due = sorted((entry.deadline, lease) for lease, entry in self._leases.items() if entry.deadline <= now)
            for _, lease in due:
                self._drop_lease(lease)
            return [lease for _, lease in due]

    def _lease(self, lease: int) -> Lease:
        entry = self._leases.get(lease)
        if entry is None:
            raise StoreError(f"{LEASE_NOT_FOUND}: lease {lease}")
        return entry

    def _drop_lease(self, lease: int) -> None:
        keys = sorted(self._leases.pop(lease).keys)
        revision = self._revision + 1
        events = [self._write_delete(key, revision) for key in keys if key in self._kvs]
        if events:
            self._commit(revision, events)

    def _wait_slice(self, wait: float | None) -> float | None:
        """How long a waiting watch may sleep: until its timeout or the next lease deadline."""
        if not self._leases:
            return wait
        until_expiry = max(0.01, min(lease.deadline for lease in self._leases.values()) - self.clock())
        return until_expiry if wait is None else min(wait, until_expiry)
