"""One equivalence class's walk over the Borg scheduler's shuffled machines within a
decision: the pool of feasible machines (a heap by rank), the score-cache lookups and the
tally of why the other machines were excluded. ``fill`` is the scheduler's hot loop."""

from __future__ import annotations

import heapq

from cellstate.model import Machine
from omega.protocols import MachineEntry
from schedulers.pipeline import FEASIBLE, Rejections
from schedulers.plugin import ScoreContext, Verdict


class Search:
    """A class's walk over the shuffled machines: a pool of feasible machines (a heap by
    rank, ties by machine id) and the exclusions tallied along the way."""

    def __init__(self, decider, table) -> None:
        self.d = decider
        self.table = table
        self.cursor = decider.cursor
        self.walked = 0
        self.pool: dict[str, int] = {}  # machine id -> sequence number of its live heap entry
        self.heap: list[tuple[tuple[float, ...], str, int, Machine]] = []
        self.seq = 0
        self._excluded: dict[int, list] = {}  # id(verdict) -> [verdict, machines]
        self.first_feasible: int | None = None  # walk position of the first feasible machine
        self.ctx = ScoreContext(decider.placement)
        self.filters = decider.sched.pipeline.filters
        self.rank = decider.sched.pipeline.rank

    def fill(self, want: int) -> None:
        """Walk on until ``want`` machines are feasible or every machine was walked.
        The scheduler's hot loop: cache hits are served inline, misses go to ``evaluate``."""
        d, ids, pool = self.d, self.d.ids, self.pool
        n, cursor, walked = len(ids), self.cursor, self.walked
        machine_of, table, placed, touched = d.view.machine, self.table, d.placement.machines, d.touched
        excluded, hits, stored, start = self._excluded, 0, 0, walked
        spec, filters, free_of, rank_of, ctx = d.spec, self.filters, d.res.free, self.rank, self.ctx
        base_free = d.sched._base_free
        cache = d.sched.cache
        verdicts, index_of = (cache.verdicts, cache.index_of) if cache is not None else (None, None)
        while len(pool) < want and walked < n:
            machine_id = ids[cursor]
            cursor = cursor + 1 if cursor + 1 < n else 0
            walked += 1
            entry = machine_of(machine_id)
            if entry is None:
                d.sched._count = -1  # the cell changed under the cached ids: refresh next time
                continue
            untouched = machine_id not in touched  # (then Reservations.free is the machine's own)
            cacheable = untouched and table is not None and machine_id not in placed
            hit = table.get(machine_id) if cacheable else None
            if hit is not None and hit[0] == entry.mod_revision:
                hits += 1
                verdict, rank = verdicts[hit[1]], hit[2]
            else:  # evaluate(), inlined: this is the scheduler's hot path
                machine = entry.machine
                known = base_free.get(machine_id)  # Reservations.free for an untouched machine
                free = known[1] if untouched and known is not None and known[0] is machine else free_of(machine)
                here = placed.get(machine_id, 0)
                for f in filters:
                    verdict = f.fits(spec, machine, free, here)
                    if not verdict.ok:
                        rank = None
                        break
                else:
                    verdict, rank = FEASIBLE, rank_of(spec, machine, free, ctx)
                if cacheable:
                    table[machine_id] = (entry.mod_revision, index_of(verdict), rank)
                    stored += 1
            if rank is None:
                tally = excluded.get(id(verdict))
                if tally is None:
                    excluded[id(verdict)] = [verdict, 1]
                else:
                    tally[1] += 1
            else:
                self._push(entry.machine, rank)
                if self.first_feasible is None:
                    self.first_feasible = cursor - 1 if cursor else n - 1
        self.cursor, self.walked = cursor, walked
        counters = d.sched.counters
        counters.evaluations += walked - start
        counters.cache_hits += hits
        if stored:
            d.sched.cache.stored(stored)

    @property
    def rejections(self) -> Rejections:
        """Why the walked machines were excluded (first failing filter and its reason)."""
        out = Rejections()
        for verdict, count in self._excluded.values():
            key = (verdict.plugin, verdict.reason)
            out.counts[key] = out.counts.get(key, 0) + count
        return out

    def evaluate(self, entry: MachineEntry, count: bool = True) -> tuple[Verdict, tuple[float, ...] | None]:
        """Verdict and rank (None unless feasible), from the cache when the machine is at
        the cached revision and untouched by this decision (Pipeline.check inlined)."""
        d = self.d
        machine = entry.machine
        machine_id = machine.id
        here = d.placement.machines.get(machine_id, 0)
        counters = d.sched.counters
        counters.evaluations += count
        table = self.table
        cacheable = table is not None and not here and machine_id not in d.touched
        if cacheable:
            hit = table.get(machine_id)
            if hit is not None and hit[0] == entry.mod_revision:
                counters.cache_hits += 1
                return d.sched.cache.verdicts[hit[1]], hit[2]
        free = d.res.free(machine)
        spec = d.spec
        for f in self.filters:
            verdict = f.fits(spec, machine, free, here)
            if not verdict.ok:
                rank = None
                break
        else:
            verdict = FEASIBLE
            rank = self.rank(spec, machine, free, self.ctx)
        if cacheable:
            table[machine_id] = (entry.mod_revision, d.sched.cache.index_of(verdict), rank)
            d.sched.cache.stored(1)
        return verdict, rank

    def _push(self, machine: Machine, rank: tuple[float, ...]) -> None:
        self.seq += 1
        self.pool[machine.id] = self.seq
        heapq.heappush(self.heap, (tuple(-x for x in rank), machine.id, self.seq, machine))

    def best(self) -> Machine | None:
        """The best-ranked feasible machine in the pool (stale heap entries skipped)."""
        heap, pool = self.heap, self.pool
        while heap:
            _, _, seq, machine = heap[0]
            if pool.get(machine.id) == seq:
                return machine
            heapq.heappop(heap)
        return None

    def refresh(self, machine: Machine) -> None:
        """Evaluate ``machine`` again after this decision reserved on it."""
        self.pool.pop(machine.id, None)
        entry = self.d.view.machine(machine.id)
        verdict, rank = self.evaluate(entry)
        if rank is None:
            tally = self._excluded.setdefault(id(verdict), [verdict, 0])
            tally[1] += 1
        else:
            self._push(entry.machine, rank)
