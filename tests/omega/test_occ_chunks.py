"""Chunks of a split decision are checked against the ledgers they will be committed on."""

from dataclasses import replace

import pytest

from cellstate.model import Alloc, Job, JobKind, JobRecord, Machine, MachineState
from cellstate.resources import Resources
from omega.modes import drop_unfit
from cellstate.plan import AllocEntry, Claim, JobEntry, MachineEntry, Plan

REQ = Resources(1000, 1024)


def plan_on(allocated_cpu: int, claims: int) -> Plan:
    machine = Machine("m1", Resources(4000, 8192), allocated=Resources(allocated_cpu, 0))
    job = Job(id="j", kind=JobKind.BATCH, tasks=claims, request=REQ)
    return Plan(JobEntry(JobRecord.new(job, 0.0), 3), tuple(Claim(i, "m1", REQ) for i in range(claims)),
                {"m1": MachineEntry(machine, 7)}, "s")


@pytest.mark.parametrize("allocated, claims, kept, unfit", [
    (0, 4, 4, []),
    (2000, 4, 2, [2, 3]),
    (4000, 2, 0, [0, 1]),
], ids=["all-fit", "half-fit", "machine-full"])
def test_claims_beyond_the_current_ledger_go_back_to_the_scheduler(allocated, claims, kept, unfit):
    plan, dropped = drop_unfit(plan_on(allocated, claims))
    assert len(plan.claims) == kept and dropped == unfit
    assert ("m1" in plan.machines) == bool(kept)


def evicting_plan(allocated_cpu: int, victim_cpu: int, victim_machine: str = "m1") -> Plan:
    """One evicting claim (1000 millicores) on m1 (4000) with ``allocated_cpu`` allocated, whose
    victim low/0 holds ``victim_cpu`` on ``victim_machine``."""
    machine = Machine("m1", Resources(4000, 8192), allocated=Resources(allocated_cpu, 0))
    job = Job(id="j", kind=JobKind.BATCH, tasks=1, request=REQ, priority=100)
    low = Job(id="low", kind=JobKind.BATCH, tasks=1, request=Resources(victim_cpu, 0))
    victim = JobEntry(JobRecord(low, "a"), 5)
    alloc = AllocEntry(Alloc("low", 0, victim_machine, Resources(victim_cpu, 0)), 6)
    return Plan(JobEntry(JobRecord.new(job, 0.0), 3), (Claim(0, "m1", REQ, evicts=(("low", 0),)),),
                {"m1": MachineEntry(machine, 7)}, "s", victims={"low": victim}, victim_allocs={("low", 0): alloc})


@pytest.mark.parametrize("allocated, victim_cpu, victim_machine, kept", [
    (4000, 1000, "m1", True),  # the eviction makes exactly the room
    (3500, 500, "m1", True),
    (4000, 500, "m1", False),  # the machine filled up since the decision: evicting is not enough
    (4000, 1000, "m2", False),  # a victim elsewhere frees nothing here
], ids=["exact-room", "room-with-free", "filled-since", "victim-elsewhere"])
def test_an_evicting_claim_is_checked_with_its_victims_freed(allocated, victim_cpu, victim_machine, kept):
    plan, dropped = drop_unfit(evicting_plan(allocated, victim_cpu, victim_machine))
    assert (len(plan.claims) == 1) is kept and dropped == ([] if kept else [0])
    # a dropped claim takes its victims with it: the committer compares nothing of them
    assert (set(plan.victims), set(plan.victim_allocs)) == (({"low"}, {("low", 0)}) if kept else (set(), set()))


@pytest.mark.parametrize("state", [MachineState.DOWN, MachineState.DRAINING], ids=["down", "draining"])
def test_claims_on_a_machine_gone_down_go_back(state):
    """Draining is the scheduler's policy (``machine_state``'s ``accept``): its claims stay."""
    plan = plan_on(0, 2)
    plan = replace(plan, machines={"m1": MachineEntry(replace(plan.machines["m1"].machine, state=state), 8)})
    kept, dropped = drop_unfit(plan)
    if state is MachineState.DOWN:
        assert kept.claims == () and dropped == [0, 1] and kept.machines == {}
    else:
        assert len(kept.claims) == 2 and dropped == []
