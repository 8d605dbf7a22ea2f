"""``omega experiment NAME [--trace FILE] [--quick] [--json OUT] [--batch-kind KIND] [--order
ORDER]``: run one of the Omega paper's scheduler experiments on the fauxmaster and print a rich
table of the figures, the paper's finding beside it, and whether its direction was reproduced
(``all`` runs each). ``--batch-kind`` swaps the batch schedulers for another kind (borg,
solver…) and ``--order`` sets every scheduler's queue order (fair or drf)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tools.cli.common import add_output_arg, output_json
from tools.cli.gpu_frag import add_gpu_frag_args, run_gpu_frag
from tools.cli.plugin_args import add_plugin_arg, load_plugin_args


# The experiments of tools.fauxmaster.experiments.catalogue (kept here so building the parser imports
# no scheduler code; a test checks the two lists agree).
NAMES = ("architectures", "tjob-sweep", "conflict-modes", "commit-modes", "batch-scaling")
GPU_FRAG = "gpu-frag"


def register(sub) -> None:
    p = sub.add_parser("experiment", help="reproduce an Omega paper experiment on the fauxmaster")
    p.add_argument("name", choices=[*NAMES, "all", GPU_FRAG],
                   help=f"experiment to run (all: every Omega one; {GPU_FRAG}: the FGD paper's, on openb lists)")
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
    p.set_defaults(func=run_experiment_command)


def run_experiment_command(args) -> int:
    from omega.drf import parse_weight_flags
    from tools.cli import UsageError
    from tools.cli.common import output_file_errors, replay_errors, require_optional
    from tools.fauxmaster.experiments.catalogue import run_experiment
    from tools.fauxmaster.experiments.runs import Overrides

    if args.name == GPU_FRAG:
        return run_gpu_frag(args)
    if args.nodes or args.pods:
        raise UsageError("--nodes/--pods are for experiment gpu-frag")
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
        out = Path(args.json)
        with output_file_errors("experiment", "--json-out", args.json):
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text)
    if args.html:
        from tools.fauxmaster.experiments.html import write_experiment_html
        with output_file_errors("experiment", "--html", args.html):
            index = write_experiment_html(reports, args.html)
        print(f"report: {index}", file=sys.stderr)
    return 0 if all(r.runs_ok for r in reports) else 1


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


