"""One service decision's search over the ``MachineIndex``: the machine the full scan would
pick, found by scoring a few candidates per zone.

Per task: zones are taken in tiers of equal count of the job's tasks (fewest first); in a
tier, each capacity-class list of each zone offers its first machine that passes the filters
and holds none of the job's tasks. These candidates share the spread score, so the highest
least_loaded score (then the smallest id) wins. Only when no list of the tier offers one do
the feasible machines holding some of the job's tasks compete, ranked by the whole chain. The
first tier with a candidate decides: a zone with more of the job's tasks never outranks it.
A list's candidate (and its score) stays valid for the job until a reservation moves a
machine of that list, so after the first task of a job only the touched list is searched.

Within one decision verdicts only worsen (reservations shrink what is free, the job's tasks
per machine only grow, states and attributes are fixed), so a machine a job passed over in a
list stays passed over: each (job, list) keeps a cursor. Reserved machines move down their
list at once and back to the view's ledger at the index's next sync (``restore``). A released gang makes
room again: cursors are dropped.

Used only for chains it is exact for (``fast_chain``): filters that declare their verdicts
monotone (``FilterTraits``), among them a resource fit, and the ranking stages
[zone_spread], [least_loaded] (scorers declaring those formulas); anything else takes the
full scan.

Vectorized: a job's first search of a decision checks that some listed machine has room
for its request at all (a list's first key usually shows it; else one compare per resource
over the index's columns, ``FreeColumns.short``; none: no list offers a machine and no host
fits, so it goes straight to the reason, which reuses those compares). A list's
machines with room for the request past the cursor are found with one compare over the
list's free amounts (``ClassList.table``), only those go through the filters (none: the
cursor moves to the list's end, as the walk would). The job's hosts are found with
one lookup in C; those short of the request (by their keys) fail resources_fit unchecked. The
failure reason counts the machines short of a resource from the room check's counts of rows
short of each prefix of the resources (``Shortage``; resources_fit names the first short
resource), hosts included unless a filter before resources_fit rejects them (none does when
none rejects the job's largest count of tasks on a machine; the rejected ones' counts are
taken out by their keys); only the others go through the chain.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import groupby, islice, repeat
from operator import ge
from typing import Iterable, Iterator, NamedTuple

import numpy as np

from cellstate.model import Job, Machine, MachineState
from cellstate.resources import Resources
from schedulers.class_list import ClassList
from schedulers.pipeline import Pipeline
from schedulers.plugin import Filter, JobPlacement, Scorer, ScoreContext, filter_traits, score_context, scorer_traits
from schedulers.placement_cache import HostMemo
from schedulers.reservation import Reservations
from schedulers.service.index import MachineIndex
from schedulers.service.reason import no_room_reason

_FIT_ORDER = ("cpu", "memory", "disk")  # the order resources_fit checks the core resources in
_FIRST_HITS = 16  # a list's machines with room usually pass at once: the rest are listed only if not
_HEAD = 32  # a list's first keys past a cursor checked one by one (a vector compare costs ~10k instructions)
_UNKNOWN = object()  # no offer remembered yet


@dataclass(frozen=True, slots=True)
class FastChain:
    """What the indexed search needs to know of a chain it is exact for."""

    resources: tuple[str, ...]
    accept: frozenset[MachineState] | None
    by_machine: bool
    loaded: Scorer
    fits: Filter
    keyed_reasons: bool
    """True when, for a listed machine without the job's tasks that is short of a least_loaded
    resource, the first failing filter is ``fits`` naming the first such resource."""
    before_fit: tuple = ()
    """The filters before ``fits``."""


def fast_chain(pipeline: Pipeline) -> FastChain | None:
    """The chain's shape when the indexed search ranks exactly as the full scan, else None:
    only filters whose verdicts only worsen as a decision reserves (``monotone_in_free``), a
    resource fit that compares every least_loaded resource (no clamped scores), stages
    [zone_spread], [least_loaded] (scorers whose ``formula`` these are). Asks the plugins'
    declared traits (``schedulers.plugin``), once per chain."""
    stages = pipeline.stages
    if len(stages) != 2 or len(stages[0]) != 1 or len(stages[1]) != 1:
        return None
    spread, loaded = stages[0][0][0], stages[1][0][0]
    spread_traits, loaded_traits = scorer_traits(spread), scorer_traits(loaded)
    if spread_traits.formula != "zone_spread" or loaded_traits.formula != "least_loaded":
        return None
    traits = [filter_traits(f) for f in pipeline.filters]
    if not all(t.monotone_in_free for t in traits):
        return None
    resources = tuple(loaded_traits.args.resources)
    fits = [i for i, t in enumerate(traits) if t.resource_fit]
    if not fits or any(not traits[i].compares(r) for i in fits for r in resources):
        return None
    states = [t.accepts_states for t in traits if t.accepts_states is not None]
    accept = frozenset.intersection(*states) if states else None
    first = fits[0]
    before = pipeline.filters[:first]
    keyed = resources == _FIT_ORDER[:len(resources)] and all(t.passes_unplaced for t in traits[:first])
    return FastChain(resources, accept, spread_traits.args.machines, loaded, pipeline.filters[first], keyed,
                     tuple(before))


class Hosts(NamedTuple):
    """The known machines holding some of a job's tasks: ``rows`` (``FreeColumns``) and the
    job's task count on each."""

    rows: np.ndarray
    tasks: np.ndarray


