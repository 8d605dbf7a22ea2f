"""``omega explain JOB [TASK]``: why a task of a job goes where it goes, or stays pending,
under the chain of the scheduler class that serves the job (what ``omega scheduler run
--kind CLASS`` builds; ``--kind`` names another)."""

from __future__ import annotations

import json
import sys
from dataclasses import replace

from cellstate.store import StoreError
from tools.cli.common import (
    add_output_arg, add_store_args, cell_keys, connect, job_arg, output_json, store_failure,
)
from tools.cli.plugin_args import add_plugin_arg, load_plugin_args
from tools.cli.scheduler import read_config_file


def register(sub) -> None:
    p = sub.add_parser("explain", help="run a scheduler chain for one task and show every filter and score")
    add_store_args(p)
    p.add_argument("job", help="job id")
    p.add_argument("task", nargs="?", type=int, default=None, help="task index (default: the first pending)")
    p.add_argument("--kind", default=None,
                   help="scheduler kind whose chain to run (default: the job's scheduler class, as the "
                        "scheduler process serving it runs)")
    p.add_argument("--chains", default=None, metavar="FILE.toml",
                   help="a chain TOML file (see schedulers/default_chains.toml), or a kind's config as "
                        "`scheduler run --config` takes")
    p.add_argument("--table", default=None,
                   help="table of --chains to use (default: the one named like the kind, else the only one of it)")
    add_plugin_arg(p)
    p.add_argument("--top", type=int, default=5, help="machines to show (default 5)")
    add_output_arg(p)
    p.set_defaults(func=run)


def _scheduler(args, scheduler_class: str):
    """The scheduler whose chain is explained: the one a ``scheduler run`` process of the job's
    class builds (``--kind`` overrides the class), with ``--chains``/``--table`` as its
    ``--config``/``--table`` (tools.cli.scheduler.scheduler_of_kind)."""
    from schedulers.chains import KINDS
    from tools.cli import CommandError
    from tools.cli.scheduler import scheduler_of_kind

    kind = args.kind or scheduler_class
    if args.kind is None and kind not in KINDS:
        raise CommandError(f"explain: job {args.job!r} is served by scheduler class {kind!r}, which is no "
                           f"scheduler kind known here ({', '.join(sorted(KINDS))}); load it with --plugin "
                           "or name a kind with --kind")
    return scheduler_of_kind(kind, "explain", 0, args.chains, args.table, flag="--chains", what="explain")


def _live_of_class(replica, scheduler_class: str) -> tuple[str, ...]:
    """Names of the live schedulers (leased stats keys) of ``scheduler_class``; stats that do not
    decode are skipped."""
    from tools.monitor.model import decode_all_stats

    stats, _ = decode_all_stats(replica.stats())
    return tuple(sorted(s.name for s in stats if s.kind == scheduler_class))


def run(args) -> int:
    from cellstate.replica.watched import Replica
    from tools.cli import InputError, UsageError
    from tools.explain import ExplainError, explain, render

    if args.top < 1:
        raise UsageError(f"--top must be >= 1, got {args.top}")
    job_arg(args.job)
    if args.table is not None and args.chains is None:
        raise UsageError("--table needs --chains")
    load_plugin_args(args)
    # Flags and files are checked before connecting; without --kind, the job names the kind.
    if args.chains is not None:
        read_config_file(args.chains, "--chains")
    given = _scheduler(args, args.kind) if args.kind else None
    keys = cell_keys(args)
    with connect(args) as store:
        # Values that do not decode (an unknown schema version…) are quarantined and told below,
        # in one line, instead of one log warning each.
        replica = Replica(store, keys, on_decode_error=lambda key, error: None)
        try:
            replica.sync()
            why = replica.quarantine.get(keys.job(args.job))
            if why is not None:
                raise InputError(f"job {args.job!r}: its record does not decode: {why}")
            if replica.job(args.job) is None:  # like kill and job status: a runtime error, not usage
                print(f"omega: explain: no job {args.job!r} in cell {keys.cell!r} (omega job list shows its jobs)",
                      file=sys.stderr)
                return 1
            scheduler = given or _scheduler(args, replica.job(args.job).record.job.scheduler_class)
            result = explain(replica, args.job, args.task, scheduler.pipeline, args.top, scheduler)
            result = replace(result, served_by=_live_of_class(replica, result.scheduler_class))
        except StoreError as exc:
            print(f"omega: explain: {store_failure(exc, args)}", file=sys.stderr)
            return 1
        except ExplainError as exc:
            raise UsageError(str(exc)) from None
        finally:
            replica.close()
    if replica.quarantine:
        why = next(iter(replica.quarantine.values()))
        print(f"omega: explain: left out {len(replica.quarantine)} value(s) that do not decode (first: {why})",
              file=sys.stderr)
    print(json.dumps(result.to_dict(), indent=2) if output_json(args) else render(result))
    return 0
