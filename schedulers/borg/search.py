"""One equivalence class's walk over the Borg scheduler's machines within a decision (the
load index's order for the packed walk, else the seeded shuffle): the pool of feasible
machines (a heap by rank), the score-cache lookups and the tally of why the other machines
were excluded. ``fill`` is the scheduler's hot loop. It reads the scheduler's configuration
(``decider.sched``) and writes only the decision's explicit ``SearchState`` (``decider.state``)."""

from __future__ import annotations

import heapq

from cellstate.model import Machine
from cellstate.plan import MachineEntry
from schedulers.pipeline import FEASIBLE, Rejections
from schedulers.plugin import ScoreContext, Verdict


class Search:
    """A class's walk over the machines: a pool of feasible machines (a heap by
    rank, ties by machine id) and the exclusions tallied along the way."""

    def __init__(self, decider, table) -> None:
        self.d = decider
        self.table = table
        self.start = decider.cursor  # where the shuffled walk starts
        self.walked = 0  # machines taken from the walk so far
        index = decider.state.index
        self.shuffled = index is None  # walking every machine in the shuffled order
        self.full = self.shuffled  # the walk covers the whole cell (the packed walk: once it fell back)
        self.prover = None if index is None else decider.sched.prover
        self.bound = [float("-inf")]  # with a prover: the walk's bound on the scores not yet walked
        if index is None:
            self.order = self._shuffled()
        else:  # (classes off, the decision re-filed the machines it reserved on by what is left)
            self.order = index.walk(decider.spec.request, self.bound if self.prover is not None else None)
        self.revision_of = None if index is None else index.revision_of
        self.pool: dict[str, int] = {}  # machine id -> sequence number of its live heap entry
        self.heap: list[tuple[tuple[float, ...], str, int, Machine]] = []
        self.seq = 0
        self._excluded: dict[int, list] = {}  # id(verdict) -> [verdict, machines]
        self._rest = None  # the machines the packed walk skipped, once it found nothing
        self.first_feasible: int | None = None  # walk position of the first feasible machine
        self.ctx = ScoreContext(decider.placement)
        self.filters = decider.sched.pipeline.filters
        self.rank = decider.sched.pipeline.rank

    def fill(self, want: int) -> None:
        """Walk on until ``want`` machines are feasible or the walk is over; with the
        scheduler's prover, also until no unwalked bucket's bound beats the best rank found
        (``borg_bound``). The packed walk is over when the load index has no bucket left
        that could fit; if it found nothing feasible at all, the rest of the cell is walked
        too (``_fill_rest``), so "fits nowhere" and its reasons are exact. The scheduler's
        hot loop: cache hits are served inline, misses evaluated inline (as ``evaluate``)."""
        if self.full and not self.shuffled:
            return self._fill_rest(want)
        d, pool, order, rest = self.d, self.pool, self.order, False
        machine_of, table, placed, touched = d.view.machine, self.table, d.placement.machines, d.touched
        excluded, hits, stored, walked = self._excluded, 0, 0, 0
        spec, filters, free_of, rank_of, ctx = d.spec, self.filters, d.res.free, self.rank, self.ctx
        state = d.state
        base_free, changed = state.base_free, state.changed
        revision_of = self.revision_of  # to note stale index entries (packed walk)
        cache = d.sched.cache
        verdicts, index_of = (cache.verdicts, cache.index_of) if cache is not None else (None, None)
        prover, bound = self.prover, self.bound
        top = self._top() if prover is not None else None
        threshold = prover.threshold(top) if prover is not None else float("inf")
        while len(pool) < want or bound[0] > threshold:
            machine_id = next(order, None)
            if machine_id is None:
                if pool or self.full:
                    break
                self.full = rest = True  # the packed walk found nothing: the rest of the cell
                break
            walked += 1
            entry = machine_of(machine_id)
            if entry is None:
                state.relist()  # the cell changed under the cached ids: list them again next time
                continue
            if revision_of is not None and revision_of(machine_id) != entry.mod_revision:
                changed.add(machine_id)  # the load index re-keys it before the next decision
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
                if prover is not None and (top is None or rank > top):
                    top, threshold = rank, prover.threshold(rank)
                if self.first_feasible is None and self.shuffled:
                    self.first_feasible = (self.start + self.walked + walked - 1) % len(d.ids)
        self.walked += walked
        counters = state.counters
        counters.evaluations += walked
        counters.cache_hits += hits
        if stored:
            d.sched.cache.stored(stored)
        if rest:
            self._fill_rest(want)

    def _fill_rest(self, want: int) -> None:
        """The rest of the cell once the packed walk found nothing feasible: the buckets it
        skipped, whole (every other machine was walked and tallied). A machine filed there
        at its current revision and untouched by this decision surely lacks cpu or memory:
        the filters before resources_fit run on it (their verdicts kept per signature of the
        fields they read and machine revision when the score cache is on: ``before_memo``),
        then it gets resources_fit's verdict for the bucket (one capacity, one first short
        resource: the same for all its machines), so the tally is a full walk's. Any other
        machine there is evaluated (and re-keyed before the next decision when feasible:
        the index had it filed wrong)."""
        d, pool, sched, state = self.d, self.pool, self.d.sched, self.d.state
        index = state.index
        if self._rest is None:
            self._rest = index.skipped(d.spec.request)
        rest, keyed, (before, fit) = self._rest, index.keyed, sched.before_fit
        before = [f.fits for f in before]
        machine_of, placed, touched, free_of = d.view.machine, d.placement.machines, d.touched, d.res.free
        spec, base_free, walked = d.spec, state.base_free, 0
        memo = state.before_memo(sched.before_signer, spec)  # machine id -> (revision, failing verdict or None)
        while len(pool) < want:
            item = next(rest, None)
            if item is None:
                break
            key, short, ids = item
            walked += len(ids)
            same, count = None, 0  # a machine that gets the bucket's resources_fit verdict; how many do
            for machine_id in ids:
                entry = machine_of(machine_id)
                if entry is None:
                    state.relist()
                    continue
                revision = entry.mod_revision
                if short is not None and keyed[machine_id][1] == revision and machine_id not in touched:
                    here = placed.get(machine_id, 0)
                    hit = memo.get(machine_id) if memo is not None and not here else None
                    if hit is not None and hit[0] == revision:
                        verdict = hit[1]
                    else:
                        machine = entry.machine
                        known = base_free.get(machine_id)  # Reservations.free of an untouched machine
                        free = known[1] if known is not None and known[0] is machine else free_of(machine)
                        verdict = None
                        for fits in before:
                            verdict = fits(spec, machine, free, here)
                            if not verdict.ok:
                                break
                        else:
                            verdict = None
                        if memo is not None and not here:
                            memo[machine_id] = (revision, verdict)
                    if verdict is None:
                        same, count = same or entry.machine, count + 1
                    else:
                        self._exclude(verdict)
                    continue
                verdict, rank = self.evaluate(entry, count=False)
                if rank is None:
                    self._exclude(verdict)
                else:
                    self._push(entry.machine, rank)
                    state.changed.add(machine_id)
            if same is not None:
                self._exclude(fit.fits(spec, same, free_of(same), placed.get(same.id, 0)), count)
        self.walked += walked
        state.counters.evaluations += walked

    def _exclude(self, verdict: Verdict, count: int = 1) -> None:
        tally = self._excluded.get(id(verdict))
        if tally is None:
            self._excluded[id(verdict)] = [verdict, count]
        else:
            tally[1] += count

    @property
    def cursor(self) -> int:
        """Where the shuffled walk goes on (its start until it began)."""
        return (self.start + self.walked) % len(self.d.ids) if self.shuffled else self.start

    def _shuffled(self):
        """Every machine id once, in the shuffled order from ``self.start``."""
        ids, start = self.d.ids, self.start
        return iter(ids[start:] + ids[:start])

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
        counters = d.state.counters
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

    def _top(self) -> tuple[float, ...] | None:
        """The rank of the best machine in the pool (None: empty)."""
        if self.best() is None:
            return None
        return tuple(-x for x in self.heap[0][0])

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
