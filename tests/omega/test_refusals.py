"""RefusedJobs: a refused job stays out while its spec and task states are as refused."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cellstate.model import Job, JobKind, JobRecord
from cellstate.resources import Resources
from cellstate.plan import JobEntry
from omega.refusals import RefusedJobs

GANG = Job("g", JobKind.BATCH, 3, Resources.of(1000, 256), gang=True)
REFUSED = JobEntry(JobRecord.new(GANG, 0.0), mod_revision=7)


@pytest.mark.parametrize("later, held", [
    (REFUSED, True),
    (JobEntry(replace(REFUSED.record, reason="gang too large for one transaction"), 8), True),
    (JobEntry(replace(REFUSED.record, tasks="ppf"), 9), False),
    (JobEntry(replace(REFUSED.record, job=replace(GANG, request=Resources.of(500, 256))), 9), False),
    (JobEntry(JobRecord.new(replace(GANG, id="other"), 0.0), 7), False),
], ids=["unchanged", "own-reason-write", "a-task-ended", "spec-changed", "another-job"])
def test_refusal_holds_until_spec_or_task_states_change(later, held):
    refused = RefusedJobs()
    refused.refuse(REFUSED)
    assert refused.holds(later) is held
    assert len(refused) == (1 if held or later.id != "g" else 0)  # a changed job is forgotten
    assert refused.holds(REFUSED) is (held or later.id != "g")


def test_forget_drops_the_job():
    refused = RefusedJobs()
    refused.refuse(REFUSED)
    refused.forget("g")
    refused.forget("never-refused")
    assert not refused and not refused.holds(REFUSED)


def test_candidates_leave_out_held_jobs_and_forget_jobs_no_longer_pending():
    refused = RefusedJobs()
    refused.refuse(REFUSED)
    other = JobEntry(JobRecord.new(replace(GANG, id="other"), 0.0), 3)
    assert refused.candidates([REFUSED, other]) == [other] and len(refused) == 1
    assert refused.candidates([other]) == [other] and len(refused) == 0  # killed or placed elsewhere
