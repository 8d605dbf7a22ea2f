"""Fauxmaster metrics on hand-computed cases."""

from __future__ import annotations

import math
import random

import pytest
from fauxmaster_traces import machine

from cellstate.model import Alloc
from cellstate.resources import Resources
from tools.fauxmaster.usage_ledger import UsageLedger
from tools.fauxmaster.metrics import (
    JobJournal,
    WaitStats,
    busyness,
    conflict_fraction,
    load_cv,
    sample_utilization,
)


@pytest.mark.parametrize("waits, expected", [
    ([], WaitStats(0, 0.0, 0.0, 0.0)),
    ([3.0], WaitStats(1, 3.0, 3.0, 3.0)),
    # 1..10: mean 5.5; nearest rank p90 = ceil(9) -> 9th = 9; p99 = ceil(9.9) -> 10th = 10
    ([float(i) for i in range(10, 0, -1)], WaitStats(10, 5.5, 9.0, 10.0)),
], ids=["empty", "one", "one-to-ten"])
def test_wait_stats(waits, expected):
    assert WaitStats.of(waits) == expected


@pytest.mark.parametrize("transactions, failed, conflicts, expected", [
    (0, 0, 0, 0.0), (10, 0, 0, 0.0), (10, 2, 2, 0.25), (10, 2, 1, 0.125), (10, 2, 0, 0.0), (3, 3, 3, 0.0),
], ids=["none", "no-conflicts", "two-of-ten", "one-stale-retry", "only-stale-retries", "all-failed"])
def test_conflict_fraction_is_conflicts_per_successful(transactions, failed, conflicts, expected):
    assert conflict_fraction(transactions, failed, conflicts) == expected


@pytest.mark.parametrize("args", [(10, 2, 3), (2, 3, 1), (10, 2, -1)],
                         ids=["more-conflicts-than-failed", "more-failed-than-txns", "negative"])
def test_conflict_fraction_refuses_inconsistent_counts(args):
    with pytest.raises(ValueError, match="conflicts <= failed <= transactions"):
        conflict_fraction(*args)


def test_busyness_and_load_cv():
    assert busyness(30.0, 120.0) == 0.25 and busyness(1.0, 0.0) == 0.0
    assert busyness(120.0 + 1e-9, 120.0) == 1.0
    # shares 0.0 and 1.0: mean 0.5, population std 0.5 -> cv 1
    assert load_cv([0.0, 1.0]) == 1.0
    assert load_cv([0.5, 0.5, 0.5]) == 0.0 and load_cv([]) == 0.0 and load_cv([0.0, 0.0]) == 0.0


def test_load_cv_is_bit_for_bit_the_textbook_formula():
    """The replay's figures are compared by digest: load_cv must give the very bits of
    sqrt(sum((s - mean) ** 2) / n) / mean, summed left to right."""
    rng = random.Random(7)
    for n in (1, 2, 3, 17, 12500):
        shares = [rng.choice((0.0, 1.0, rng.random(), rng.random() * 1e-3)) for _ in range(n)]
        mean = sum(shares) / n
        expected = math.sqrt(sum([(s - mean) ** 2 for s in shares]) / n) / mean if mean else 0.0
        assert load_cv(shares) == expected


def test_utilization_of_a_hand_ledger():
    usage = UsageLedger()
    for i, cpu in enumerate((4000, 4000, 8000)):
        usage.add_machine(machine(i, cpu))
    usage.charge("m0", 4000, 8192)
    usage.charge("m2", 2000, 0)
    usage.charge("gone", 999, 999)  # an unknown machine is ignored
    sample = sample_utilization(7.0, usage)
    assert sample.t == 7.0 and sample.machines == 3
    assert sample.cpu == pytest.approx(6000 / 16000)
    assert sample.memory == pytest.approx(8192 / (3 * 8192))
    shares = [1.0, 0.0, 0.25]
    mean = sum(shares) / 3
    std = math.sqrt(sum((s - mean) ** 2 for s in shares) / 3)
    assert sample.load_cv == pytest.approx(std / mean)
    usage.remove_machine("m0")
    assert sample_utilization(8.0, usage).cpu == pytest.approx(2000 / 12000)


def test_ledger_totals_follow_every_change():
    """The totals and shares a sample reads equal the machines' rows summed and divided after
    any mix of changes, and a machine added again keeps its place (the shares' order)."""
    usage = UsageLedger()
    for i, cpu in enumerate((4000, 8000, 2000)):
        usage.add_machine(machine(i, cpu))
    usage.charge("m1", 3000, 100)
    usage.charge("m2", -500, 7)
    usage.remove_machine("m0")
    usage.add_machine(machine(1, 6000))  # replaced: its row and place are the new machine's
    usage.add_machine(machine(0, 1000))
    usage.charge("m0", 10, 20)
    usage.remove_machine("unknown")
    assert list(usage.machines) == ["m1", "m2", "m0"]
    assert usage.machines["m1"][2] == 0
    assert usage.totals == [sum(row[i] for row in usage.machines.values()) for i in range(4)]
    assert usage.shares == {m: row[2] / row[0] for m, row in usage.machines.items()}
    assert list(usage.shares) == list(usage.machines)


def test_release_is_a_negative_charge_per_alloc():
    """``release(allocs)`` leaves rows, totals and shares as charging each alloc's machine
    minus its request, in order (an alloc of an unknown machine ignored)."""
    allocs = [Alloc("j", i, machine_id, Resources(cpu, memory), 0, "s", 0.0)
              for i, (machine_id, cpu, memory) in enumerate([("m0", 1000, 64), ("gone", 5, 5), ("m1", 300, 7),
                                                             ("m0", 250, 1)])]
    released, charged = UsageLedger(), UsageLedger()
    for usage in (released, charged):
        for i, cpu in enumerate((4000, 8000)):
            usage.add_machine(machine(i, cpu))
            usage.charge(f"m{i}", 2000, 512)
    released.release(allocs)
    for alloc in allocs:
        charged.charge(alloc.machine_id, -alloc.resources.cpu, -alloc.resources.memory)
    assert released == charged and released.totals == [12000, 16384, 2450, 952]


def test_journal_keeps_first_times_only():
    journal = JobJournal(submitted={"a": 1.0, "b": 2.0})
    journal.taken("a", 1.5)
    journal.taken("a", 9.0)
    journal.taken("b", 4.0)
    journal.placed("a", 3.0)
    journal.placed("a", 30.0)
    assert sorted(journal.waits_to_first_attempt()) == [0.5, 2.0]
    assert journal.waits_to_placed() == [2.0]
