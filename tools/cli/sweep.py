"""``omega sweep SPEC.toml --out DIR [--engine local|ray] [--address ADDR] [--workers N] [-o json]``:
run every replay of a sweep spec (``tools.sweep``, docs/SWEEP.md), each one task of the engine;
runs already finished in DIR are skipped, a failed run is retried once. A progress bar with ETA
goes to stderr (rich on a terminal, plain lines otherwise). Exit 1 if a run still failed."""

from __future__ import annotations

import json
import sys
import time

from tools.cli.common import add_output_arg, output_json


def register(sub) -> None:
    p = sub.add_parser("sweep", help="run a grid of replays (settings × traces × seeds) on a process pool or Ray")
    p.add_argument("spec", help="sweep spec (TOML, docs/SWEEP.md)")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (runs/ID.json, runs/ID.csv, runs.csv)")
    p.add_argument("--engine", choices=("local", "ray"), default="local",
                   help="local (default): a process pool over the machine's cores; ray: Ray tasks")
    p.add_argument("--address", metavar="ADDR", help="--engine ray: the Ray cluster (default: a local Ray)")
    p.add_argument("--workers", type=int, metavar="N", help="concurrent runs (default: the machine's cores)")
    add_output_arg(p, json_alias=False)
    p.set_defaults(func=run_sweep_command)


def run_sweep_command(args) -> int:
    from tools.cli import CommandError, InputError, UsageError
    from tools.cli.common import require_optional
    from tools.cli.replay import unwritable
    from tools.sweep.driver import TraceSourceError, run_sweep
    from tools.sweep.engines import EngineError, make_engine
    from tools.sweep.spec import SpecError, load_spec

    if not args.out.strip():
        raise UsageError("--out needs a folder")
    if args.address and args.engine != "ray":
        raise UsageError("--address needs --engine ray")
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be >= 1, got {args.workers}")
    if args.engine == "ray":
        require_optional("ray", "sweep --engine ray")
    try:
        spec = load_spec(args.spec)
    except OSError as exc:
        raise UsageError(f"spec {args.spec}: {exc.strerror or exc}") from None
    except SpecError as exc:
        raise InputError(str(exc)) from None
    why = unwritable(args.out, True)
    if why:
        raise UsageError(f"--out {args.out}: {why}")
    engine = make_engine(args.engine, args.address, args.workers)
    try:
        with ProgressBar(sys.stderr.isatty(), f"sweep {spec.name} ({args.engine})") as progress:
            report = run_sweep(spec, engine, args.out, progress)
    except EngineError as exc:
        raise CommandError(f"sweep: {exc}") from None
    except TraceSourceError as exc:
        raise InputError(f"{args.spec}: {exc}") from None
    if output_json(args):
        print(json.dumps({"spec": spec.path, "engine": args.engine, "out": args.out, "table": report.table,
                          "ran": report.ran, "resumed": report.resumed, "retried": report.retried,
                          "failed": len(report.failed), "wall_s": round(report.wall_s, 3), "runs": report.rows},
                         indent=2))
    else:
        print(f"sweep {spec.name}: {len(report.rows)} runs ({report.ran} ran, {report.resumed} already done, "
              f"{report.retried} retried, {len(report.failed)} failed) in {report.wall_s:,.1f} s on {args.engine}; "
              f"table {report.table}")
        for row in report.failed:
            print(f"  FAILED {row['id']} ({row['trace']}, seed {row['seed']}): {row['error']}")
    return 1 if report.failed else 0


class ProgressBar:
    """A ``progress(finished, total, failed)`` callback with ETA on stderr: a rich bar when
    ``rich`` (a terminal), else a plain line per change (``sweep: 3/8 (38%), 0 failed, ETA 0:42``)."""

    def __init__(self, rich: bool, label: str):
        self.rich, self.label = rich, label
        self.bar = self.task = None
        self.started = time.perf_counter()
        self.first: tuple[float, int] | None = None

    def __enter__(self):
        if self.rich:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn(self.label), BarColumn(), MofNCompleteColumn(),
                                TextColumn("{task.fields[failed]} failed"), TextColumn("ETA"), TimeRemainingColumn(),
                                transient=True)
            self.bar.__enter__()
        return self

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.__exit__(*exc)

    def __call__(self, finished: int, total: int, failed: int) -> None:
        if self.first is None:  # runs resumed from an earlier sweep take no time: ETA from here
            self.first = (time.perf_counter(), finished)
        if self.bar is not None:
            if self.task is None:
                self.task = self.bar.add_task(self.label, total=total, completed=finished, failed=0)
            self.bar.update(self.task, completed=finished, failed=failed)
            return
        t0, n0 = self.first
        elapsed, done = time.perf_counter() - t0, finished - n0
        eta = "?" if done <= 0 else _clock(elapsed / done * (total - finished))
        percent = 100 * finished / total if total else 100
        print(f"{self.label}: {finished}/{total} ({percent:.0f}%), {failed} failed, ETA {eta}", file=sys.stderr,
              flush=True)


def _clock(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"
