"""``omega report RESULT [RESULT ...]``: replay results (``omega replay --json-out`` files, or ``--html``
directories) side by side: their figures as a table on stdout, and with ``--html DIR`` one HTML page with
the replay report's plots, each run's curves overlaid and labelled (``tools.fauxmaster.report.plots``).

Every file is read and checked, and matplotlib and the output directory too, before anything is
written; a file that is not a replay result is a one-line error naming it (exit 65, an invalid input
file). ``-o json`` prints the side-by-side figures as one JSON document instead of the table."""

from __future__ import annotations

from pathlib import Path

from tools.cli.common import add_output_arg, output_json


def register(sub) -> None:
    p = sub.add_parser("report", help="put replay results side by side (table; --html: one page of overlaid plots)")
    p.add_argument("results", nargs="+", metavar="RESULT",
                   help="replay result: an omega replay --json-out file, or an omega replay --html directory "
                        "(of a --seeds run: one column per seed)")
    p.add_argument("--html", metavar="DIR", help="write index.html and the PNG plots here (needs matplotlib)")
    p.add_argument("--label", action="append", default=[], metavar="NAME",
                   help="a run's name in the table and legends, once per RESULT in order "
                        "(default: the file's name, or its directory's for result.json)")
    add_output_arg(p, json_alias=False)
    p.set_defaults(func=run_report)


def labels_of(paths: list[str]) -> list[str]:
    """A short, distinct label per result path: its directory's name for a directory or a
    ``result.json``, else the file's name without ``.json``; the paths as given when those clash."""
    def short(path: str) -> str:
        p = Path(path)
        if p.is_dir() or p.name == "result.json":
            p = p.resolve() if p.is_dir() else p.resolve().parent
            return p.name or str(p)
        return p.name[:-5] if p.name.endswith(".json") else p.name

    labels = [short(p) for p in paths]
    return labels if len(set(labels)) == len(labels) else list(paths)


def run_report(args) -> int:
    from tools.cli import InputError, UsageError
    from tools.cli.replay import unwritable
    from tools.cli.common import require_optional
    from tools.fauxmaster.report.page import write_report
    from tools.fauxmaster.report.result import ResultError, Run, load_results

    if args.label and len(args.label) != len(args.results):
        raise UsageError(f"--label given {len(args.label)} times for {len(args.results)} results: give one per result")
    if len(set(args.label)) != len(args.label):
        raise UsageError(f"--label names must differ, got {args.label}")
    if args.html:
        require_optional("matplotlib", "report --html")
        why = unwritable(args.html, True)
        if why:
            raise UsageError(f"--html {args.html}: {why}")
    for path in args.results:  # a path that is not there is a bad argument (2), not a bad file (65)
        if not Path(path).exists():
            raise UsageError(f"{path}: No such file or directory")
    labels = args.label or labels_of(args.results)
    try:
        runs = [Run(f"{label} {suffix}" if suffix else label, data)  # a --seeds output: one run per seed
                for label, path in zip(labels, args.results) for suffix, data in load_results(path)]
    except ResultError as exc:
        raise InputError(str(exc)) from None
    if output_json(args):
        _print_json(runs)
    else:
        _print_table(runs)
    if args.html:
        print(f"report: {write_report(runs, args.html)}")
    return 0


def _print_json(runs) -> None:
    """The same figures as the table, as JSON: per run its label, the summary rows and its schedulers."""
    import json

    from tools.fauxmaster.report.summary import summary_rows

    rows = summary_rows(runs)
    print(json.dumps({"runs": [{"label": run.label, "figures": {what: values[i] for what, values in rows},
                                "schedulers": run.data["schedulers"]} for i, run in enumerate(runs)]}, indent=2))


def _print_table(runs) -> None:
    """The settings that differ between the runs, the figures side by side, then each run's schedulers."""
    from tools.fauxmaster.report.summary import settings_compared, summary_rows

    differ, _ = settings_compared(runs)
    print("settings that differ:" + ("" if differ else " none"))
    for name, values in differ:
        print(f"  {name}: " + "; ".join(f"{run.label}: {value}" for run, value in zip(runs, values)))

    rows = [("", [r.label for r in runs])] + summary_rows(runs)
    first = max(len(what) for what, _ in rows)
    widths = [max(len(values[i]) for _, values in rows) for i in range(len(runs))]
    for what, values in rows:
        print(f"{what:<{first}}  " + "  ".join(f"{v:>{w}}" for v, w in zip(values, widths)))
    for run in runs:
        for s in run.data["schedulers"]:
            print(f"{run.label} {s['name']} ({s['kind']}, {s['conflict_mode']}, {s['commit_mode']}): busyness "
                  f"{s['busyness']:.3f}, conflict fraction {s['conflict_fraction']:.4f}, {s['attempts']:,} attempts, "
                  f"{s['tasks_placed']:,} tasks placed")
