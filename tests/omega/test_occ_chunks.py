"""Chunks of a split decision are checked against the ledgers they will be committed on."""

import pytest

from cellstate.model import Job, JobKind, JobRecord, Machine
from cellstate.resources import Resources
from omega.modes import drop_unfit
from omega.protocols import Claim, JobEntry, MachineEntry, Plan

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
