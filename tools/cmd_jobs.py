"""``omega submit``, ``omega kill``, ``omega generate``: put work into a cell.

Exit status: 0 done; 1 refused by the cell (id exists, no such job, store unreachable for
longer than --retry-for); 2 bad input (invalid job file, bad flags, a stored record this
version cannot read).

``submit`` and ``generate --submit`` retry through store outages (an etcd restart, a lost
leader) for up to ``--retry-for`` seconds per submission, one line on stderr per retry; a
retry never submits a job twice (``cellstate.submit.submit_retrying``).
"""

from __future__ import annotations

import math
import sys
import time

from cellstate.jobspec import JobSpecError, dump_jobs, load_jobs
from cellstate.store import StoreError
from cellstate.submit import (
    DEFAULT_RETRY_FOR_S, JobNotFound, JobsExist, UnreadableRecord, kill_job, submit_retrying, transient,
)
from tools.common import add_store_args, cell_keys, open_store
from tools.workload import WorkloadMix, generate, parse_routes

MAX_GENERATED_JOBS = 10_000_000  # expected arrivals of one `omega generate`


def register(sub) -> None:
    submit = sub.add_parser("submit", help="submit the jobs of TOML/JSON job files")
    submit.add_argument("files", nargs="+", metavar="FILE")
    _add_retry_for(submit)
    add_store_args(submit)
    submit.set_defaults(func=run_submit)

    kill = sub.add_parser("kill", help="kill a job: release its tasks' resources")
    kill.add_argument("job", metavar="JOB")
    add_store_args(kill)
    kill.set_defaults(func=run_kill)

    gen = sub.add_parser("generate", help="generate a seeded batch/service workload")
    gen.add_argument("--seed", type=int, default=1)
    gen.add_argument("--duration", type=float, default=60.0, help="seconds of arrivals (default 60)")
    gen.add_argument("--rate", type=float, default=1.0, help="jobs per second, all kinds (default 1)")
    gen.add_argument("--service-fraction", type=float, default=0.1,
                     help="share of jobs that are services (default 0.1)")
    gen.add_argument("--prefix", default=None, help="job id prefix (default w{seed}-)")
    gen.add_argument("--route", default="", metavar="CLASS=FRACTION[,...]",
                     help="name scheduler CLASS on that share of jobs (e.g. borg=0.25; 'borg' alone routes "
                          "every job to borg); the others go to their kind's class")
    out = gen.add_mutually_exclusive_group(required=True)
    out.add_argument("--out", metavar="FILE", help="write a JSON job file")
    out.add_argument("--submit", action="store_true", help="submit in real time as jobs arrive")
    _add_retry_for(gen)
    add_store_args(gen)
    gen.set_defaults(func=run_generate)


def _add_retry_for(parser) -> None:
    parser.add_argument("--retry-for", type=float, default=DEFAULT_RETRY_FOR_S, metavar="SECONDS",
                        help="keep retrying a submission through store outages this long "
                             f"(default {DEFAULT_RETRY_FOR_S:g}; 0: no retry)")


def _retry_for(args) -> float:
    from tools.cli import UsageError

    if not 0 <= args.retry_for < math.inf:
        raise UsageError(f"--retry-for must be a finite number of seconds >= 0, got {args.retry_for:g}")
    return args.retry_for


def _retry_logger(what: str, retry_for: float):
    """``on_retry`` for submit_retrying: one line on stderr per retry."""
    def on_retry(attempt: int, error: BaseException, sleep_s: float, elapsed_s: float) -> None:
        message = " ".join(str(error).split())  # one line, whatever the store said
        print(f"omega: {what}: {message}; retry {attempt} in {sleep_s:.1f} s "
              f"({elapsed_s:.1f} s of --retry-for {retry_for:g})", file=sys.stderr, flush=True)
    return on_retry


