"""``omega experiment NAME [--trace FILE] [--quick] [--json OUT] [--batch-kind KIND] [--order
ORDER]`` (and ``omega experiment compaction TRACE``: Borg's cell compaction): run one of the Omega paper's scheduler experiments on the fauxmaster and print a rich
table of the figures, the paper's finding beside it, and whether its direction was reproduced
(``all`` runs each). ``--batch-kind`` swaps the batch schedulers for another kind (borg,
solver…) and ``--order`` sets every scheduler's queue order (fair or drf)."""

from __future__ import annotations

import argparse
import json
import math
import sys

from tools.cli.common import add_output_arg, output_json
from tools.cli.gpu_frag import add_gpu_frag_args, run_gpu_frag
from tools.cli.plugin_args import add_plugin_arg, load_plugin_args


# The experiments of tools.fauxmaster.experiments.catalogue (kept here so building the parser imports
# no scheduler code; a test checks the two lists agree).
NAMES = ("architectures", "tjob-sweep", "conflict-modes", "commit-modes", "batch-scaling")
GPU_FRAG = "gpu-frag"
COMPACTION = "compaction"
OMEGA_SWEEP = "omega-sweep"


def register(sub) -> None:
    p = sub.add_parser("experiment", help="reproduce an Omega paper experiment on the fauxmaster")
    p.add_argument("name", choices=[*NAMES, "all", GPU_FRAG, COMPACTION, OMEGA_SWEEP],
                   help=f"experiment to run (all: every Omega one; {GPU_FRAG}: the FGD paper's, on openb lists; "
                        f"{COMPACTION}: Borg's cell compaction of TRACE; {OMEGA_SWEEP}: the Omega paper's "
                        f"t_job x architecture grid on TRACE)")
    p.add_argument("target", nargs="?", metavar="TRACE", help=f"{COMPACTION}, {OMEGA_SWEEP}: the omega trace")
    p.add_argument("--trace", metavar="FILE", help="omega trace to replay (default: a seeded synthetic one)")
    p.add_argument("--quick", action="store_true", help="a much smaller synthetic cell and workload (tests)")
    p.add_argument("--json-out", metavar="FILE", dest="json", help="also write the report(s) as JSON to FILE")
    p.add_argument("--json", metavar="FILE", dest="json", help=argparse.SUPPRESS)  # deprecated: --json-out
    add_output_arg(p, json_alias=False)
    p.add_argument("--batch-kind", default="batch", metavar="KIND",
                   help="scheduler kind of the batch schedulers: batch (default) | borg | solver | service")
    p.add_argument("--order", default="fair", metavar="ORDER",
                   help="queue order of every scheduler: fair (default) | drf")
    p.add_argument("--drf-weight", action="append", default=[], metavar="OWNER=W",
                   help="owner weight under --order drf (default 1; repeatable)")
    p.add_argument("--seed", type=int, default=0,
                   help="added to every scheduler's and the synthetic workload's seed (default 0)")
    add_plugin_arg(p)
    add_gpu_frag_args(p)
    p.set_defaults(seeds=None)  # --seeds: gpu-frag's default 42-51, compaction's 0-10
    g = p.add_argument_group(f"{COMPACTION} (Borg EuroSys'15 §5.1; also --seeds, default 0-10 here, --jobs, --html)")
    g.add_argument("--variants", help="comma list of baseline, segregated, pow2 (default: all three)")
    g.add_argument("--at", type=float, metavar="SECONDS", help="the snapshot's instant (default: the trace's middle)")
    g.add_argument("--sample", type=float, default=1.0, metavar="F",
                   help="compact a seeded share F of the snapshot's machines and tasks (default 1: all)")
    g.add_argument("--engine", choices=("local", "ray"), help="sweep engine of the searches (default local)")
    g.add_argument("--out", metavar="DIR", help="sweep folder, resumable (default: a new temp folder)")
    w = p.add_argument_group(f"{OMEGA_SWEEP} (Omega EuroSys'13 §4-5; also --engine, --out, --jobs, --html, --seed)")
    w.add_argument("--until", type=float, metavar="S",
                   help="replay window: the first S virtual seconds of TRACE (default 300)")
    w.add_argument("--batch-tjob", metavar="LIST", help="batch t_job values, s (default 0.1,0.25,0.5,1,2,4)")
    w.add_argument("--service-tjob", metavar="LIST", help="service t_job values, s (default 0.1,10)")
    w.add_argument("--architectures", metavar="LIST",
                   help="monolithic, two-level, shared-state (default: all)")
    w.add_argument("--batch-schedulers", metavar="LIST",
                   help="numbers of batch schedulers (default 1,3; monolithic runs with 1 only)")
    p.set_defaults(func=run_experiment_command)


