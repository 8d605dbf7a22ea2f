"""Test-only helpers for the Borg scheduler tests: a DictView whose allocations carry their
job's priority, and a checker that a decision's claims fit cumulatively."""

from __future__ import annotations

from viewlib import DictView

from cellstate.model import Alloc, TaskState
from cellstate.plan import JobEntry, MachineEntry


class PriorityView(DictView):
    """``place`` records allocations with the job's priority (preemption reads it)."""

    def place(self, job_id: str, task: int, machine_id: str) -> None:
        entry = self._jobs[job_id]
        spec = entry.record.job
        m = self._machines[machine_id].machine.with_claim(spec.request)
        self._machines[machine_id] = MachineEntry(m, self._bump())
        self._jobs[job_id] = JobEntry(entry.record.with_tasks([task], TaskState.PLACED), self._bump())
        self._allocs.setdefault(job_id, {})[task] = Alloc(job_id, task, machine_id, spec.request, spec.priority)

    def apply(self, job_id: str, decision) -> None:
        """Commit a decision as the StoreCommitter would: evictions, then claims."""
        for claim in decision.claims:
            for victim, task in claim.evicts:
                alloc = self._allocs[victim].pop(task)
                entry = self._jobs[victim]
                m = self._machines[alloc.machine_id].machine.with_release(alloc.resources)
                self._machines[alloc.machine_id] = MachineEntry(m, self._bump())
                self._jobs[victim] = JobEntry(entry.record.with_tasks([task], TaskState.PENDING), self._bump())
            self.place(job_id, claim.task_index, claim.machine_id)


def assert_fits(view: DictView, job_id: str, decision) -> None:
    """Every machine can hold the decision's claims on top of its ledger, minus evictions."""
    request = view.job(job_id).record.job.request
    free = {}
    for claim in decision.claims:
        m = view.machine(claim.machine_id).machine
        left = free.get(m.id, m.free)
        for victim, _task in claim.evicts:
            left = left + view.job(victim).record.job.request
        left = left - request
        assert not left.is_negative(), f"{m.id} overcommitted: {left}"
        free[m.id] = left


class ReplicaPlacementView:
    """A ``PlacementView`` over the real Replica: applies its own commits at once and the
    fresh entries of a failed txn (as the CLI wires it)."""

    def __init__(self, store, keys):
        from cellstate.replica.watched import Replica

        self.replica = Replica(store, keys)
        self.replica.sync()

    def __getattr__(self, name):
        return getattr(self.replica, name)

    @property
    def revision(self) -> int:
        return self.replica.revision

    def apply_outcome(self, outcome) -> None:
        if outcome.committed:
            if outcome.written or outcome.deleted:
                self.replica.apply_local(outcome.revision, outcome.written, outcome.deleted)
            return
        machines = outcome.fresh_machines
        jobs = {j.id: j for j in (outcome.fresh_job, *outcome.fresh_victims.values()) if j}
        self.replica.apply_entries([m for m in machines.values() if m], jobs.values(), revision=outcome.revision,
                                   deleted_machines=[mid for mid, m in machines.items() if m is None],
                                   deleted_jobs=[jid for jid, j in outcome.fresh_victims.items() if j is None],
                                   allocs=list(outcome.fresh_allocs.values()))


def omega_decide(sched):
    """The scheduler's decide as the optimistic loop calls it (omega.protocols.Decision)."""
    from omega.protocols import Decision

    def decide(entry, tasks, view):
        d = sched.decide(entry, tasks, view)
        return Decision(list(d.claims), dict(d.unplaced))

    return decide
