"""A replayed gang larger than one transaction: placed by reservations in chunks and one last
txn (omega/gangs.py), not refused; before, it was refused once and then left out until it
changed (omega/refusals.py, still used for plans the committer cannot take at all)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fauxmaster_traces import batch, machine, write

from cellstate.resources import Resources
from tools.fauxmaster.replay import ReplayConfig, replay
from tools.trace.events import JobKill, JobSubmit, MachineAdd


def refused_gang_trace(path, kill_at: float | None) -> str:
    """4 machines; at t = 0 a 70-task gang (a txn of 128 ops holds 63 claims); a one-task job
    of 1 s every 0.5 s for 20 s, each end freeing room; the gang killed at ``kill_at``."""
    events = [MachineAdd(0.0, machine(i)) for i in range(4)]
    events.append(JobSubmit(0.0, replace(batch("gang", 70), request=Resources(10, 64), gang=True)))  # fits the cell
    events += [JobSubmit(j * 0.5, batch(f"j{j}", 1, duration=1.0)) for j in range(40)]
    if kill_at is not None:
        events.insert(next(i for i, e in enumerate(events) if e.t > kill_at), JobKill(kill_at, "gang"))
    return write(path, events)


@pytest.mark.parametrize("skip_nothing_fits", [True, False], ids=["with-memo", "without-memo"])
@pytest.mark.parametrize("kill_at", [None, 10.0], ids=["kept", "killed"])
def test_a_gang_larger_than_one_txn_is_placed_in_chunks(tmp_path, skip_nothing_fits, kill_at):
    schedulers = []
    config = ReplayConfig(schedulers=[dict(name="b", kind="batch", seed=1)], until=30.0,
                          skip_nothing_fits=skip_nothing_fits)
    result = replay(refused_gang_trace(tmp_path / "t.omt", kill_at), config,
                    setup=lambda made, core: schedulers.extend(made))
    tally = schedulers[0].tally
    assert tally.too_large == 0
    assert result.schedulers[0].tasks_placed == 70 + 40  # the gang (at t = 0) and every small job
    assert tally.jobs_taken < 60
    assert result.check["ok"], result.check["violations"]


def test_a_higher_txn_limit_places_the_gang(tmp_path):
    schedulers = []
    config = ReplayConfig(schedulers=[dict(name="b", kind="batch", seed=1)], until=30.0, max_txn_ops=256)
    result = replay(refused_gang_trace(tmp_path / "t.omt", None), config, setup=lambda made, core: schedulers.extend(made))
    assert schedulers[0].tally.too_large == 0
    assert result.schedulers[0].tasks_placed == 70 + 40


@pytest.mark.parametrize("ops", [3, 3.5, "128"], ids=["too-few", "float", "str"])
def test_txn_limit_must_hold_one_claim(ops):
    with pytest.raises(ValueError, match="max_txn_ops must be an int >= 4"):
        ReplayConfig(max_txn_ops=ops)
