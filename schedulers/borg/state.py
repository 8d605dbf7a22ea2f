"""What the Borg scheduler carries from one decision to the next, as one explicit object:
``SearchState``. A decision takes it in (``schedulers.borg.decision.decide``), its searches and
its post-filters write to it, and it is handed back to the scheduler; the scheduler itself is
configuration only."""

from __future__ import annotations

from dataclasses import dataclass, field

from cellstate.model import Job, Machine
from cellstate.resources import Resources
from schedulers.borg.cache import Signer
from schedulers.borg.index import LoadIndex
from schedulers.plugin import Verdict


@dataclass(slots=True)
class BorgCounters:
    """What the scheduler did, cumulatively: machines evaluated (through the chain or the
    cache), cache hits, decisions, tasks decided, tasks placed by preemption, searches that
    found no feasible machine after walking them all (``fits_nowhere``), preemption passes."""

    decisions: int = 0
    tasks: int = 0
    evaluations: int = 0
    cache_hits: int = 0
    preemptions: int = 0
    fits_nowhere: int = 0
    preemption_passes: int = 0


@dataclass(slots=True)
class SearchState:
    """The Borg scheduler's state across decisions: the machine ids in walk order (listed at
    ``count`` machines; -1: list them again before the next decision), the packed walk's load
    index, each untouched machine's free resources (``base_free``, keyed by the Machine object),
    the lowest allocated priority per machine at its revision (``floors``, the preemption
    post-filter's), the machines to re-key in the index before the next decision (``changed``),
    where the last decision found its first feasible machine (``sticky``), the verdict memos of
    the filters before resources_fit per signature (``before_memos``) and the counters."""

    counters: BorgCounters = field(default_factory=BorgCounters)
    ids: list[str] = field(default_factory=list)
    count: int = -1
    index: LoadIndex | None = None
    base_free: dict[str, tuple[Machine, Resources]] = field(default_factory=dict)
    floors: dict[str, tuple[int, int]] = field(default_factory=dict)
    changed: set[str] = field(default_factory=set)
    sticky: int = 0
    before_memos: dict[tuple[object, ...], dict[str, tuple[int, Verdict | None]]] = field(default_factory=dict)

    def relist(self) -> None:
        """The cell changed under the listed ids: list them again before the next decision."""
        self.count = -1

    def before_memo(self, signer: Signer | None, spec: Job) -> dict[str, tuple[int, Verdict | None]] | None:
        """With ``signer`` (the score cache's, over the fields the filters before resources_fit
        read): machine id -> (revision, the first failing verdict of those filters, or None) for
        jobs with ``spec``'s signature, valid for a machine at that revision, untouched and
        without the job's tasks (the exact "fits nowhere" walk reads it: ``Search._fill_rest``)."""
        if signer is None:
            return None
        signature = signer.signature(spec)
        memo = self.before_memos.get(signature)
        if memo is None:
            if len(self.before_memos) >= 64:
                self.before_memos.clear()
            memo = self.before_memos[signature] = {}
        return memo
