"""Why no machine fits a job in a service decision's search (``SpreadSearch``): the full
scan's tally of every machine's first failing filter, most of it counted from the index's
keys (see ``schedulers.service.search``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from cellstate.model import Job
from schedulers.pipeline import Rejections
from schedulers.plugin import JobPlacement
from schedulers.row_slots import sorted_distinct
from schedulers.service.index import FreeColumns, Shortage

if TYPE_CHECKING:
    from schedulers.service.search import Hosts, SpreadSearch

_NO_ROWS = np.zeros(0, dtype=np.int64)


def no_room_reason(search: SpreadSearch, spec: Job, placement: JobPlacement, hosts: Hosts | None,
                   short: Shortage | None = None) -> str:
    """Why nothing fits: every machine's first failing filter, tallied (as the full scan).
    With ``keyed_reasons``, listed machines short of a least_loaded resource are counted
    from their keys (``short``: ``FreeColumns.short`` of the request, if the caller has it)
    by the first such resource, which resources_fit names, except the job's hosts that a
    filter before resources_fit rejects (see ``_blocked_hosts``); the others go through the
    chain."""
    tally = Rejections()
    check, free_of, placed = search.pipeline.check, search.reservations.free, placement.machines
    machines = search.index.machines
    others: Iterable[str] = machines
    if search.chain.keyed_reasons:
        columns = search.index.columns
        if short is None:
            short = columns.short(search.index.frees_of(spec.request))
        blocked = _blocked_hosts(search, spec, placement, hosts, tally)
        counts, others = count_short(columns, short, blocked, search.index.frees_of(spec.request))
        name, resources = search.chain.fits.name, search.index.resources
        for first, count in counts.items():
            key = (name, resources[first])
            tally.counts[key] = tally.counts.get(key, 0) + count
    for machine_id in others:
        machine = machines[machine_id]
        verdict = check(spec, machine, free_of(machine), placed.get(machine_id, 0))
        if not verdict.ok:
            tally.add(verdict)
    return tally.reason()


def _blocked_hosts(search: SpreadSearch, spec: Job, placement: JobPlacement, hosts: Hosts | None,
                   tally: Rejections) -> np.ndarray:
    """Rows of the listed hosts that a filter before resources_fit rejects, their verdicts
    tallied. Those filters (declaring ``passes_unplaced``) read only the job, its count of tasks on the
    machine and (machine_state) the machine's state, which every listed machine has
    accepted; each rejects from some count on. So none rejects any host when none rejects
    the largest count on some listed machine; else the verdict is computed once per count
    of tasks (on one such host)."""
    columns, machines, free_of = search.index.columns, search.index.machines, search.reservations.free
    before = search.chain.before_fit
    top = max(placement.machines.values(), default=0)
    some = columns.some_listed() if top > 0 and before else None
    if some is None or all(f.fits(spec, machines[some], free_of(machines[some]), top).ok for f in before):
        return _NO_ROWS
    hosts = hosts or search.hosts_of(spec.id, placement)
    listed = columns.listed[hosts.rows]
    heres = hosts.tasks
    blocked = []
    for here in sorted_distinct(heres[listed]):
        at = listed & (heres == here)
        machine = machines[columns.ids[int(hosts.rows[np.argmax(at)])]]
        free = free_of(machine)
        verdict = next((v for v in (f.fits(spec, machine, free, here) for f in before) if not v.ok), None)
        if verdict is not None:
            rows = hosts.rows[at]
            key = (verdict.plugin, verdict.reason)
            tally.counts[key] = tally.counts.get(key, 0) + len(rows)
            blocked.append(rows)
    return np.concatenate(blocked) if blocked else _NO_ROWS


def count_short(columns: FreeColumns, short: Shortage, blocked: np.ndarray, need: tuple[int, ...]):
    """Over the listed machines' keys (``columns``) but the ``blocked`` (listed) rows, those short of a
    least_loaded resource (``short``: ``FreeColumns.short`` of ``need``): ({index of the first short
    resource: machines}, the ids of every other known machine but the blocked ones). Rows not
    listed are short of the first resource; the blocked rows' firsts are found by their keys."""
    n = len(columns.ids)
    totals, before = short.totals, n - columns.listed_count
    blocked_totals = columns.short(need, blocked).totals if len(blocked) else [0] * len(totals)
    counts: dict[int, int] = {}
    for first, (total, held) in enumerate(zip(totals, blocked_totals)):
        count = total - before - held
        if count:
            counts[first] = count
        before = total - held
    if before == n - len(blocked):  # every listed machine but the blocked ones is short
        return counts, columns.unlisted()
    others = ~short.lacking  # listed, with room
    if len(blocked):
        others[blocked] = False
    others |= columns.known[:n] & ~columns.listed[:n]
    ids = columns.ids
    return counts, [ids[row] for row in np.flatnonzero(others).tolist()]