OMEGA_SWEEP_DEFAULTS = {"until": 300.0, "batch_tjob": "0.1,0.25,0.5,1,2,4", "service_tjob": "0.1,10",
                        "architectures": "monolithic,two-level,shared-state", "batch_schedulers": "1,3"}
"""The omega-sweep flags' defaults: the parser's are None, so that a flag given to another experiment
is refused rather than ignored."""


def _omega_sweep_flags_given(args) -> list[str]:
    return ["--" + name.replace("_", "-") for name in OMEGA_SWEEP_DEFAULTS if getattr(args, name) is not None]


def _check_outputs(args) -> None:
    """UsageError for a ``--json-out`` or ``--html`` path that cannot be written (a directory as the
    file, a file as the directory, no permission): before the runs, whose work would be lost."""
    from tools.cli import UsageError
    from tools.cli.replay import unwritable

    for flag, path, directory in (("--json-out", args.json, False), ("--html", args.html, True)):
        if path and (why := unwritable(path, directory)):
            raise UsageError(f"{flag} {path}: {why}")


def run_experiment_command(args) -> int:
    from omega.drf import parse_weight_flags
    from tools.cli import UsageError
    from tools.cli.common import output_file_errors, replay_errors, require_optional
    from tools.fauxmaster.experiments.catalogue import run_experiment
    from tools.fauxmaster.experiments.runs import Overrides

    _check_outputs(args)
    if args.name == COMPACTION:
        return run_compaction_command(args)
    if args.name == OMEGA_SWEEP:
        return run_omega_sweep_command(args)
    given = [flag for flag, value in (("TRACE", args.target), ("--variants", args.variants), ("--at", args.at),
                                      ("--sample", args.sample != 1.0), ("--engine", args.engine),
                                      ("--out", args.out)) if value not in (None, False)]
    if given:
        raise UsageError(f"{', '.join(given)}: for experiment {COMPACTION} or {OMEGA_SWEEP} only")
    if given := _omega_sweep_flags_given(args):
        raise UsageError(f"{', '.join(given)}: for experiment {OMEGA_SWEEP} only")
    if args.name == GPU_FRAG:
        args.seeds = args.seeds or "42-51"
        return run_gpu_frag(args)
    if args.nodes or args.pods:
        raise UsageError("--nodes/--pods are for experiment gpu-frag")
    if args.seeds is not None:  # the Omega experiments take one --seed
        raise UsageError(f"--seeds: for experiment {GPU_FRAG} or {COMPACTION} only (these take --seed)")
    load_plugin_args(args)
    try:
        overrides = Overrides(args.batch_kind, args.order, parse_weight_flags(args.drf_weight), args.seed)
    except ValueError as exc:
        raise UsageError(f"--batch-kind/--order/--drf-weight: {exc}") from None
    if args.batch_kind == "solver":
        require_optional("ortools", "experiment --batch-kind solver")
    chosen = list(NAMES) if args.name == "all" else [args.name]
    reports = []
    for name in chosen:
        with replay_errors():
            report = run_experiment(name, trace=args.trace, quick=args.quick, overrides=overrides)
        if not output_json(args):
            print_report(report)
        reports.append(report)
    data = [r.to_dict() for r in reports]
    text = json.dumps(data[0] if len(data) == 1 else data, indent=2, default=str) + "\n"
    if output_json(args):
        print(text, end="")
    if args.json:
        from tools.fauxmaster.report.result import write_whole
        with output_file_errors("experiment", "--json-out", args.json):
            write_whole(args.json, text)
    if args.html:
        from tools.fauxmaster.experiments.html import write_experiment_html
        with output_file_errors("experiment", "--html", args.html):
            index = write_experiment_html(reports, args.html)
        print(f"report: {index}", file=sys.stderr)
    return 0 if all(r.runs_ok for r in reports) else 1


