"""``TxnRunner``: run an agent transaction built from the replica, retrying lost races.

A build function reads the replica and returns ``TxnOps`` (or None: nothing left to do). On
success the txn's own writes are applied to the replica at the commit revision (they are exact:
every written key was compared or is new). On a lost race the failure branch has read every
compared key; the replica is pumped until it holds each of them at (at least) that fresh
mod_revision — so it is consistent at a revision that includes the winner's txn — and, after a
jittered backoff, the build runs again. ``TxnGaveUp`` after ``attempts`` lost races in a row.
(Waiting for the failed txn's header revision instead could wait forever: that revision may
belong to a write outside this cell.)
"""

from __future__ import annotations

import logging
import random
import time
from typing import Callable

from tenacity import Retrying, retry_if_result, stop_after_attempt

from cellstate.lifecycle_txn import TxnOps
from cellstate.replica.watched import Replica
from cellstate.store import Delete, Put, Store, TxnResult
from tools.agents.lifecycle import backoff
from tools.agents.metrics import AgentMetrics

log = logging.getLogger(__name__)


class TxnGaveUp(Exception):
    """A transaction lost its race ``attempts`` times in a row."""


class TxnRunner:
    """Runs built transactions on ``store`` and keeps ``replica`` in step with them."""

    def __init__(self, store: Store, replica: Replica, metrics: AgentMetrics, rng: random.Random,
                 attempts: int = 8, catch_up_timeout: float = 5.0, sleep: Callable[[float], None] = time.sleep):
        if attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {attempts}")
        self.store = store
        self.replica = replica
        self.metrics = metrics
        self.rng = rng
        self.attempts = attempts
        self.catch_up_timeout = catch_up_timeout
        self._sleep = sleep

    def commit(self, build: Callable[[], TxnOps | None], what: str) -> TxnResult | None:
        """Run ``build()``'s txn until it commits; None when ``build`` finds nothing to do."""
        def attempt() -> TxnResult | None:
            ops = build()
            if ops is None:
                return None
            result = self.store.txn(ops.compares, ops.success, ops.failure)
            if result.succeeded:
                self.apply(result.revision, ops)
            else:
                self.metrics.txn_conflicts.inc()
                self.catch_up(fresh_revisions(ops, result))
            return result

        def lost(state) -> None:
            log.debug("txn conflict what=%r attempt=%d revision=%d", what, state.attempt_number,
                      state.outcome.result().revision)

        def gave_up(state) -> None:
            raise TxnGaveUp(f"{what}: lost the race {self.attempts} times in a row")

        return Retrying(retry=retry_if_result(lambda result: result is not None and not result.succeeded),
                        stop=stop_after_attempt(self.attempts), wait=lambda state: backoff(state.attempt_number - 1, self.rng),
                        sleep=self._sleep, after=lost, retry_error_callback=gave_up)(attempt)

    def apply(self, revision: int, ops: TxnOps) -> None:
        """Apply a committed txn's writes to the replica at ``revision``."""
        puts = [(op.key, op.value) for op in ops.success if type(op) is Put]
        deletes = [op.key for op in ops.success if type(op) is Delete]
        self.replica.apply_local(revision, puts, deletes)

    def catch_up(self, targets: dict[str, int]) -> bool:
        """Pump the replica until it holds every key of ``targets`` at its mod_revision or later
        (0: until the key is absent); False on timeout."""
        deadline = time.monotonic() + self.catch_up_timeout
        mod = self.replica.mod_revision
        while not all(mod(key) >= rev if rev else mod(key) == 0 for key, rev in targets.items()):
            left = deadline - time.monotonic()
            if left <= 0:
                log.warning("replica did not catch up with %d key(s) within %.1fs (at revision %d)",
                            len(targets), self.catch_up_timeout, self.replica.revision)
                return False
            self.replica.pump(timeout=left)
        return True


def fresh_revisions(ops: TxnOps, result: TxnResult) -> dict[str, int]:
    """Key -> mod_revision (0: absent) of each key the failure branch of ``ops`` read."""
    targets: dict[str, int] = {}
    for get, kvs in zip(ops.failure, result.reads):
        targets[get.key] = kvs[0].mod_revision if kvs else 0
    return targets
