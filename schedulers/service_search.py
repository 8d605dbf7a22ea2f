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
list at once and back to the view's ledger at the end (``restore``). A released gang makes
room again: cursors are dropped.

Used only for chains it is exact for (``fast_chain``): the known monotone filters and the
ranking stages [zone_spread], [least_loaded]; anything else takes the full scan.

Vectorized over the index's numpy columns (``FreeColumns``): a list in which every machine is
short of the request is passed in one step (its cursor set to its end, as the walk would);
the failure reason counts the machines short of a resource with a few vector compares (the
smallest id of each group gives the verdict's text), only the others go through the chain.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from itertools import groupby
from typing import Iterable

import numpy as np

from cellstate.model import Job, Machine, MachineState
from cellstate.resources import Resources
from schedulers.pipeline import Pipeline, Rejections
from schedulers.plugin import JobPlacement, ScoreContext
from schedulers.plugins.constraints import Constraints
from schedulers.plugins.different_machine import DifferentMachine
from schedulers.plugins.least_loaded import LeastLoaded
from schedulers.plugins.machine_state import MachineStateFilter
from schedulers.plugins.max_per_machine import MaxPerMachine
from schedulers.plugins.resources_fit import ResourcesFit
from schedulers.plugins.zone_spread import ZoneSpread
from schedulers.reservation import Reservations
from schedulers.service_index import FreeColumns, MachineIndex

_MONOTONE_FILTERS = (MachineStateFilter, DifferentMachine, MaxPerMachine, ResourcesFit, Constraints)
_PASS_UNPLACED = (MachineStateFilter, DifferentMachine, MaxPerMachine)  # pass listed machines without the job
_FIT_ORDER = ("cpu", "memory", "disk")  # the order resources_fit checks the core resources in


@dataclass(frozen=True, slots=True)
class FastChain:
    """What the indexed search needs to know of a chain it is exact for."""

    resources: tuple[str, ...]
    accept: frozenset[MachineState] | None
    by_machine: bool
    loaded: LeastLoaded
    fits: ResourcesFit
    keyed_reasons: bool
    """True when, for a listed machine without the job's tasks that is short of a least_loaded
    resource, the first failing filter is ``fits`` naming the first such resource."""


def fast_chain(pipeline: Pipeline) -> FastChain | None:
    """The chain's shape when the indexed search ranks exactly as the full scan, else None:
    only known filters (whose verdicts only worsen as a decision reserves), a resources_fit
    that checks every least_loaded resource (no clamped scores), stages [zone_spread],
    [least_loaded]."""
    stages = pipeline.stages
    if len(stages) != 2 or len(stages[0]) != 1 or len(stages[1]) != 1:
        return None
    spread, loaded = stages[0][0][0], stages[1][0][0]
    if type(spread) is not ZoneSpread or type(loaded) is not LeastLoaded:
        return None
    if not all(type(f) in _MONOTONE_FILTERS for f in pipeline.filters):
        return None
    resources = tuple(loaded.args.resources)
    fits = [f for f in pipeline.filters if type(f) is ResourcesFit]
    if not fits or any(set(f.args.ignore) & set(resources) for f in fits):
        return None
    states = [f for f in pipeline.filters if type(f) is MachineStateFilter]
    accept = frozenset.intersection(*(frozenset(f.args.accept) for f in states)) if states else None
    before = pipeline.filters[:pipeline.filters.index(fits[0])]
    keyed = resources == _FIT_ORDER[:len(resources)] and all(type(f) in _PASS_UNPLACED for f in before)
    return FastChain(resources, accept, spread.args.machines, loaded, fits[0], keyed)


class SpreadSearch:
    """The search of one decision (see the module docstring)."""

    def __init__(self, index: MachineIndex, pipeline: Pipeline, chain: FastChain,
                 reservations: Reservations) -> None:
        self.index = index
        self.pipeline = pipeline
        self.by_machine = chain.by_machine
        self.loaded = chain.loaded
        self.chain = chain
        self.reservations = reservations
        self._cursors: dict[tuple[str, int], tuple[int, str]] = {}
        self._offers: dict[int, dict[str, tuple[float, Machine] | None]] = {}  # id(list) -> job -> offer
        self._moved: set[str] = set()
        self._failed: dict[str, str] = {}
        self._roomy: dict[str, set[int]] = {}  # job -> lists with a machine it is not short on

    def best(self, spec: Job, placement: JobPlacement) -> tuple[Machine | None, str]:
        """The best-ranked feasible machine for one more task of ``spec``, or (None, why)."""
        why = self._failed.get(spec.id)
        if why is not None:
            return None, why
        ctx = ScoreContext(placement)
        zones = sorted(self.index.zones, key=placement.in_zone)
        for _, tier in groupby(zones, key=placement.in_zone):
            tier = list(tier)
            best = best_score = None
            for zone in tier:
                for listed in self.index.lists_of(zone):
                    offer = self._offer(listed, spec, placement, ctx)
                    if offer is not None:
                        score, machine = offer
                        if best is None or score > best_score or (score == best_score and machine.id < best.id):
                            best, best_score = machine, score
            if best is None and self.by_machine:
                best = self._best_host(tier, spec, placement, ctx)
            if best is not None:
                return best, ""
        why = self._failed[spec.id] = self._reason(spec, placement)
        return None, why

    def _offer(self, listed: list[tuple[int, str]], spec: Job, placement: JobPlacement,
               ctx: ScoreContext) -> tuple[float, Machine] | None:
        """(least_loaded score, machine) of the list's first fitting machine without the job's
        tasks, remembered until a reservation moves a machine of the list."""
        offers = self._offers.get(id(listed))
        if offers is None:
            offers = self._offers[id(listed)] = {}
        elif spec.id in offers:
            return offers[spec.id]
        machine = self._first_fit(listed, spec, placement.machines)
        offer = None
        if machine is not None:
            offer = (self.loaded.score(spec, machine, self.reservations.free(machine), ctx), machine)
        offers[spec.id] = offer
        return offer

    def _best_host(self, zones: list[str], spec: Job, placement: JobPlacement, ctx: ScoreContext) -> Machine | None:
        """The best-ranked fitting machine of ``zones`` that holds some of the job's tasks."""
        machines, check, free_of = self.index.machines, self.pipeline.check, self.reservations.free
        rank_of = self.pipeline.rank
        best = best_rank = None
        for machine_id, here in placement.machines.items():
            machine = machines.get(machine_id)
            if here <= 0 or machine is None or machine.zone not in zones:
                continue
            free = free_of(machine)
            if check(spec, machine, free, here).ok:
                rank = rank_of(spec, machine, free, ctx)
                if best is None or rank > best_rank or (rank == best_rank and machine_id < best.id):
                    best, best_rank = machine, rank
        return best

    def _first_fit(self, listed: list[tuple[int, str]], spec: Job, placed: dict[str, int]) -> Machine | None:
        cursor_key = (spec.id, id(listed))
        cursor = self._cursors.get(cursor_key)
        i = 0 if cursor is None else bisect.bisect_right(listed, cursor)
        roomy = self._roomy.get(spec.id)
        if roomy is None:  # reservations only shrink room: a list without room stays so
            roomy = self._roomy[spec.id] = self.index.columns.lists_with_room(self.index.frees_of(spec.request))
        if self.index.list_number[id(listed)] not in roomy:  # every machine short: the walk passes all
            if i < len(listed):
                self._cursors[cursor_key] = listed[-1]
            return None
        machines, free_of, filters = self.index.machines, self.reservations.free, self.pipeline.filters
        skip_hosts = self.by_machine
        need = self.index.frees_of(spec.request)
        two = len(need) == 2
        need0, need1 = need if two else (0, 0)
        passed = None
        found = None
        for key in listed[i:] if i else listed:
            machine_id = key[1]
            here = placed.get(machine_id, 0)
            if two:  # short of a least_loaded resource: resources_fit fails (keys hold the free amounts)
                short = key[2] < need0 or key[3] < need1
            else:
                short = any(f < n for f, n in zip(key[2:], need))
            if not (short or (here and skip_hosts)):
                machine = machines[machine_id]
                free = free_of(machine)
                for f in filters:  # Pipeline.check, inlined: the search's hot loop
                    if not f.fits(spec, machine, free, here).ok:
                        break
                else:
                    found = machine
                    break
            passed = key
        if passed is not None:
            self._cursors[cursor_key] = passed
        return found

    def _reason(self, spec: Job, placement: JobPlacement) -> str:
        """Why nothing fits: every machine's first failing filter, tallied (as the full scan).
        With ``keyed_reasons``, listed machines without the job's tasks that are short of a
        least_loaded resource are counted from their keys by the first such resource (one
        filter call per resource gives the verdict); the others go through the chain."""
        tally = Rejections()
        check, free_of, placed = self.pipeline.check, self.reservations.free, placement.machines
        machines = self.index.machines
        short_of: dict[int, tuple[int, str]] = {}
        others: Iterable[str] = machines
        if self.chain.keyed_reasons:
            short_of, others = _count_short(self.index.columns, self.index.frees_of(spec.request), placed)
        for machine_id in others:
            machine = machines[machine_id]
            verdict = check(spec, machine, free_of(machine), placed.get(machine_id, 0))
            if not verdict.ok:
                tally.add(verdict)
        for first, (count, machine_id) in short_of.items():
            machine = machines[machine_id]
            verdict = self.chain.fits.fits(spec, machine, free_of(machine), 0)
            tally.counts[(verdict.plugin, verdict.reason)] = tally.counts.get((verdict.plugin, verdict.reason), 0) + count
        return tally.reason()

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
        self._roomy.clear()
        self._failed.clear()
        self._offers.clear()

    def restore(self) -> None:
        """Put the reserved machines back at their view ledger's place."""
        machines = self.index.machines
        for machine_id in self._moved:
            machine = machines.get(machine_id)
            if machine is not None:
                self.index.place(machine, machine.free)
        self._moved.clear()


def _count_short(columns: FreeColumns, need: tuple[int, ...], placed: dict[str, int]):
    """Over the listed machines' keys (``columns``), those without the job's tasks that are
    short of a least_loaded resource: ({index of the first short resource: (machines, the
    smallest id)}, the ids of every other known machine)."""
    n = len(columns.ids)
    free = columns.free[:n]
    remaining = columns.listed[:n].copy()
    hosts = columns.rows_of(machine_id for machine_id, here in placed.items() if here)
    if hosts:
        remaining[hosts] = False
    counted = np.zeros(n, dtype=bool)
    short_of: dict[int, tuple[int, str]] = {}
    for first, amount in enumerate(need):
        short = remaining & (free[:, first] < amount)
        count = int(np.count_nonzero(short))
        if count:
            short_of[first] = (count, columns.smallest_id(short))
            remaining &= ~short
            counted |= short
    ids = columns.ids
    return short_of, [ids[row] for row in np.flatnonzero(columns.known[:n] & ~counted).tolist()]