def run_compaction_command(args) -> int:
    """``omega experiment compaction TRACE``: flags checked before any work, the searches on the
    sweep engine, a table of the variants beside the paper's figures; exit 1 if a search failed."""
    from tools.cli import InputError, UsageError
    from tools.cli.common import replay_errors
    from tools.fauxmaster.experiments.compaction import CompactionError, parse_variants, run_compaction
    from tools.fauxmaster.experiments.snapshot import EmptySnapshot
    from tools.gpufrag.experiment import ExperimentError, parse_seeds

    if not args.target:
        raise UsageError(f"experiment {COMPACTION} needs TRACE (an omega trace: omega import google2011)")
    other = [flag for flag, value in (("--trace", args.trace), ("--quick", args.quick), ("--nodes", args.nodes),
                                      ("--pods", args.pods)) if value] + _omega_sweep_flags_given(args)
    if other:
        raise UsageError(f"{', '.join(other)}: not for experiment {COMPACTION}")
    if args.jobs < 0:
        raise UsageError(f"--jobs must be >= 0, got {args.jobs}")
    try:
        seeds = parse_seeds(args.seeds or "0-10")
        variants = parse_variants(args.variants or "baseline,segregated,pow2")
    except (ExperimentError, CompactionError) as exc:
        raise UsageError(str(exc)) from None
    if not 0 < args.sample <= 1:
        raise UsageError(f"--sample must be in (0, 1], got {args.sample:g}")
    if args.at is not None and not args.at >= 0:
        raise UsageError(f"--at must be >= 0 seconds, got {args.at:g}")
    engine, progress = _sweep_engine(args, COMPACTION, "searches")
    try:
        with replay_errors():
            report = run_compaction(args.target, seeds, variants, args.at, args.sample, engine, args.out,
                                    progress=progress)
    except EmptySnapshot as exc:
        raise InputError(f"{args.target}: {exc}") from None
    except CompactionError as exc:
        raise UsageError(str(exc)) from None
    from tools.fauxmaster.experiments.compaction import write_compaction_html

    return _emit_sweep_report(args, report.to_dict(), print_compaction, write_compaction_html)


def _sweep_engine(args, experiment: str, unit: str):
    """(engine, progress) of an experiment whose runs go through the sweep engine: ``--engine``
    (Ray checked for first), ``--jobs`` workers, and a progress line per finished run on stderr
    unless the output is JSON (progress None)."""
    from tools.cli.common import require_optional
    from tools.sweep.engines import make_engine

    if args.engine == "ray":
        require_optional("ray", f"experiment {experiment} --engine ray")
    engine = make_engine(args.engine or "local", None, args.jobs or None)
    if output_json(args):
        return engine, None

    def progress(finished, total, failed):
        print(f"{experiment}: {finished}/{total} {unit}, {failed} failed", file=sys.stderr, flush=True)
    return engine, progress


def _emit_sweep_report(args, data: dict, print_table, write_html) -> int:
    """Print ``data`` (JSON with ``-o json``, else ``print_table``), write ``--json-out`` and
    ``--html`` (``write_html(data, directory)`` -> its index); exit 1 if a run failed."""
    from tools.cli.common import output_file_errors

    text = json.dumps(data, indent=2, default=str) + "\n"
    if output_json(args):
        print(text, end="")
    else:
        print_table(data)
    if args.json:
        from tools.fauxmaster.report.result import write_whole
        with output_file_errors("experiment", "--json-out", args.json):
            write_whole(args.json, text)
    if args.html:
        with output_file_errors("experiment", "--html", args.html):
            index = write_html(data, args.html)
        print(f"report: {index}", file=sys.stderr)
    return 1 if data["failed"] else 0


def run_omega_sweep_command(args) -> int:
    """``omega experiment omega-sweep TRACE``: the grid's points on the sweep engine, the saturation
    points and their shift beside the paper's; exit 1 if a point failed."""
    from tools.cli import UsageError
    from tools.cli.common import replay_errors
    from tools.fauxmaster.experiments.omega_sweep import (
        SweepInputError, parse_floats, parse_setups, run_omega_sweep, write_sweep_html,
    )

    if not args.target:
        raise UsageError(f"experiment {OMEGA_SWEEP} needs TRACE (an omega trace: omega import google2011)")
    for name, default in OMEGA_SWEEP_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    other = [flag for flag, value in (("--trace", args.trace), ("--quick", args.quick), ("--nodes", args.nodes),
                                      ("--pods", args.pods), ("--variants", args.variants), ("--at", args.at),
                                      ("--sample", args.sample != 1.0), ("--seeds", args.seeds)) if value]
    if other:
        raise UsageError(f"{', '.join(other)}: not for experiment {OMEGA_SWEEP}")
    if args.jobs < 0:
        raise UsageError(f"--jobs must be >= 0, got {args.jobs}")
    try:
        batch = parse_floats("--batch-tjob", args.batch_tjob)
        service = parse_floats("--service-tjob", args.service_tjob)
        setups = parse_setups(args.architectures, args.batch_schedulers)
    except SweepInputError as exc:
        raise UsageError(str(exc)) from None
    if not 0 < args.until < math.inf:
        raise UsageError(f"--until must be a finite number > 0 of seconds, got {args.until:g}")
    engine, progress = _sweep_engine(args, OMEGA_SWEEP, "points")
    with replay_errors():
        data = run_omega_sweep(args.target, batch, service, setups, args.until, args.seed, engine, args.out,
                               progress)
    return _emit_sweep_report(args, data, print_omega_sweep, write_sweep_html)


