"""``TxnRunner.commit``'s race loop: a lost race is retried after a jittered backoff, up to
``attempts`` txns, then ``TxnGaveUp``; nothing to do is no txn at all."""

from __future__ import annotations

import random

import pytest

from cellstate.lifecycle_txn import TxnOps
from cellstate.store import TxnResult
from tools.agents.lifecycle import backoff
from tools.agents.metrics import AgentMetrics
from tools.agents.runner import TxnGaveUp, TxnRunner


class LosingStore:
    """Every txn loses its race until ``wins_at`` (1-based; 0: never)."""

    def __init__(self, wins_at: int = 0):
        self.txns, self.wins_at = 0, wins_at

    def txn(self, compares, success, failure):
        self.txns += 1
        return TxnResult(self.txns == self.wins_at, 10 + self.txns)


class HeldReplica:
    """Holds nothing: the failure branches read no key, so there is nothing to catch up with."""

    def __init__(self):
        self.applied = []

    def mod_revision(self, key):
        return 0

    def apply_local(self, revision, puts, deletes):
        self.applied.append(revision)


def _runner(store, attempts=4):
    sleeps = []
    runner = TxnRunner(store, HeldReplica(), AgentMetrics(), random.Random(7), attempts=attempts,
                       sleep=sleeps.append)
    return runner, sleeps


def _sum(metric) -> float:
    return metric._value.get()


def test_a_race_lost_every_time_gives_up_after_attempts_with_backoffs_between():
    store = LosingStore()
    runner, sleeps = _runner(store)
    with pytest.raises(TxnGaveUp, match="release m1: lost the race 4 times in a row"):
        runner.commit(lambda: TxnOps([], [], []), "release m1")
    assert store.txns == 4 and runner.replica.applied == []
    assert _sum(runner.metrics.txn_conflicts) == 4
    rng = random.Random(7)
    assert sleeps == [backoff(attempt, rng) for attempt in range(3)]  # none after the last txn


def test_a_race_won_on_a_retry_applies_that_txn():
    store = LosingStore(wins_at=3)
    runner, sleeps = _runner(store)
    result = runner.commit(lambda: TxnOps([], [], []), "start j/0")
    assert result.succeeded and result.revision == 13
    assert store.txns == 3 and len(sleeps) == 2 and runner.replica.applied == [13]


def test_nothing_to_do_sends_no_txn():
    store = LosingStore()
    runner, sleeps = _runner(store)
    assert runner.commit(lambda: None, "nothing") is None
    assert store.txns == 0 and sleeps == []
