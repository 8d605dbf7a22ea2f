"""``omega scheduler run``: one scheduler process serving a cell until SIGINT/SIGTERM (or
``--duration``), with a progress line on stderr every ``--progress-every`` seconds and a
summary line there when it stops. It keeps a watch-fed replica of the cell, places pending jobs of its kind
optimistically (in its queue's ``--order``: fair, or drf with ``--drf-weight OWNER=W``),
publishes its stats under a leased ``stats/{name}`` key every second and, with
``--metrics-addr HOST:PORT`` (or ``--metrics-port``: on 127.0.0.1), serves Prometheus metrics
(over TLS with client certificates given ``--metrics-cert/-key/-client-ca``). On exit it prints one
``final-stats {json}`` line (its SchedulerStats) and exits 0.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import logging
import os
import sys
import time
import tomllib
import zlib

from tools.cli.common import add_store_args, cell_keys, exit_once_stopped, open_store, store_failure
from tools.cli.plugin_args import add_plugin_arg, load_plugin_args
from tools.cli.progress import Progress, add_progress_arg, progress_every

# The scheduler, store and metrics modules are imported where they are used: building the
# parser (every `omega` command, `omega --help`) then loads none of them (docs/BENCHMARKS.md).
BUILT_IN_KINDS = ("batch", "borg", "easy", "service", "solver")

log = logging.getLogger(__name__)

# The replica gives an outage up (raises) after this long; the work loop then retries after
# RuntimeOptions.error_wait_s. Short, so SIGTERM is honoured within seconds during an outage
# (the replica's default of 30 s kept the worker thread, and the process, waiting that long).
REPLICA_GIVE_UP_S = 5.0


def register(sub) -> None:
    scheduler = sub.add_parser("scheduler", help="scheduler processes")
    scheduler_sub = scheduler.add_subparsers(dest="scheduler_command", required=True, metavar="ACTION")
    run = scheduler_sub.add_parser("run", help="serve a cell until interrupted")
    run.add_argument("--kind", required=True,
                     help=f"scheduler kind: {' | '.join(BUILT_IN_KINDS)}, or one a --plugin module registers")
    run.add_argument("--name", help="scheduler name (default: KIND-PID)")
    run.add_argument("--conflict-mode", default="resource-fit", help="sequence | resource-fit (default)")
    run.add_argument("--commit-mode", default="incremental", help="incremental (default) | all-or-nothing")
    run.add_argument("--seed", type=int,
                     help="seed of the scheduler's randomness (default: derived from --name, so schedulers "
                          "started side by side without one sample differently)")
    run.add_argument("--config", metavar="FILE.toml",
                     help="scheduler config: this kind's keys (plugins and their args, knobs), or a chain file "
                          "like schedulers/default_chains.toml (the --table named like --kind)")
    run.add_argument("--table", metavar="NAME", help="with a chain file as --config: the table to use")
    run.add_argument("--batch-jobs", type=int, default=16, metavar="N",
                     help="jobs selected per scheduling round (default 16)")
    run.add_argument("--steal-after", type=float, default=None, metavar="SECONDS",
                     help="a job pending this long may be taken by any peer of the class, which then race "
                          "over it (default: never; a peer's jobs move only when its lease expires)")
    run.add_argument("--order", default="fair", metavar="ORDER",
                     help="queue order: fair (default: priority, owners round-robin) | drf (priority, then "
                          "owners' dominant resource shares)")
    run.add_argument("--drf-weight", action="append", default=[], metavar="OWNER=W",
                     help="weight of OWNER's dominant share under --order drf (default 1; repeatable)")
    from tools.cli.metrics_args import add_metrics_args

    add_metrics_args(run)
    run.add_argument("--startup-timeout", type=float, default=30.0, metavar="SECONDS",
                     help="keep retrying an unreachable store this long at start (default 30)")
    run.add_argument("--duration", type=float, default=0.0, metavar="SECONDS",
                     help="stop after this long (default 0: until SIGINT/SIGTERM)")
    add_progress_arg(run)
    add_plugin_arg(run)
    add_store_args(run)
    run.set_defaults(func=run_scheduler)


def _config(path: str | None, kind: str, table: str | None = None, flag: str = "--config") -> dict:
    """The scheduler config of ``--config``: a file of this kind's keys at the top level
    (``plugins``, ``k``, ``filters``/``scorers``…), or a chain file like
    ``schedulers/default_chains.toml`` (what ``omega explain --chains`` reads: one table per
    scheduler, each with its ``filters``), of which the table ``--table`` (default: the one
    named like ``kind``, else the only table of that kind) is used. UsageError for a missing
    file or table; InputError for a file that does not parse. ``flag`` names the file's flag
    in messages (``omega explain`` calls it ``--chains``)."""
    from tools.cli import UsageError

    if path is None:
        if table is not None:
            raise UsageError(f"--table needs {flag}")
        return {}
    data, configs = read_config_file(path, flag)
    if configs is None:
        if table is not None:
            raise UsageError(f"--table: {path} is not a chain file (no tables with filters)")
        return data
    if table is None:
        of_kind = [name for name, config in configs.items() if config.kind == kind]
        table = kind if kind in configs else of_kind[0] if len(of_kind) == 1 else None
        if table is None:
            how_many = "no table" if not of_kind else f"{len(of_kind)} tables"
            raise UsageError(f"{flag}: {path} has {how_many} of kind {kind!r} (tables: {', '.join(sorted(configs))}"
                             f"{'' if not of_kind else '; name one with --table'})")
    if table not in configs:
        raise UsageError(f"--table: {path} has no table [{table}]; tables: {', '.join(sorted(configs))}")
    if configs[table].kind != kind:
        raise UsageError(f"{flag}: [{table}] of {path} is of kind {configs[table].kind!r}, not --kind {kind!r}")
    return configs[table].as_config()


def read_config_file(path: str, flag: str = "--config") -> tuple[dict, dict | None]:
    """(the TOML of ``path``, its chain configs by table or None when it is no chain file);
    UsageError when it cannot be read, InputError when it does not parse or validate."""
    from tools.cli import InputError, UsageError

    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        raise UsageError(f"{flag}: cannot read {path!r}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{flag}: {path!r} is not valid TOML: {exc}") from None
    if not is_chain_file(data):
        return data, None
    from schedulers.chain_config import parse_chain_file
    from schedulers.plugin import PluginConfigError

    try:
        return data, parse_chain_file(data, path)
    except PluginConfigError as exc:
        raise InputError(str(exc)) from None


def is_chain_file(data: dict) -> bool:
    """Whether a parsed TOML file is a chain file: every top-level entry a table with ``filters``."""
    return bool(data) and all(isinstance(v, dict) and "filters" in v for v in data.values())


def scheduler_of_kind(kind: str, name: str, seed: int, config_path: str | None, table: str | None = None,
                      flag: str = "--config", what: str = "scheduler run"):
    """The scheduler a ``scheduler run --kind KIND`` process builds: ``make_scheduler`` of the
    kind with the config of ``config_path`` (``_config``: the kind's keys, or its table of a
    chain file). UsageError for an unknown kind or a bad flag, InputError for a config file
    that does not validate, CommandError when the kind's optional dependency is missing."""
    from schedulers.chains import KINDS, SolverUnavailable, make_scheduler
    from schedulers.plugin import PluginConfigError
    from tools.cli import CommandError, InputError, UsageError

    if kind not in KINDS:
        raise UsageError(f"--kind must be one of {', '.join(sorted(KINDS))}, got {kind!r}")
    config = _config(config_path, kind, table, flag)
    try:
        return make_scheduler(kind, name, seed, config)
    except SolverUnavailable as exc:
        raise CommandError(f"{what}: {exc}") from None
    except (PluginConfigError, ValueError) as exc:
        raise (InputError if config_path else UsageError)(str(exc)) from None


