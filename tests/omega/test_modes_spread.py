"""Resource-fit conflicts of jobs with per-machine rules (different_machine, max_per_machine):
claims on a changed machine are re-decided when other tasks of the job were placed meanwhile."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cellstate.model import JobRecord
from fakeview import batch_job, machine
from omega.modes import ConflictMode
from cellstate.plan import Claim, CommitOutcome, JobEntry, MachineEntry, Plan

SEEN = {"m1": MachineEntry(machine("m1"), 3), "m2": MachineEntry(machine("m2"), 4)}
FRESH = {"m1": MachineEntry(replace(machine("m1"), writer="rival"), 9), "m2": SEEN["m2"]}
RE_DECIDE = "was placed elsewhere concurrently"


def record(tasks: str, **rules) -> JobRecord:
    base = batch_job("j", len(tasks))
    return replace(base, job=replace(base.job, **rules), tasks=tasks)


CASES = [
    # rules, tasks seen, tasks fresh, claims on m1 re-decided?
    ({"different_machine": True}, "pppp", "pppa", True),
    ({"different_machine": True}, "pppp" * 300, "pppp" * 299 + "ppra", True),
    ({"different_machine": True}, "pppf", "pppf", False),
    ({"different_machine": True}, "ppap", "ppfp", False),
    ({"different_machine": True}, "pppp", "pppk", False),
    ({"max_per_machine": 2}, "apppp", "arppa", True),
    ({}, "pppp", "pppa", False),
]


@pytest.mark.parametrize("rules, seen, fresh, re_decided", CASES,
                         ids=["placed", "long-job", "unchanged", "finished", "killed-task", "max-per-machine",
                              "no-rules"])
def test_spread_jobs_redecide_when_placed_elsewhere(rules, seen, fresh, re_decided):
    job = JobEntry(record(seen, **rules), 5)
    first, second = [i for i, (a, b) in enumerate(zip(seen, fresh)) if a == b == "p"][:2]
    claims = (Claim(first, "m1", job.record.job.request), Claim(second, "m2", job.record.job.request))
    plan = Plan(job, claims, SEEN, "s")
    outcome = CommitOutcome(False, 10, fresh_machines=FRESH, fresh_job=JobEntry(record(fresh, **rules), 8))
    split = ConflictMode.RESOURCE_FIT.strategy.split(plan, outcome)
    rejected = [c.machine_id for c, why in split.rejected if RE_DECIDE in why]
    assert rejected == (["m1"] if re_decided else [])
    assert [c.machine_id for c in split.kept] == (["m2"] if re_decided else ["m1", "m2"])