def run_submit(args) -> int:
    """Validate every file first; then submit file by file (each all-or-nothing)."""
    from tools.cli import UsageError

    retry_for = _retry_for(args)
    try:
        batches = [(path, load_jobs(path)) for path in args.files]
    except JobSpecError as exc:
        raise UsageError(f"{exc} (nothing submitted)") from None
    keys = cell_keys(args)
    with open_store(args) as store:
        for path, jobs in batches:
            try:
                revision = submit_retrying(store, keys, jobs, time.time(), retry_for,
                                           _retry_logger(f"submit {path}", retry_for))
            except StoreError as exc:
                gave_up = f" (gave up after --retry-for {retry_for:g} s)" if transient(exc) else ""
                print(f"omega: {path}: {exc}{gave_up}", file=sys.stderr)
                return 1
            print(f"{path}: submitted {len(jobs)} job(s) to cell {keys.cell!r} at revision {revision}")
    return 0


def run_kill(args) -> int:
    keys = cell_keys(args)
    with open_store(args) as store:
        try:
            revision = kill_job(store, keys, args.job)
        except (JobNotFound, StoreError) as exc:
            print(f"omega: kill {args.job}: {exc}", file=sys.stderr)
            return 1
        except UnreadableRecord as exc:
            from tools.cli import UsageError
            raise UsageError(f"kill {args.job}: {exc}") from None
    print(f"killed job {args.job!r} at revision {revision}")
    return 0


def _mix(args) -> WorkloadMix:
    from tools.cli import UsageError

    if not 0 <= args.service_fraction <= 1:
        raise UsageError(f"--service-fraction must be in [0, 1], got {args.service_fraction}")
    if not (0 <= args.rate < math.inf and 0 <= args.duration < math.inf):
        raise UsageError(f"--rate and --duration must be finite and >= 0, got {args.rate:g} and {args.duration:g}")
    if args.rate * args.duration > MAX_GENERATED_JOBS:
        raise UsageError(f"--rate x --duration asks for {args.rate * args.duration:g} jobs; at most "
                         f"{MAX_GENERATED_JOBS} may be generated")
    try:
        routes = parse_routes(args.route) if args.route else ()
    except ValueError as exc:
        raise UsageError(f"--route: {exc}") from None
    return WorkloadMix(batch_rate=args.rate * (1 - args.service_fraction),
                       service_rate=args.rate * args.service_fraction, routes=routes)


def run_generate(args) -> int:
    if args.prefix is not None and "/" in args.prefix:
        from tools.cli import UsageError
        raise UsageError(f'--prefix may not contain "/" (it starts job ids), got {args.prefix!r}')
    retry_for = _retry_for(args)
    arrivals = generate(args.seed, args.duration, _mix(args), args.prefix)
    if args.out:
        jobs = [job for _, job in arrivals]
        try:
            dump_jobs(jobs, args.out)
        except OSError as exc:
            from tools.cli import UsageError
            raise UsageError(f"--out {args.out}: {exc.strerror or exc}") from None
        print(f"wrote {len(jobs)} job(s) to {args.out}")
        return 0
    return _submit_live(args, arrivals, retry_for)


def _submit_live(args, arrivals, retry_for: float) -> int:
    """Submit each job at its arrival time (jobs due together go in one txn). A submission
    retries through an outage (up to ``retry_for`` s); arrivals due meanwhile are submitted
    together after it. Exit 1 when one gives up, naming how many jobs were left unsubmitted."""
    keys = cell_keys(args)
    on_retry = _retry_logger("generate", retry_for)
    start = time.monotonic()
    submitted = 0
    with open_store(args) as store:
        pending: list = []
        try:
            for offset, job in arrivals:
                wait = start + offset - time.monotonic()
                if wait > 0 and pending:
                    submitted += _submit_now(store, keys, pending, retry_for, on_retry)
                    pending = []
                if wait > 0:
                    time.sleep(wait)
                pending.append(job)
            if pending:
                submitted += _submit_now(store, keys, pending, retry_for, on_retry)
        except StoreError as exc:
            print(f"omega: generate: {exc}; gave up after --retry-for {retry_for:g} s with {submitted} job(s) "
                  f"submitted; {len(pending)} due job(s) and any later arrivals not submitted",
                  file=sys.stderr)
            return 1
    print(f"submitted {submitted} job(s) to cell {keys.cell!r}")
    return 0


def _submit_now(store, keys, jobs, retry_for: float, on_retry) -> int:
    try:
        submit_retrying(store, keys, jobs, time.time(), retry_for, on_retry)
    except JobsExist as exc:
        print(f"omega: skipped: {exc}", file=sys.stderr)
        return 0
    return len(jobs)
