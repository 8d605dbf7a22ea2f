"""``omega experiment gpu-frag --nodes FILE --pods FILE [--policies LIST] [--seeds 42-51]
[--tune 1.3] [--tie-break shuffled|name|random] [--jobs N] [-o json] [--json-out FILE] [--html DIR]``:
the FGD paper's experiment on an openb node list and pod list (tools.gpufrag.experiment)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

DEFAULT_POLICIES = "random,dotprod,gpuclustering,gpupacking,bestfit,fgd"


def add_gpu_frag_args(p) -> None:
    g = p.add_argument_group("gpu-frag (the FGD paper's experiment on Alibaba openb lists)")
    g.add_argument("--nodes", metavar="FILE", help="openb node list (csv or csv.gz)")
    g.add_argument("--pods", metavar="FILE", help="openb pod list (csv or csv.gz)")
    g.add_argument("--policies", default=DEFAULT_POLICIES, help=f"comma list (default: {DEFAULT_POLICIES})")
    g.add_argument("--seeds", default="42-51", help="A-B or a comma list (default: 42-51)")
    g.add_argument("--tune", type=float, default=1.3,
                   help="arrived GPU demand as a multiple of the cell's GPU capacity (default 1.3)")
    g.add_argument("--tie-break", default="shuffled", choices=("shuffled", "name", "random"),
                   help="among equal scores: the first node in a random node order drawn once per run "
                        "(default, the artifact), the first by name, or a random one at each placement")
    g.add_argument("--jobs", type=int, default=0, help="worker processes (default: one per core)")
    g.add_argument("--html", metavar="DIR", help="also write an HTML report (plots) to DIR")


def run_gpu_frag(args) -> int:
    from tools.cli import InputError, UsageError
    from tools.cli.common import output_json, require_optional
    from tools.gpufrag.experiment import (
        ExperimentError, load_inputs, parse_policies, parse_seeds, run_experiment, write_html,
    )
    from tools.trace.openb.lists import OpenbError

    if not args.nodes or not args.pods:
        raise UsageError("experiment gpu-frag needs --nodes FILE and --pods FILE (openb lists)")
    if args.jobs < 0:
        raise UsageError(f"--jobs must be >= 0, got {args.jobs}")
    try:
        policies, seeds = parse_policies(args.policies), parse_seeds(args.seeds)
    except ExperimentError as exc:
        raise UsageError(str(exc)) from None
    if args.html:
        require_optional("matplotlib", "experiment gpu-frag --html")
    for path in (args.nodes, args.pods):
        if not Path(path).is_file():
            raise UsageError(f"{path}: no such file")
    try:
        inputs = load_inputs(args.nodes, args.pods)
    except (OpenbError, ExperimentError) as exc:
        raise InputError(str(exc)) from None

    redraw = sys.stderr.isatty()  # one line redrawn on a terminal; a line per run in a log

    def progress(done: int, total: int) -> None:
        if not output_json(args):
            start = "\r" if redraw else ""
            print(f"{start}gpu-frag: {done}/{total} runs", end="" if redraw and done < total else "\n",
                  file=sys.stderr, flush=True)

    try:
        doc = run_experiment(inputs, policies, seeds, args.tune, args.tie_break, args.jobs or None, progress)
    except ExperimentError as exc:
        raise UsageError(str(exc)) from None
    text = json.dumps(doc, indent=2) + "\n"
    if output_json(args):
        print(text, end="")
    else:
        print_gpu_frag(doc)
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    if args.html:
        index = write_html(doc, args.html)
        if not output_json(args):
            print(f"report: {index}")
    return 0


def print_gpu_frag(doc: dict) -> None:
    import statistics

    from rich.console import Console
    from rich.table import Table

    from tools.gpufrag.experiment import published_note

    console = Console()
    src, settings = doc["inputs"], doc["settings"]
    table = Table(title=f"gpu-frag: {Path(src['pods_file']).name} on {Path(src['nodes_file']).name}, "
                        f"{len(settings['seeds'])} seed(s), tune {settings['tune']}", title_justify="left")
    # columns: median unallocated GPU % at 100 % arrived; its range over the seeds; the artifact's
    # published median; fragmentation (% of idle GPU) at 100 %; median failed pods
    for header in ("policy", "unalloc %", "seed range", "artifact", "frag % idle", "failed"):
        table.add_column(header, justify="left" if header == "policy" else "right")
    for name, p in doc["policies"].items():
        rng = p["unallocated_gpu_pct_at_100_range"]
        pub = p["published_unallocated_gpu_pct_at_100"]
        table.add_row(name, f"{p['unallocated_gpu_pct_at'].get('100', float('nan')):.2f}",
                      f"{rng[0]:.2f}-{rng[1]:.2f}" if rng else "", "" if pub is None else f"{pub:.2f}",
                      f"{p['frag_pct_of_idle_at'].get('100', float('nan')):.1f}", f"{p['failed_pods_median']:g}")
    console.print(table)
    arrived = statistics.median(p["pods_median"] for p in doc["policies"].values())
    console.print("unalloc %: median unallocated GPU (% of capacity) when the arrived GPU demand reaches 100 % "
                  "of capacity; seed range: its lowest and highest over the seeds; frag % idle: idle GPU the "
                  f"target workload cannot use; failed: median arrived pods that fit on no node (of {arrived:g} "
                  "arrived, the median)", highlight=False)
    console.print(published_note(doc), highlight=False)
    console.print(f"inputs: {src['nodes']} nodes ({src['gpu_nodes']} with {src['gpus']} GPUs), {src['pods']} pods "
                  f"({src['cpu_pods']} CPU-only, {src['share_pods']} sharing a GPU, {src['whole_gpu_pods']} whole GPUs; "
                  f"{src['pods_with_gpu_spec']} name GPU models, {src['pods_whose_gpu_spec_no_node_has']} of them "
                  f"models no node has; {src.get('pods_no_node_fits', 0)} larger than any node); target workload {src['target_shapes']} of {src['distinct_shapes']} shapes "
                  f"covering {100 * src['target_coverage']:.1f} %", highlight=False)
    if src["ignored_columns"]:
        console.print(f"ignored columns: {', '.join(src['ignored_columns'])}", highlight=False)
    if src["absent_optional_columns"]:
        console.print(f"absent optional columns: {', '.join(src['absent_optional_columns'])}", highlight=False)
    console.print(f"({doc['wall_s']:.1f} s wall; modelling choices: -o json or --html)", highlight=False)
