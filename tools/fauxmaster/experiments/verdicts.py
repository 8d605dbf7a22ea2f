"""An experiment's report (its table, the paper's finding, the verdict) and the rules a verdict
follows: a direction counts only with a clear effect (``MIN_EFFECT``), a comparison of counts only
above their noise (``counts_conclusive``)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from tools.fauxmaster.experiments.runs import RunFigures


def ratio(a: float, b: float) -> float:
    """a ÷ b (inf when only b is 0, 1 when both are)."""
    return a / b if b > 0 else (float("inf") if a > 0 else 1.0)


MIN_EFFECT = 1.1
"""A verdict's direction needs the larger figure at least this many times the smaller: a few
per cent either way is what one seed of these small cells gives, not the paper's effect."""


def clearly_larger(a: float, b: float) -> bool:
    """``a`` is at least ``MIN_EFFECT`` times ``b`` (any ``a`` > 0 when ``b`` is 0)."""
    return ratio(a, b) >= MIN_EFFECT


MIN_EVENTS = 10
"""A comparison of event counts (conflicts) means something only with at least this many events
on the two sides together: below it, one seed decides (2 conflicts against 0 is noise)."""
NOISE_SIGMAS = 2.0
"""... and only when the two rates differ by more than this many standard deviations of their
Poisson noise: a count c has noise sqrt(c), so rates c_a / n_a and c_b / n_b differ by more than
noise when |c_a/n_a - c_b/n_b| > NOISE_SIGMAS * sqrt(c_a / n_a² + c_b / n_b²)."""


def counts_conclusive(a: int, n_a: int, b: int, n_b: int) -> bool:
    """Whether ``a`` events in ``n_a`` trials against ``b`` in ``n_b`` differ by more than noise:
    ``a + b >= MIN_EVENTS`` and the rates differ by more than ``NOISE_SIGMAS`` Poisson standard
    deviations (``n`` of 0 counts as 1). A modelling rule, the same for every experiment and trace."""
    if a + b < MIN_EVENTS:
        return False
    n_a, n_b = max(n_a, 1), max(n_b, 1)
    noise = math.sqrt(a / n_a**2 + b / n_b**2)
    return abs(a / n_a - b / n_b) > NOISE_SIGMAS * noise


def compared(larger: bool, conclusive: bool = True) -> str:
    """One comparison's outcome: "yes" (in the paper's direction, clearly), "no", or
    "inconclusive" (too few events to tell, whatever the ratio)."""
    return "inconclusive" if not conclusive else ("yes" if larger else "no")


def verdict_of(outcomes: list[str], detail: str, warnings: list[str] | None = None) -> ExperimentVerdict:
    """REPRODUCED when every comparison is "yes"; NOT reproduced when any is "no"; INCONCLUSIVE
    otherwise (some had too few events and none went against)."""
    if "no" in outcomes:
        return ExperimentVerdict(False, detail, warnings=tuple(warnings or ()))
    inconclusive = "inconclusive" in outcomes
    return ExperimentVerdict(not inconclusive, detail, inconclusive, tuple(warnings or ()))


def conflict_setup_warnings(label: str, f: RunFigures) -> list[str]:
    """Why the run ``label`` cannot show conflicts between schedulers: fewer than two schedulers,
    or fewer than two that made any transaction (a trace without jobs for one of them)."""
    if len(f.schedulers) < 2:
        return [f"{label}: one scheduler only ({', '.join(s.name for s in f.schedulers)}): conflicts need "
                "two schedulers committing concurrently, so this set-up cannot produce the effect"]
    active = [s.name for s in f.schedulers if s.transactions > 0]
    if len(active) < 2:
        return [f"{label}: only {', '.join(active) or 'no scheduler'} committed anything (the trace has no jobs "
                "for the others): conflicts need two schedulers committing concurrently, so this set-up "
                "cannot produce the effect"]
    return []


def successful_txns(f: RunFigures, names: list[str] | None = None) -> int:
    """Successful transactions of the named schedulers (all if None): the conflicts' denominator."""
    return sum(s.transactions - s.failed_transactions for s in f.schedulers if names is None or s.name in names)


def noise_note(outcome: str) -> str:
    """The detail's note when a comparison of counts was too small to mean something."""
    return (f"; inconclusive: fewer than {MIN_EVENTS} conflicts on both sides together, or a difference "
            f"within {NOISE_SIGMAS:g} sigma of their Poisson noise (sqrt of the counts)"
            if outcome == "inconclusive" else "")


# ------------------------------------------------------------------------ reports

@dataclass(frozen=True, slots=True)
class Column:
    """A table column: row key, header, and a format spec for numbers ("" = as is)."""

    key: str
    header: str
    fmt: str = ""


def format_cell(value, fmt: str) -> str:
    """A table cell: numbers with ``fmt``, anything else as text ("" for missing)."""
    if value is None:
        return ""
    if fmt and isinstance(value, (int, float)) and not isinstance(value, bool):
        return format(value, fmt)
    return str(value)


@dataclass(frozen=True, slots=True)
class ExperimentVerdict:
    """Whether the paper's direction was reproduced, and the numbers that say so."""

    reproduced: bool
    detail: str
    inconclusive: bool = False
    """Too few events to tell (``verdict_of``); ``reproduced`` is then False."""
    warnings: tuple[str, ...] = ()
    """Why the set-up cannot produce the effect (e.g. one scheduler only in a conflict experiment)."""

    @property
    def text(self) -> str:
        state = "INCONCLUSIVE" if self.inconclusive else "REPRODUCED" if self.reproduced else "NOT reproduced"
        return f"direction {state}: {self.detail}"


@dataclass
class ExperimentReport:
    """One experiment's table, the paper's finding and the verdict."""

    name: str
    title: str
    paper: str
    setup: str
    columns: list[Column]
    rows: list[dict[str, Any]]
    verdict: ExperimentVerdict
    wall_s: float = 0.0
    runs_ok: bool = True

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["verdict"]["text"] = self.verdict.text
        return out
