"""A first-fit scheduler kind and a best-fit-on-cpu scorer, registered through the public
extension API (docs/EXTENDING.md). ``--plugin mymod`` imports this module."""

from cellstate.model import MachineState
from schedulers.api import Claim, Decision, ScorerTraits, needs_nothing, register_kind, register_scorer


class FirstFit:
    """Each pending task goes to the first up machine (by id) with room left."""

    kind = "firstfit"
    attach = needs_nothing  # it asks its host for nothing (clock, refusals…) and offers nothing

    def __init__(self, name: str):
        self.name = name

    def decide(self, job, tasks, view):
        request = job.record.job.request
        free = {e.id: e.machine.free for e in view.machines() if e.machine.state is MachineState.UP}
        claims, unplaced = [], {}
        for task in tasks:
            machine = next((m for m in sorted(free) if request.fits_in(free[m])), None)
            if machine is None:
                unplaced[task] = "no machine has room"
                continue
            free[machine] = free[machine] - request
            claims.append(Claim(task, machine, request))
        return Decision(claims, unplaced)


class FullestCpu:
    """Scorer: prefer the machine whose cpu the task fills most (best fit on cpu)."""

    name = "fullest_cpu"
    reads = frozenset({"request"})  # the job fields the score depends on (equivalence classes)
    traits = ScorerTraits()  # no built-in formula: fast paths that need one step aside

    def score(self, job, machine, free, ctx):
        cpu = machine.capacity.cpu
        left = (free.cpu - job.request.cpu) / cpu if cpu > 0 else 1.0
        return min(1.0, max(0.0, 1.0 - left))


register_kind("firstfit", lambda name, seed, config: FirstFit(name), retry_attempts=3)
register_scorer("fullest_cpu", lambda args=None: FullestCpu())