class SpreadSearch:
    """The search of one decision (see the module docstring)."""

    def __init__(self, index: MachineIndex, pipeline: Pipeline, chain: FastChain,
                 reservations: Reservations, hosts: HostMemo | None = None) -> None:
        """``hosts``: optionally, the caller's memo of jobs' hosts across decisions."""
        self.index = index
        self._host_memo = hosts
        self.pipeline = pipeline
        self.by_machine = chain.by_machine
        self.loaded = chain.loaded
        self.chain = chain
        self.reservations = reservations
        self._cursors: dict[tuple[str, int], tuple[int, str]] = {}
        self._offers: dict[int, dict[str, tuple[float, Machine] | None]] = {}  # id(list) -> job -> offer
        self._moved: set[str] = set()
        self._failed: dict[str, str] = {}
        self._with_room: set[str] = set()  # jobs some listed machine had room for in this search
        self._ctx: ScoreContext | None = None  # the last job's scorers' context

    def best(self, spec: Job, placement: JobPlacement) -> tuple[Machine | None, str]:
        """The best-ranked feasible machine for one more task of ``spec``, or (None, why)."""
        job_id = spec.id
        why = self._failed.get(job_id)
        if why is not None:
            return None, why
        if job_id not in self._with_room:
            need, columns = self.index.frees_of(spec.request), self.index.columns
            if not self._a_first_key_holds(need):
                short = columns.short(need)
                if not columns.any_room(short):
                    why = self._failed[job_id] = no_room_reason(self, spec, placement, None, short)
                    return None, why
            self._with_room.add(job_id)
        zones = self.index.zones
        hosts = None
        all_offers, lists_of = self._offers, self.index.lists_of
        for tier in _tiers(zones, placement) if placement.zones and len(zones) > 1 else (zones,):
            best = best_score = None
            for zone in tier:
                for listed in lists_of(zone):
                    offers = all_offers.get(id(listed))
                    offer = offers.get(job_id, _UNKNOWN) if offers is not None else _UNKNOWN
                    if offer is _UNKNOWN:
                        offer = self._offer(listed, spec, placement)
                    if offer is not None:
                        score, machine = offer
                        if best is None or score > best_score or (score == best_score and machine.id < best.id):
                            best, best_score = machine, score
            if best is None and self.by_machine:
                hosts = hosts or self.hosts_of(job_id, placement)
                best = self._best_host(tier, spec, placement, hosts)
            if best is not None:
                return best, ""
        why = self._failed[job_id] = no_room_reason(self, spec, placement, hosts)
        return None, why

    def _a_first_key_holds(self, need: tuple[int, ...]) -> bool:
        """True when the first (most free) key of some list with no staged changes has room for
        ``need``: then some listed machine has (``FreeColumns.any_room``, without its compares)."""
        for classes in self.index.zones.values():
            for listed in classes.values():
                if listed and not listed.staged and all(map(ge, islice(listed[0], 2, None), need)):
                    return True
        return False

    def _context(self, placement: JobPlacement) -> ScoreContext:
        """The scorers' context for the job of ``placement`` (kept while the job is the same)."""
        ctx = self._ctx
        if ctx is None or ctx.placement is not placement:
            ctx = self._ctx = score_context(placement, ())
        return ctx

    def _offer(self, listed: ClassList, spec: Job, placement: JobPlacement) -> tuple[float, Machine] | None:
        """(least_loaded score, machine) of the list's first fitting machine without the job's
        tasks, remembered until a reservation moves a machine of the list."""
        machine = self._first_fit(listed, spec, placement.machines)
        offer = None
        if machine is not None:
            offer = (self.loaded.score(spec, machine, self.reservations.free(machine), self._context(placement)),
                     machine)
        self._offers.setdefault(id(listed), {})[spec.id] = offer
        return offer

    def hosts_of(self, job_id: str, placement: JobPlacement) -> Hosts:
        """The known machines holding some of the job's tasks: their rows and task counts
        (kept across decisions in the host memo while the rows' layout holds)."""
        if self._host_memo is None:
            return self._look_up_hosts(placement.machines)
        return self._host_memo.get(job_id, placement.machines, self.index.columns.layout, self._look_up_hosts,
                                   _join_hosts, placement.stamp)

    def _look_up_hosts(self, placed: dict[str, int]) -> Hosts:
        """``hosts_of``, looked up in C (a big job has thousands)."""
        rows = np.array(list(map(self.index.columns.row_of.get, placed, repeat(-1))), dtype=np.int64)
        tasks = np.fromiter(placed.values(), dtype=np.int64, count=len(placed))
        held = (rows >= 0) & (tasks > 0)
        return Hosts(rows[held], tasks[held])

    def _best_host(self, zones: Iterable[str], spec: Job, placement: JobPlacement, hosts: Hosts) -> Machine | None:
        """The best-ranked fitting machine of ``zones`` that holds some of the job's tasks.
        A host that is not listed (its state is never accepted) or whose key is short of the
        request fails a filter (one vector compare finds them), so only the others are checked."""
        columns, machines = self.index.columns, self.index.machines
        check, free_of, rank_of = self.pipeline.check, self.reservations.free, self.pipeline.rank
        rows = hosts.rows
        room = columns.listed[rows]
        for column, amount in enumerate(self.index.frees_of(spec.request)):
            room &= columns.free[column, rows] >= amount
        best = best_rank = None
        ctx = self._context(placement)
        for row in rows[room].tolist():
            machine_id = columns.ids[row]
            machine = machines[machine_id]
            if machine.zone not in zones:
                continue
            free = free_of(machine)
            if check(spec, machine, free, placement.machines[machine_id]).ok:
                rank = rank_of(spec, machine, free, ctx)
                if best is None or rank > best_rank or (rank == best_rank and machine_id < best.id):
                    best, best_rank = machine, rank
        return best

    def _first_fit(self, listed: ClassList, spec: Job, placed: dict[str, int]) -> Machine | None:
        """The list's first machine past the job's cursor with room for the request (one vector
        compare over the list's free amounts, up to the keys whose load is too low to hold it),
        holding none of the job's tasks (by_machine) and passing the filters; the cursor moves
        to the key before it (the list's end: none)."""
        cursor_key = (spec.id, id(listed))
        cursor = self._cursors.get(cursor_key)
        i = 0 if cursor is None else listed.find(cursor, right=True)
        n = len(listed)
        if i >= n:
            return None
        need = self.index.frees_of(spec.request)
        found, end = None, n
        stop = listed.end_of_room(need)
        if stop > i:
            offset = self._first_with_room(listed, i, stop, need, spec, placed)
            if offset is not None:
                end = i + offset
                found = self.index.machines[listed[end][1]]
        if end > i:
            self._cursors[cursor_key] = listed[end - 1]
        return found

    def _first_with_room(self, listed: ClassList, i: int, stop: int, need: tuple[int, ...], spec: Job,
                         placed: dict[str, int]) -> int | None:
        """``_first_passing`` of the offsets from ``i`` of the keys before ``stop`` with room for
        ``need``, in order: the first ``_HEAD`` keys' by a pass over the keys (the most free come
        first: one usually has room), the rest's by one vector compare per resource."""
        start = i
        if len(need) == 2:  # least_loaded's default resources
            head, (cpu, memory) = min(stop, i + _HEAD), need
            offsets = [j for j, key in enumerate(listed[i:head]) if key[2] >= cpu and key[3] >= memory]
            offset = self._first_passing(listed, i, offsets, spec, placed) if offsets else None
            if offset is not None or head == stop:
                return offset
            start = head
        table = listed.table
        room = table[1, start:stop] >= need[0]
        for column in range(1, len(need)):
            room &= table[1 + column, start:stop] >= need[column]
        first = int(room.argmax())
        if not room[first]:
            return None
        offset = self._first_passing(listed, start, (first,), spec, placed)
        if offset is None:
            hits = room.nonzero()[0]
            offset = self._first_passing(listed, start, hits[1:_FIRST_HITS].tolist(), spec, placed)
            if offset is None and len(hits) > _FIRST_HITS:
                offset = self._first_passing(listed, start, hits[_FIRST_HITS:].tolist(), spec, placed)
        return None if offset is None else start - i + offset

    def _first_passing(self, listed: ClassList, i: int, offsets: Iterable[int], spec: Job,
                       placed: dict[str, int]) -> int | None:
        """The first of ``offsets`` (past ``i``) whose machine holds none of the job's tasks
        (by_machine) and passes the filters."""
        machines, free_of, filters = self.index.machines, self.reservations.free, self.pipeline.filters
        skip_hosts = self.by_machine
        for offset in offsets:
            machine_id = listed[i + offset][1]
            here = placed.get(machine_id, 0)
            if here and skip_hosts:
                continue
            machine = machines[machine_id]
            free = free_of(machine)
            for f in filters:  # Pipeline.check, inlined: the search's hot loop
                if not f.fits(spec, machine, free, here).ok:
                    break
            else:
                return offset
        return None

    # -- reservations --------------------------------------------------------------------------

    def reserve(self, job_id: str, machine: Machine, request: Resources) -> None:
        """Reserve and move the machine down its list (remembered failures may now read otherwise)."""
        self.reservations.reserve(job_id, machine, request)
        if self._failed:
            self._failed.clear()
        self._moved.add(machine.id)
        self._offers.pop(self.index.place(machine, self.reservations.free(machine)), None)

    def release(self, job_id: str, machine: Machine, request: Resources) -> None:
        """Undo a reservation (failed gang): room again, so every cursor and failure is dropped."""
        self.reservations.release(job_id, machine, request)
        self._moved.add(machine.id)
        self.index.place(machine, self.reservations.free(machine))
        self._cursors.clear()
        self._failed.clear()
        self._offers.clear()

    def restore(self) -> None:
        """Have the reserved machines put back at their view ledger's place (at the index's
        next sync, which re-lists most of them from the view anyway: their claims committed)."""
        self.index.restore_later(self._moved)
        self._moved.clear()


def _tiers(zones: dict[str, dict], placement: JobPlacement) -> Iterator[list[str]]:
    """The zones in tiers of equal count of the job's tasks, fewest first (in ``zones``' order
    within a tier)."""
    for _, tier in groupby(sorted(zones, key=placement.in_zone), key=placement.in_zone):
        yield list(tier)


def _join_hosts(first: Hosts, second: Hosts) -> Hosts:
    return Hosts(np.concatenate((first.rows, second.rows)), np.concatenate((first.tasks, second.tasks)))