def print_omega_sweep(data: dict, console=None) -> None:
    """Per set-up and service t_job: batch busyness along the batch t_job axis, the saturation point."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    table = Table(title=f"omega-sweep of {data['trace']}, first {data['until_s']:g} s: batch busyness "
                        "by batch t_job", title_justify="left")
    table.add_column("set-up")
    table.add_column("service t_job", justify="right")
    for b in data["batch_t_job"]:
        table.add_column(f"{b:g} s", justify="right")
    table.add_column("saturates at batch t_job", justify="right")
    for name, grid in data["grids"].items():
        for service in data["service_t_job"]:
            cells = grid.get(str(service), {})
            values = [cells.get(str(b)) for b in data["batch_t_job"]]
            point = data["saturation"][name][str(service)]
            table.add_row(name, f"{service:g} s", *(
                "" if v is None else f"{v['batch_busyness']:.2f}{'*' if v['saturated'] in (True, 'True') else ''}"
                for v in values), "—" if point is None else f"{point:g} s")
    console.print(table)
    console.print(f"{data['rule']} (*)", highlight=False)
    for arch, shift in data["shift"].items():
        median = shift["median"]
        console.print(f"{arch}: 3 batch schedulers saturate at "
                      f"{'—' if median is None else f'{median:.2f}x'} the batch t_job of 1 (median over service "
                      f"t_job; paper ≈{data['paper']['saturation_shift']:g}x)", highlight=False)
    for failure in data["failed"]:
        console.print(f"[bold red]FAILED[/bold red] {failure['id']}: {failure['error']}", highlight=False)


def print_compaction(data: dict, console=None) -> None:
    """The compaction report as a rich table: each variant's compacted size and overhead, the paper's."""
    from rich.console import Console
    from rich.table import Table

    from tools.fauxmaster.experiments.verdicts import format_cell

    console = console or Console()
    snap = data["snapshot"]
    table = Table(title=f"compaction of {data['trace']} at {snap['at_s']:g} s", title_justify="left")
    for header in ("variant", "p90 % of cell", "median %", "seeds", "overhead p90 %", "overhead median %", "paper %"):
        table.add_column(header, justify="left" if header == "variant" else "right")
    for name, figures in data["variants"].items():
        over = data["overheads"].get(name, {})
        paper = over.get("paper_pct")
        table.add_row(name, format_cell(figures["p90_machines_pct"], ".1f"),
                      format_cell(figures["median_machines_pct"], ".1f"),
                      str(sum(1 for s in figures["seeds"] if s["machines"] not in ("", None))),
                      format_cell(over.get("p90_machines_pct"), "+.1f"),
                      format_cell(over.get("median_machines_pct"), "+.1f"),
                      f"+{paper[0]}..{paper[1]}" if paper else "")
    console.print(table)
    console.print(f"snapshot: {snap['machines']:,} machines, {snap['tasks']:,} tasks in {snap['jobs']:,} jobs "
                  f"(of {snap['machines_up']:,} machines up and {snap['tasks_present']:,} tasks present)",
                  highlight=False)
    unfit = {name: sum(s["unfittable_tasks"] or 0 for s in v["seeds"]) for name, v in data["variants"].items()}
    if any(unfit.values()):
        console.print(f"tasks no machine could hold, left out of the searches (summed over seeds): {unfit}",
                      highlight=False)
    for failure in data["failed"]:
        console.print(f"[bold red]FAILED[/bold red] {failure['variant']} seed {failure['seed']}: {failure['error']}",
                      highlight=False)
    console.print(f"sweep: {data['sweep']['out']} ({data['sweep']['ran']} ran, {data['sweep']['resumed']} resumed, "
                  f"{data['sweep']['wall_s']:.1f} s)", highlight=False)


def print_report(report, console=None) -> None:
    """The report as a rich table with the paper's finding and the verdict."""
    from rich.console import Console
    from rich.table import Table

    from tools.fauxmaster.experiments.verdicts import format_cell

    console = console or Console()
    table = Table(title=f"{report.name}: {report.title}", title_justify="left")
    for column in report.columns:
        table.add_column(column.header, justify="left" if column.fmt == "" else "right")
    for row in report.rows:
        table.add_row(*(format_cell(row.get(c.key), c.fmt) for c in report.columns))
    console.print(table)
    console.print(f"[bold]setup:[/bold] {report.setup}")
    console.print(f"[bold]paper:[/bold] {report.paper}")
    colour = "green" if report.verdict.reproduced else "yellow" if report.verdict.inconclusive else "red"
    console.print(f"[bold {colour}]{report.verdict.text}[/bold {colour}]")
    for warning in report.verdict.warnings:
        console.print(f"[bold yellow]warning:[/bold yellow] {warning}", markup=True, highlight=False)
    if not report.runs_ok:
        console.print("[bold red]cell invariants were violated in at least one run[/bold red]")
    console.print(f"({report.wall_s:.1f} s wall)\n")


