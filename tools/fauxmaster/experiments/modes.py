"""The experiments on conflict detection and commit modes (Omega §5.2): ``conflict-modes``
(coarse sequence numbers vs fine resource-fit) and ``commit-modes`` (incremental vs gang)."""

from __future__ import annotations

from tools.fauxmaster.experiments.runs import BATCH_T_JOB, Bench, pair
from tools.fauxmaster.experiments.synthetic import SyntheticSpec
from tools.fauxmaster.experiments.verdicts import (
    Column, ExperimentReport, ExperimentVerdict, noise_note, successful_txns, clearly_larger, compared,
    conflict_setup_warnings, counts_conclusive, ratio, verdict_of,
)


def _modes_spec(bench: Bench) -> SyntheticSpec:
    return bench.sizing.spec.with_batch_rate(bench.sizing.modes_batch_factor)


def _mode_rows(bench: Bench, label: str, variants: dict[str, dict]) -> tuple[list[dict], bool, list[str]]:
    trace = bench.trace(_modes_spec(bench))
    rows, ok, warnings = [], True, []
    for name, modes in variants.items():
        f = bench.run(trace, pair(service_t_job=1.0, **modes))
        ok &= f.invariants_ok
        warnings += conflict_setup_warnings(name, f)
        rows.append({label: name, "conflict_fraction": f.conflict_fraction(),
                     "batch_conflict_fraction": f.conflict_fraction(["batch"]),
                     "service_conflict_fraction": f.conflict_fraction(["service"]),
                     "failed_txns": sum(s.failed_transactions for s in f.schedulers),
                     "stale_retries": sum(f.stale.values()), "conflicts": f.conflicts(), "txns_ok": successful_txns(f),
                     "busyness": f.busyness(), "batch_wait_placed": f.of("batch").wait_placed.mean,
                     "unscheduled": f.of("batch").unscheduled + f.of("service").unscheduled})
    return rows, ok, warnings


def _mode_verdict(rows: list[dict], larger: int, smaller: int, detail: str, warnings: list[str]) -> ExperimentVerdict:
    """Row ``larger``'s conflict fraction clearly above row ``smaller``'s, on enough conflicts."""
    a, b = rows[larger], rows[smaller]
    outcome = compared(clearly_larger(a["conflict_fraction"], b["conflict_fraction"]),
                       counts_conclusive(a["conflicts"], a["txns_ok"], b["conflicts"], b["txns_ok"]))
    detail += f"; {a['conflicts']} vs {b['conflicts']} conflicts in {a['txns_ok']:,} vs {b['txns_ok']:,} txns"
    return verdict_of([outcome], detail + noise_note(outcome), warnings)


def _mode_columns(label: str, header: str) -> list[Column]:
    return [Column(label, header), Column("conflict_fraction", "conflict fraction (all)", ".4f"),
            Column("batch_conflict_fraction", "batch", ".4f"), Column("service_conflict_fraction", "service", ".4f"),
            Column("failed_txns", "failed txns"), Column("stale_retries", "of which stale"),
            Column("busyness", "mean busyness", ".3f"),
            Column("batch_wait_placed", "batch wait to placed (s)", ".2f"), Column("unscheduled", "jobs unscheduled")]


def conflict_modes(bench: Bench) -> ExperimentReport:
    rows, ok, warnings = _mode_rows(bench, "mode", {"coarse (sequence)": {"conflict": "sequence"},
                                          "fine (resource-fit)": {"conflict": "resource-fit"}})
    coarse, fine = rows[0]["conflict_fraction"], rows[1]["conflict_fraction"]
    detail = f"conflict fraction coarse {coarse:.4f} vs fine {fine:.4f}: {ratio(coarse, fine):.1f}x (paper 2-3x)"
    return ExperimentReport(
        "conflict-modes", "Coarse (sequence numbers) vs fine (resource-fit) conflict detection",
        "Omega §5.2 (Fig. 12): fine-grained conflict detection gives 2-3x fewer conflicts than coarse "
        "sequence-number detection.",
        f"{bench.describe(_modes_spec(bench))}; shared-state, batch t_job {BATCH_T_JOB:g} s, service t_job 1 s, "
        f"incremental",
        _mode_columns("mode", "conflict detection"), rows, _mode_verdict(rows, 0, 1, detail, warnings), runs_ok=ok)


def commit_modes(bench: Bench) -> ExperimentReport:
    rows, ok, warnings = _mode_rows(bench, "mode", {"incremental": {"commit": "incremental"},
                                          "all-or-nothing (gang)": {"commit": "all-or-nothing"}})
    incremental, gang = rows[0]["conflict_fraction"], rows[1]["conflict_fraction"]
    detail = (f"conflict fraction gang {gang:.4f} vs incremental {incremental:.4f}: "
              f"{ratio(gang, incremental):.1f}x (paper ~2x)")
    return ExperimentReport(
        "commit-modes", "Incremental vs all-or-nothing (gang) commits",
        "Omega §5.2 (Fig. 12): all-or-nothing (gang) transactions roughly double the conflict fraction "
        "compared with incremental ones.",
        f"{bench.describe(_modes_spec(bench))}; shared-state, batch t_job {BATCH_T_JOB:g} s, service t_job 1 s, "
        f"resource-fit",
        _mode_columns("mode", "commit mode"), rows, _mode_verdict(rows, 1, 0, detail, warnings), runs_ok=ok)