def build_parts(args):
    """(scheduler, conflict mode, commit mode, runtime options) of the flags; UsageError otherwise."""
    from cellstate.store import StoreError
    from omega.drf import parse_weight_flags
    from omega.modes import CommitMode, ConflictMode
    from omega.queue import check_order
    from omega.runtime import RuntimeOptions
    from schedulers.chains import KINDS
    from schedulers.plugin import PluginConfigError
    from tools.cli import UsageError

    load_plugin_args(args)
    if args.kind not in KINDS:  # before the other flags: a plugin's kind may be misspelt
        raise UsageError(f"--kind must be one of {', '.join(sorted(KINDS))}, got {args.kind!r}")
    name = args.name or f"{args.kind}-{os.getpid()}"
    if "/" in name:
        raise UsageError(f'--name may not contain "/", got {name!r}')
    if args.seed is None:
        args.seed = seed_of_name(name)
    from tools.cli.metrics_args import metrics_from_args

    try:
        args.metrics = metrics_from_args(args)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        weights = check_order(args.order, parse_weight_flags(args.drf_weight))
    except ValueError as exc:
        raise UsageError(f"--order/--drf-weight: {exc}") from None
    scheduler = scheduler_of_kind(args.kind, name, args.seed, args.config, args.table)
    try:
        conflict, commit = ConflictMode.parse(args.conflict_mode), CommitMode.parse(args.commit_mode)
        options = RuntimeOptions(batch_jobs=args.batch_jobs, steal_after_s=args.steal_after,
                                 duration_s=args.duration, transient_errors=(StoreError,),
                                 order=args.order, drf_weights=weights)
    except (PluginConfigError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    return scheduler, conflict, commit, options


def seed_of_name(name: str) -> int:
    """The default seed of a scheduler named ``name``: stable across runs, distinct between names."""
    return zlib.crc32(name.encode())


# Collector thresholds of a scheduler process (gen0 allocations, gen1 and gen2 collections).
GC_THRESHOLDS = (50_000, 20, 100)


def tune_gc() -> None:
    """Freeze what is live (the cell just listed: hundreds of thousands of long-lived objects)
    and collect the young generation less often. A scheduler allocates short-lived objects by
    the million; with the default thresholds the cyclic collector took ~18 % of its CPU in
    bench/bench_placement.py, rescanning the replica again and again (docs/BENCHMARKS.md)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


# While waiting for etcd at start: one warning with what to do, then a progress line this often.
WAIT_PROGRESS_EVERY_S = 5.0


def open_view(store, keys, timeout_s: float, describe=str):
    """The cell's replica, once the store answers and the cell exists (CommandError naming
    the cells that do otherwise). An unavailable store is retried for up to ``timeout_s`` (a
    scheduler started beside a busy or restarting etcd waits for it instead of exiting): one
    warning saying what is wrong (``describe(error)``), then a progress line every
    WAIT_PROGRESS_EVERY_S seconds."""
    from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_fixed

    from cellstate.replica.view import ReplicaView
    from cellstate.store import Unavailable
    from tools.cli.common import require_cell

    next_line = WAIT_PROGRESS_EVERY_S

    def attempt():
        require_cell(store, keys, "scheduler run")
        return ReplicaView(store, keys, give_up_after=REPLICA_GIVE_UP_S)

    def before_sleep(state) -> None:
        nonlocal next_line
        if state.attempt_number == 1:
            log.warning("waiting up to %g s (--startup-timeout) for etcd: %s", timeout_s,
                        describe(state.outcome.exception()))
        elif state.seconds_since_start >= next_line:
            next_line += WAIT_PROGRESS_EVERY_S
            log.warning("still waiting for etcd: %.0f s of %g s", state.seconds_since_start, timeout_s)

    retrying = Retrying(retry=retry_if_exception_type(Unavailable), stop=stop_after_delay(timeout_s),
                        wait=wait_fixed(0.5), before_sleep=before_sleep, reraise=True)
    view = retrying(attempt)
    if retrying.statistics["attempt_number"] > 1:
        log.warning("etcd answered after %.1f s", time.monotonic() - retrying.statistics["start_time"])
    return view


def run_scheduler(args) -> int:
    import anyio

    from cellstate.committer import StoreCommitter
    from cellstate.stats_sink import LeasedStatsSink
    from cellstate.store import StoreError
    from omega.runtime import SchedulerProcess
    from schedulers.chains import retry_policy_for
    from tools.metrics.scheduler import SchedulerEndpoint, count_quarantine

    scheduler, conflict, commit, options = build_parts(args)
    every = progress_every(args)
    keys = cell_keys(args)
    metrics = SchedulerEndpoint(scheduler.name, cell=keys.cell, kind=scheduler.kind)
    with open_store(args) as store:
        try:
            view = open_view(store, keys, args.startup_timeout, lambda exc: store_failure(exc, args))
        except StoreError as exc:
            print(f"omega: scheduler: cannot read cell {keys.cell!r}: {store_failure(exc, args)}", file=sys.stderr)
            return 1
        tune_gc()
        process = SchedulerProcess(
            scheduler, view, metrics.timed(StoreCommitter(store, keys, max_txn_ops=args.max_txn_ops)),
            LeasedStatsSink(store, keys, scheduler.name), conflict_mode=conflict, commit_mode=commit,
            retry=retry_policy_for(scheduler.kind, args.seed), options=options, observers=[metrics.observe])
        count_quarantine(process, view, metrics)  # bad values left out: in the stats and the metrics
        metrics.watch_view(view, process.scheduler_class, store.revision)
        try:
            if args.metrics is not None:
                from tools.metrics.endpoint import MetricsError

                try:
                    metrics.serve(args.metrics[1], args.metrics[0], args.metrics[2])
                except MetricsError as exc:
                    print(f"omega: scheduler: {exc}", file=sys.stderr)
                    return 1
                print(f"metrics on {metrics.url}", flush=True)
            print(f"scheduler {scheduler.name!r} ({scheduler.kind}, {conflict.value.label}, {commit.value.label}, "
                  f"{options.order} order, seed {args.seed}) "
                  f"serving cell {keys.cell!r} at revision {view.revision}", flush=True)
            with Progress(f"scheduler {scheduler.name}", every, lambda: progress_line(process)) as progress:
                stats = anyio.run(process.run)
            progress.print(f"stopped after {progress.elapsed()}: {summary_line(stats)}")
            exit_once_stopped(0)
        finally:
            metrics.close()
    print("final-stats " + json.dumps(dataclasses.asdict(stats), sort_keys=True), flush=True)
    return 0


def progress_line(process) -> str:
    """``placed N tasks (J jobs), M conflicts, queue K``: the process's totals so far and the
    jobs its queue holds now."""
    stats = process.snapshot()
    return (f"placed {stats.tasks_placed} tasks ({stats.jobs_placed} jobs), {stats.conflicts} conflicts, "
            f"queue {process.queue.tracked_jobs()}")


def summary_line(stats) -> str:
    """The closing line's totals of a scheduler's final stats."""
    return (f"placed {stats.tasks_placed} tasks ({stats.jobs_placed} jobs) in {stats.commits} commits, "
            f"{stats.conflicts} conflicts, {stats.tasks_unplaced} tasks left unplaced")
