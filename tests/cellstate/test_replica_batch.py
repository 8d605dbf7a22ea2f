"""A watch batch applied at once leaves a replica exactly as its events applied one by one:
the same content, indexes and mod records (in the same order), the same quarantine and the
same decode errors reported in the same order (runs of allocation puts take a path of their own)."""

from __future__ import annotations

import random

import pytest

from cellstate.keys import CellKeys
from cellstate.memory.store import MemoryStore
from cellstate.replica.watched import Replica
from cellstate.store import Event, EventKind, WatchBatch
from replica_helpers import alloc, job, machine, raw

KEYS = CellKeys("batch")


def _events(rng: random.Random, count: int) -> list[Event]:
    """Puts and deletes of machines, jobs and allocations (some values bad), one per revision."""
    events, held = [], set()
    for revision in range(2, count + 2):
        roll = rng.random()
        if roll < 0.15 and held:
            key = rng.choice(sorted(held))
            held.discard(key)
            events.append(Event(EventKind.DELETE, key, b"", revision))
            continue
        j, t, m = f"j{rng.randrange(4)}", rng.randrange(6), f"m{rng.randrange(5)}"
        value = (machine(m, tasks=rng.randrange(3)) if roll < 0.3 else job(j, rng.choice(["pp", "rp", "rr"]))
                 if roll < 0.4 else alloc(j, t, m))
        key, data = raw(KEYS, value)
        if roll > 0.9:
            data = b"\xc1bad"
        elif roll > 0.85 and not key.startswith(KEYS.kind_prefix("machines")):
            key = KEYS.alloc(j, t + 1)  # an allocation that does not match its key
        held.add(key)
        events.append(Event(EventKind.PUT, key, data, revision))
    return events


def _replica(errors: list) -> Replica:
    return Replica(MemoryStore(), KEYS, on_decode_error=lambda key, error: errors.append((key, str(error))))


def _state(replica: Replica) -> list:
    # The pending index is compared as a mapping (not in order): a job's effective record is
    # rebuilt once per applied batch (placements derived from allocations, docs/CELLSTATE.md),
    # so a batch may move a job in and out of the index at other points than its events one by one.
    return [list(replica._mod.items()), list(replica._machines.items()), list(replica._jobs.items()),
            list(replica._allocs.items()), [dict(d) for d in replica._pending.values()],
            [(k, list(d.items())) for k, d in replica._allocs_on.items()],
            [(k, list(d.items())) for k, d in replica._allocs_of.items()], list(replica.quarantine.items())]


@pytest.mark.parametrize("seed", range(8))
def test_a_batch_applies_as_its_events_one_by_one(seed):
    rng = random.Random(seed)
    events = _events(rng, 300)
    local = rng.sample(events[:200], 20)  # changes the owner applied first: the watch skips them
    whole_errors: list = []
    single_errors: list = []
    whole, single = _replica(whole_errors), _replica(single_errors)
    for replica in (whole, single):
        for ev in local:
            if ev.kind is EventKind.PUT:
                replica.apply_local(ev.mod_revision, [(ev.key, ev.value)])
    assert whole._apply_batch(WatchBatch(events[-1].mod_revision, tuple(events))) == \
        sum(single._apply_batch(WatchBatch(ev.mod_revision, (ev,))) for ev in events)
    assert _state(whole) == _state(single)
    assert whole_errors == single_errors and whole_errors


def _misfiled(rng: random.Random, events: list[Event]) -> list[Event]:
    """``events`` and, beside some job and machine puts, their value put under another job's
    or machine's key too (in the same revision)."""
    out = []
    for ev in events:
        out.append(ev)
        for kind in ("jobs", "machines"):
            if ev.kind is EventKind.PUT and ev.key.startswith(KEYS.kind_prefix(kind)) and rng.random() < 0.3:
                out.append(Event(EventKind.PUT, KEYS.kind_prefix(kind) + "other", ev.value, ev.mod_revision))
    return out


@pytest.mark.parametrize("seed", range(8))
def test_a_batch_stores_each_kind_as_the_generic_put_and_delete(seed):
    """The watch's shortcuts by kind (job and machine puts, allocation deletes) leave what
    ``_put`` and ``_delete``, which dispatch by kind, leave."""
    rng = random.Random(seed)
    events = _misfiled(rng, _events(rng, 300))
    batch_errors: list = []
    generic_errors: list = []
    batched, generic = _replica(batch_errors), _replica(generic_errors)
    batched._apply_batch(WatchBatch(events[-1].mod_revision, tuple(events)))
    for ev in events:
        if ev.kind is EventKind.PUT:
            generic._put(ev.key, ev.value, ev.mod_revision)
        else:
            del generic._mod[ev.key]
            generic._delete(ev.key)
    assert _state(batched) == _state(generic)
    assert batch_errors == generic_errors and batch_errors
