"""``LeasedStatsSink``: publishes a scheduler's stats under its leased ``stats/{name}`` key.

The key lives on a lease of ``ttl`` seconds: each ``publish`` refreshes the lease and puts
the stats with it, so the key vanishes ``ttl`` seconds after the process stops publishing
(crash) and at once on ``close`` (the lease is revoked). A lease that expired meanwhile
(a long pause, an etcd restart) is granted anew. Store outages propagate as ``Unavailable``;
the caller decides whether to try again at the next publish.
"""

from __future__ import annotations

import logging

from cellstate.keys import CellKeys
from cellstate.codec.stats import encode_stats
from cellstate.store import Store, StoreError, Unavailable
from cellstate.scheduler_stats import SchedulerStats

log = logging.getLogger(__name__)

DEFAULT_TTL = 3


class LeasedStatsSink:
    """``omega.runtime.StatsSink`` on a store: see the module docstring."""

    def __init__(self, store: Store, keys: CellKeys, name: str, ttl: int = DEFAULT_TTL):
        if not name or "/" in name:
            raise ValueError(f'scheduler name must be non-empty without "/", got {name!r}')
        if type(ttl) is not int or ttl < 1:
            raise ValueError(f"stats lease ttl must be an int >= 1 second, got {ttl!r}")
        self.store = store
        self.key = keys.stats(name)
        self.name = name
        self.ttl = ttl
        self.lease: int | None = None
        self.grants = 0
        self._closed = False

    def publish(self, stats: SchedulerStats) -> None:
        """Refresh the lease (granting a new one if it is gone) and put the stats with it."""
        if self._closed:
            raise RuntimeError(f"stats sink of {self.name!r} is closed")
        if stats.name != self.name:
            raise ValueError(f"stats of {stats.name!r} published through the sink of {self.name!r}")
        value = encode_stats(stats)
        self._keep_lease()
        try:
            self.store.put(self.key, value, lease=self.lease)
        except Unavailable:
            raise
        except StoreError as exc:  # the lease expired between the refresh and the put
            log.info("stats lease of %s lost (%s); granting a new one", self.name, exc)
            self._grant()
            self.store.put(self.key, value, lease=self.lease)

    def _keep_lease(self) -> None:
        if self.lease is None:
            self._grant()
            return
        try:
            self.store.refresh_lease(self.lease)
        except Unavailable:
            raise
        except StoreError as exc:
            log.info("stats lease of %s expired (%s); granting a new one", self.name, exc)
            self._grant()

    def _grant(self) -> None:
        self.lease = self.store.grant_lease(self.ttl)
        self.grants += 1

    def close(self) -> None:
        """Revoke the lease (the stats key vanishes with it); idempotent."""
        if self._closed:
            return
        self._closed = True
        if self.lease is not None:
            lease, self.lease = self.lease, None
            try:
                self.store.revoke_lease(lease)
            except StoreError as exc:
                log.warning("could not revoke the stats lease of %s (the key expires in %d s): %s",
                            self.name, self.ttl, exc)
