"""The fauxmaster's event core: time order, deterministic tie-break, processes on virtual time."""

from __future__ import annotations

import pytest

from tools.fauxmaster.clock import EventCore, Process, SimulationError, VirtualClock


@pytest.mark.parametrize("schedule, expected", [
    ([(2.0, "b"), (1.0, "a"), (3.0, "c")], ["a", "b", "c"]),
    ([(1.0, "first"), (1.0, "second"), (1.0, "third")], ["first", "second", "third"]),
    ([(5.0, "late"), (0.0, "now"), (5.0, "late2"), (0.0, "now2")], ["now", "now2", "late", "late2"]),
], ids=["by-time", "ties-in-schedule-order", "mixed"])
def test_actions_run_in_time_then_schedule_order(schedule, expected):
    core = EventCore()
    seen = []
    for t, label in schedule:
        core.at(t, lambda label=label: seen.append((label, core.now)))
    core.run()
    assert [label for label, _ in seen] == expected
    assert [t for _, t in seen] == sorted(t for t, _ in schedule)


def test_run_until_stops_the_clock_there_and_keeps_later_actions():
    core = EventCore()
    seen = []
    core.at(1.0, lambda: seen.append(1))
    core.at(10.0, lambda: seen.append(10))
    assert core.run(until=5.0) == 5.0
    assert seen == [1] and core.next_time() == 10.0


def test_scheduling_in_the_past_is_refused():
    core = EventCore()
    core.at(2.0, lambda: None)
    core.run()
    with pytest.raises(SimulationError, match="clock is at 2.0"):
        core.at(1.0, lambda: None)


def _stepper(core: EventCore, times: list[float], log: list, use_advance: bool, schedules: dict) -> None:
    """An action run at each of ``times`` in turn (at ``t`` in ``schedules`` it also schedules
    another action at ``schedules[t]``): it goes on with ``advance`` when it may, else it
    schedules itself at its next time."""
    pending = list(times)

    def step() -> None:
        while True:
            log.append(("step", core.now))
            if core.now in schedules:
                core.at(schedules[core.now], lambda: log.append(("scheduled", core.now)))
            pending.pop(0)
            if not pending:
                return
            if not (use_advance and core.advance(pending[0])):
                break
        core.at(pending[0], step)
    core.at(pending[0], step)


@pytest.mark.parametrize("until", [None, 4.5, 7.0])
def test_an_action_that_advances_runs_as_if_it_had_rescheduled_itself(until):
    runs = []
    for use_advance in (False, True):
        core, log = EventCore(), []
        for t in (3.0, 4.0, 6.0):
            core.at(t, lambda: log.append(("other", core.now)))
        _stepper(core, [1.0, 2.0, 3.0, 3.5, 5.0, 7.0, 8.0], log, use_advance, {1.0: 2.0, 3.5: 5.0})
        core.run(until)
        runs.append((log, core.now, core.next_time()))
    assert runs[0] == runs[1]
    assert ("step", 3.5) in runs[1][0]


def test_advance_refuses_beyond_until_when_stopping_or_backwards():
    core = EventCore()
    seen = []

    def act() -> None:
        seen.append(core.advance(6.0))  # beyond until
        seen.append(core.advance(4.0))  # nothing due by then: the clock moves
        seen.append(core.now)
        core.stop()
        seen.append(core.advance(4.5))
        with pytest.raises(SimulationError, match="clock is at 4.0"):
            core.advance(3.0)
    core.at(1.0, act)
    core.run(until=5.0)
    assert seen == [False, True, 4.0, False]


def test_processes_interleave_on_virtual_time_and_book_their_holds():
    core = EventCore()
    clock = VirtualClock(core)
    log = []

    def worker(name, pause):
        def body():
            for _ in range(2):
                log.append((name, core.now))
                clock.sleep(pause)
        return body

    a = Process(core, "a", worker("a", 1.5))
    b = Process(core, "b", worker("b", 1.0))
    core.run()
    assert log == [("a", 0.0), ("b", 0.0), ("b", 1.0), ("a", 1.5)]
    assert a.held == {"backoff": 3.0} and b.held == {"backoff": 2.0}
    assert a.finished and b.finished and core.now == 3.0


@pytest.mark.parametrize("stop_at, expected", [
    (0.5, 0.5), (2.0, 2.0), (3.5, 3.0), (9.0, 3.0),
], ids=["inside-first-hold", "inside-second-hold", "between-holds", "after-both"])
def test_held_until_counts_a_running_hold_only_up_to_the_stop(stop_at, expected):
    core = EventCore()

    def body():
        process.hold(1.0, "decide")
        process.hold(2.0, "decide")

    process = Process(core, "p", body)
    core.run(until=stop_at)
    assert process.held_until(core.now) == pytest.approx(expected)


def test_park_until_woken_or_timeout_and_stale_wakeups_are_ignored():
    core = EventCore()
    log = []

    def body():
        process.park(timeout=10.0)
        log.append(("woken", core.now))
        process.park(timeout=2.0)
        log.append(("timeout", core.now))

    process = Process(core, "p", body)
    core.at(3.0, process.wake)
    core.at(3.0, process.wake)  # a second wake of the same park: no effect
    core.run()
    assert log == [("woken", 3.0), ("timeout", 5.0)]


def test_sleep_outside_a_process_is_an_error():
    with pytest.raises(SimulationError, match="outside a simulated process"):
        VirtualClock(EventCore()).sleep(1.0)
