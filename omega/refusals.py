"""``RefusedJobs``: jobs a scheduler refused, left out until they change.

The placer refuses a job it can never commit as it stands (``PlanTooLarge``: a gang with more
tasks than one transaction holds, or a plan over the request size limit) and writes the
reason into the job's record. Deciding the same job again would be refused again, so a
scheduler process keeps it out of its candidates while its spec and task states are the ones
it refused; a change of either (tasks ended or were evicted, the job was resubmitted) makes
it a candidate again. The reason write itself changes only the record's bookkeeping, so it
does not end the refusal, and a watch that shows the write late does not either.

Without this, every cell change that resets the queue's backoff (a machine freeing room)
would send a refused gang through the placer again: a reason write each time, and in the
fauxmaster a loop of zero-cost attempts in one virtual instant.
"""

from __future__ import annotations

from cellstate.model import Job
from cellstate.plan import JobEntry


class RefusedJobs:
    """Job id -> (spec, task states) of the job as it was refused."""

    def __init__(self) -> None:
        self.jobs: dict[str, tuple[Job, str]] = {}
        """The refusals by job id (empty, as usual: a caller's hot path tests it first)."""

    def __len__(self) -> int:
        return len(self.jobs)

    def refuse(self, entry: JobEntry) -> None:
        """Leave ``entry``'s job out while its spec and task states stay as they are now."""
        record = entry.record
        self.jobs[record.job.id] = (record.job, record.tasks)

    def holds(self, entry: JobEntry) -> bool:
        """True while ``entry`` is the job as refused (then it stays out); a changed job is
        forgotten and False."""
        record = entry.record
        refused = self.jobs.get(record.job.id)
        if refused is None:
            return False
        if refused[1] == record.tasks and refused[0] == record.job:
            return True
        del self.jobs[record.job.id]
        return False

    def candidates(self, pending: list[JobEntry]) -> list[JobEntry]:
        """The entries of ``pending`` (all the jobs pending for the scheduler) not held; the
        refusals of jobs no longer in it are forgotten."""
        kept = [entry for entry in pending if not self.holds(entry)]
        if self.jobs:
            ids = {entry.record.job.id for entry in pending}
            for job_id in [job_id for job_id in self.jobs if job_id not in ids]:
                del self.jobs[job_id]
        return kept

    def forget(self, job_id: str) -> None:
        """Drop a job (it is no longer pending)."""
        self.jobs.pop(job_id, None)
