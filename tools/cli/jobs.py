"""``omega job submit|kill`` (also spelt ``omega submit``, ``omega kill``) and ``omega
generate``: put work into a cell; ``omega job list|status|init``: see it, and start a job file.

``submit`` warns (stderr, one line per job) of a job no machine of the cell could hold even
empty, and keeps it. Exit status: 0 done; 1 refused by the cell (id exists, no such job or
cell, store unreachable for longer than --retry-for); 2 bad flags; 65 an invalid job file or a
stored record this version cannot read.

``submit`` and ``generate --submit`` retry through store outages (an etcd restart, a lost
leader) for up to ``--retry-for`` seconds per submission, one line on stderr per retry; a
retry never submits a job twice (``cellstate.submit.submit_retrying``).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time

from tools.cli.common import (
    add_output_arg, add_store_args, cell_keys, connect, job_arg, output_json, printable, readable_file,
    store_failure,
)

# The job-spec, submit and workload modules are imported where they are used (a light parser).
DEFAULT_RETRY_FOR_S = 60.0  # cellstate.submit.DEFAULT_RETRY_FOR_S (a test checks they agree)

MAX_GENERATED_JOBS = 10_000_000  # expected arrivals of one `omega generate`


def register(sub) -> None:
    _add_submit(sub.add_parser("submit", help="submit the jobs of TOML/JSON job files (= job submit)"))
    _add_kill(sub.add_parser("kill", help="kill a job: release its tasks' resources (= job kill)"))

    gen = sub.add_parser("generate", help="generate a seeded batch/service workload")
    gen.add_argument("--seed", type=int, default=1)
    gen.add_argument("--duration", type=float, default=60.0, help="seconds of arrivals (default 60)")
    gen.add_argument("--rate", type=float, default=1.0, help="jobs per second, all kinds (default 1)")
    gen.add_argument("--gpu", action="store_true",
                     help="batch tasks ask GPUs (shares and whole GPUs, tools.workload.GPU_BATCH_SHAPES)")
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

    job = sub.add_parser("job", help="list jobs, show one, or write an example job file")
    job_sub = job.add_subparsers(dest="job_command", required=True, metavar="ACTION")
    listing = job_sub.add_parser("list", help="the cell's jobs: kind, class, task states, age")
    listing.add_argument("--state", choices=("all", "pending", "running", "done"), default="all",
                         help="only jobs with a pending task, with a live task, or with every task ended")
    add_output_arg(listing, json_alias=False)
    add_store_args(listing)
    listing.set_defaults(func=run_job_list)
    status = job_sub.add_parser("status", help="one job: its spec, its tasks' states and machines")
    status.add_argument("job", metavar="JOB")
    add_output_arg(status, json_alias=False)
    add_store_args(status)
    status.set_defaults(func=run_job_status)
    _add_submit(job_sub.add_parser("submit", help="submit the jobs of TOML/JSON job files"))
    _add_kill(job_sub.add_parser("kill", help="kill a job: release its tasks' resources"))
    init = job_sub.add_parser("init", help="write a commented example job file (default jobs.toml)")
    init.add_argument("file", nargs="?", default="jobs.toml", metavar="FILE")
    init.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    init.set_defaults(func=run_job_init)


def _add_submit(submit) -> None:
    """``job submit`` and its older spelling, top-level ``submit``."""
    submit.add_argument("files", nargs="+", metavar="FILE")
    _add_retry_for(submit)
    add_store_args(submit)
    submit.set_defaults(func=run_submit)


def _add_kill(kill) -> None:
    """``job kill`` and its older spelling, top-level ``kill``."""
    kill.add_argument("job", metavar="JOB")
    add_store_args(kill)
    kill.set_defaults(func=run_kill)


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
    """``on_retry`` for submit_retrying: one line on stderr per retry (the store's own words; the
    line after the last retry says what to do)."""
    def on_retry(attempt: int, error: BaseException, sleep_s: float, elapsed_s: float) -> None:
        message = " ".join(str(error).split())  # one line, whatever the store said
        print(f"omega: {what}: {message}; retry {attempt} in {sleep_s:.1f} s "
              f"({elapsed_s:.1f} s of --retry-for {retry_for:g})", file=sys.stderr, flush=True)
    return on_retry


def run_submit(args) -> int:
    """Validate every file first; then submit file by file (each all-or-nothing)."""
    from cellstate.jobspec import JobSpecError, load_jobs
    from cellstate.store import StoreError
    from cellstate.submit import submit_retrying, transient
    from tools.cli import InputError

    retry_for = _retry_for(args)
    try:
        batches = [(path, load_jobs(readable_file(path))) for path in args.files]
    except JobSpecError as exc:
        raise InputError(f"{exc} (nothing submitted)") from None
    keys = cell_keys(args)
    with connect(args, retry_for=retry_for, on_retry=_retry_logger("submit", retry_for)) as store:
        for path, jobs in batches:
            try:
                revision = submit_retrying(store, keys, jobs, time.time(), retry_for,
                                           _retry_logger(f"submit {path}", retry_for))
            except StoreError as exc:
                gave_up = f" (gave up after --retry-for {retry_for:g} s)" if transient(exc) else ""
                print(f"omega: {path}: {store_failure(exc, args)}{gave_up}", file=sys.stderr)
                return 1
            print(f"{path}: submitted {len(jobs)} job(s) to cell {keys.cell!r} at revision {revision}")
        _warn_unplaceable(store, keys, [job for _, jobs in batches for job in jobs])
    return 0


def _warn_unplaceable(store, keys, jobs) -> None:
    """One warning line per submitted job no machine of the cell could hold even empty (a GPU
    ask larger than any machine's, a model no machine has…): it is kept, pending, as the cell
    may gain such machines, but said at once rather than found waiting later."""
    from cellstate.codec.fields import CodecError
    from cellstate.codec.records import decode_machine
    from cellstate.store import StoreError
    from tools.explain import fits_no_machine

    try:
        machines = [decode_machine(kv.key, kv.value) for kv in store.range(keys.kind_prefix("machines")).kvs]
    except (StoreError, CodecError) as exc:
        print(f"warning: could not read the cell's machines to check the jobs fit one: {exc}", file=sys.stderr)
        return
    verdicts: dict = {}  # per distinct ask: a file of many like jobs checks the machines once
    for job in jobs:
        ask = (job.request, job.constraints)
        if ask not in verdicts:
            verdicts[ask] = fits_no_machine(job, machines)
        if why := verdicts[ask]:
            print(f"warning: job {printable(job.id)!r}: no machine of cell {keys.cell!r} can hold a task: {why}; "
                  f"it stays pending until one can (omega explain {printable(job.id)})", file=sys.stderr)


def run_kill(args) -> int:
    from cellstate.store import StoreError
    from cellstate.submit import JobNotFound, UnreadableRecord, kill_job

    job_arg(args.job)
    keys = cell_keys(args)
    with connect(args) as store:
        try:
            revision = kill_job(store, keys, args.job)
        except JobNotFound as exc:
            print(f"omega: kill {args.job}: {exc}", file=sys.stderr)
            return 1
        except StoreError as exc:
            print(f"omega: kill {args.job}: {store_failure(exc, args)}", file=sys.stderr)
            return 1
        except UnreadableRecord as exc:
            from tools.cli import InputError
            raise InputError(f"kill {args.job}: {exc}") from None
    print(f"killed job {args.job!r} at revision {revision}")
    return 0


def _mix(args):
    from tools.cli import UsageError
    from tools.workload import GPU_BATCH_SHAPES, WorkloadMix, parse_routes

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
    gpu = {"batch_shapes": GPU_BATCH_SHAPES, "batch_tasks_median": 2.0, "batch_tasks_max": 64} if args.gpu else {}
    return WorkloadMix(batch_rate=args.rate * (1 - args.service_fraction),
                       service_rate=args.rate * args.service_fraction, routes=routes, **gpu)


def run_generate(args) -> int:
    if args.prefix is not None:
        from cellstate.jobspec import MAX_ID_LENGTH, job_id_problem
        from tools.cli import UsageError

        problem = job_id_problem(args.prefix or "x") if len(args.prefix) < MAX_ID_LENGTH - 16 else (
            f"must be shorter than {MAX_ID_LENGTH - 16} characters")
        if problem:
            raise UsageError(f"--prefix starts job ids: it {problem}, got {args.prefix!r}")
    from cellstate.jobspec import dump_jobs
    from tools.workload import generate

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
    from cellstate.store import StoreError

    keys = cell_keys(args)
    on_retry = _retry_logger("generate", retry_for)
    submitted = 0
    with connect(args, retry_for=retry_for, on_retry=on_retry) as store:
        start = time.monotonic()
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
            print(f"omega: generate: {store_failure(exc, args)}; gave up after --retry-for {retry_for:g} s with {submitted} job(s) "
                  f"submitted; {len(pending)} due job(s) and any later arrivals not submitted",
                  file=sys.stderr)
            return 1
    print(f"submitted {submitted} job(s) to cell {keys.cell!r}")
    return 0


def _submit_now(store, keys, jobs, retry_for: float, on_retry) -> int:
    from cellstate.submit import JobsExist, submit_retrying

    try:
        submit_retrying(store, keys, jobs, time.time(), retry_for, on_retry)
    except JobsExist as exc:
        print(f"omega: skipped: {exc}", file=sys.stderr)
        return 0
    return len(jobs)


# ------------------------------------------------------------------------ job list/status/init


def _task_counts(record) -> dict[str, int]:
    """Tasks per state name (pending, placed, running, finished, failed, killed), non-zero only."""
    from collections import Counter

    from cellstate.model import TaskState

    counts = Counter(record.tasks)
    return {state.name.lower(): counts[state.value] for state in TaskState if counts[state.value]}


def _job_row(record, now: float) -> dict:
    job = record.job
    return {"id": job.id, "kind": job.kind.value, "class": job.scheduler_class, "tasks": job.tasks,
            "states": _task_counts(record), "priority": job.priority, "owner": job.owner,
            "killed": record.killed, "age_s": round(max(0.0, now - record.submitted_at), 1),
            "reason": record.reason}


def _state_of(row: dict) -> str:
    states = row["states"]
    if states.get("pending") and not row["killed"]:
        return "pending"
    if states.get("placed") or states.get("running"):
        return "running"
    return "done"


def _read_jobs(store, keys) -> tuple[int, list, list[str]]:
    """(revision, job records, keys of records that do not decode)."""
    from cellstate.codec.records import decode_job_record
    from cellstate.codec.fields import CodecError

    result = store.range(keys.kind_prefix("jobs"))
    records, bad = [], []
    for kv in result.kvs:
        try:
            records.append(decode_job_record(kv.key, kv.value))
        except CodecError:
            bad.append(kv.key)
    return result.revision, records, bad


def run_job_list(args) -> int:
    """The cell's jobs, oldest first: a table, or with ``-o json`` a JSON list."""
    from cellstate.store import StoreError

    keys = cell_keys(args)
    with connect(args) as store:
        try:
            revision, records, bad = _read_jobs(store, keys)
        except StoreError as exc:
            print(f"omega: job list: {store_failure(exc, args)}", file=sys.stderr)
            return 1
    now = time.time()
    rows = [_job_row(r, now) for r in sorted(records, key=lambda r: (r.submitted_at, r.id))]
    rows = [row for row in rows if args.state == "all" or _state_of(row) == args.state]
    if bad:
        print(f"omega: job list: left out {len(bad)} record(s) that do not decode (first: {bad[0]})",
              file=sys.stderr)
    if output_json(args):
        print(json.dumps({"cell": keys.cell, "revision": revision, "jobs": rows}, indent=1))
        return 0
    print(f"{'JOB':24} {'KIND':8} {'CLASS':10} {'TASKS':>6}  {'STATES':30} {'AGE':>8}")
    for row in rows:
        states = " ".join(f"{n} {name}" for name, n in row["states"].items()) + (" (killed)" if row["killed"] else "")
        print(f"{printable(row['id'])[:24]:24} {row['kind']:8} {printable(row['class'])[:10]:10} {row['tasks']:>6}  "
              f"{states[:30]:30} "
              f"{_age(row['age_s']):>8}")
    print(f"{len(rows)} job(s) in cell {keys.cell!r} at revision {revision}")
    return 0


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def run_job_status(args) -> int:
    """One job: spec, task states, and each placed task's machine (``-o json``: as JSON)."""
    from cellstate.codec.records import decode_alloc, decode_job_record
    from cellstate.codec.fields import CodecError
    from cellstate.devices import visible_devices
    from cellstate.store import StoreError
    from schedulers.plugins.constraints import describe
    from tools.cli import InputError
    from tools.explain import request_text

    job_arg(args.job)
    keys = cell_keys(args)
    with connect(args) as store:
        try:
            kv = store.get(keys.job(args.job))
            allocs = store.range(keys.job_allocs(args.job)).kvs if kv is not None else ()
        except StoreError as exc:
            print(f"omega: job status: {store_failure(exc, args)}", file=sys.stderr)
            return 1
    if kv is None:
        print(f"omega: job status: no job {args.job!r} in cell {keys.cell!r} (omega job list shows its jobs)",
              file=sys.stderr)
        return 1
    try:
        record = decode_job_record(kv.key, kv.value)
        placed = sorted((decode_alloc(a.key, a.value) for a in allocs), key=lambda a: a.task_index)
    except CodecError as exc:
        raise InputError(f"job status {args.job}: cannot read {exc}") from None
    row = _job_row(record, time.time())
    job = record.job
    ask = _gpu_ask(job)
    row.update({"cpu_cores": job.request.cpu / 1000, "memory_mib": job.request.memory, "gang": job.gang,
                "gpu": {"count": ask.count, "milli": ask.milli} if ask else None,
                "constraints": [describe(c) for c in job.constraints],
                "submitted_at": record.submitted_at, "first_attempt_at": record.first_attempt_at,
                "placed_at": record.placed_at,
                "task_states": record.tasks,
                "machines": {str(a.task_index): a.machine_id for a in placed},
                "devices": {str(a.task_index): visible_devices(a.resources) for a in placed if ask}})
    if output_json(args):
        print(json.dumps(row, indent=1))
        return 0
    states = ", ".join(f"{n} {name}" for name, n in row["states"].items())
    print(f"job {job.id!r} ({job.kind.value}, class {job.scheduler_class}) in cell {keys.cell!r}: "
          f"{job.tasks} task(s): {states}{' (killed)' if record.killed else ''}")
    print(f"  request per task: {request_text(job.request)}; priority "
          f"{job.priority}{', owner ' + job.owner if job.owner else ''}{', gang' if job.gang else ''}")
    if row["constraints"]:
        print(f"  constraints: {', '.join(row['constraints'])}")
    print(f"  submitted {_age(row['age_s'])} ago" + (f"; waiting: {record.reason}" if record.reason else ""))
    for alloc in placed[:20]:
        devices = f", GPU devices {row['devices'][str(alloc.task_index)] or '-'}" if ask else ""
        print(f"  task {alloc.task_index}: {alloc.machine_id}{' (running)' if alloc.running else ''}{devices}")
    if len(placed) > 20:
        print(f"  ... and {len(placed) - 20} more placed task(s) (-o json lists all)")
    return 0


def _gpu_ask(job):
    """The job's GPU ask per task (``cellstate.devices.GpuAsk``), None when it asks none or the
    stored amount is no valid ask (the request line then shows the raw amount)."""
    from cellstate.devices import DeviceError, gpu_ask
    try:
        return gpu_ask(job.request)
    except DeviceError:
        return None


EXAMPLE_JOBS = """\
# Jobs for `omega submit FILE` (docs: cellstate/jobspec.py). One [[job]] table per job; the
# whole file is validated first and submitted all or nothing.

[[job]]
id = "hello-batch"        # unique in the cell; no "/"
kind = "batch"            # batch | service
tasks = 4                 # identical tasks, each asking for the resources below
cpu = 0.5                 # cores per task
memory = "512Mi"          # MiB as a number, or with a unit: Ki, Mi, Gi, Ti
duration_s = 60           # batch tasks end after this long (absent: run until killed)
priority = 0              # higher first; higher may preempt under the Borg-style scheduler
owner = "alice"           # fair and drf queue orders share between owners
# GPUs (a cell with GPU machines, docs/GPU.md): whole GPUs, or a share of one, on some models
# gpu = 2                 # whole GPUs per task
# gpu_milli = 300         # or a share of one GPU, 1..1000 milli (with gpu absent or 1)
# gpu_models = ["V100M32", "A100"]  # GPU models the task may run on

[[job]]
id = "hello-web"
kind = "service"
tasks = 3
cpu = 2
memory = "4Gi"
disk = "10Gi"             # optional, like memory
different_machine = true  # at most one task per machine
constraints = [
  { attribute = "zone", op = "in", values = ["zone-a", "zone-b"] },
]
# scheduler = "borg"      # the scheduler class that serves it (default: its kind's class)
# gang = true             # all tasks placed together or none
"""


def run_job_init(args) -> int:
    """Write EXAMPLE_JOBS to FILE (refusing to overwrite without --force)."""
    from tools.cli import UsageError

    if os.path.exists(args.file) and not args.force:
        raise UsageError(f"{args.file} exists (--force overwrites it)")
    try:
        with open(args.file, "w") as f:
            f.write(EXAMPLE_JOBS)
    except OSError as exc:
        raise UsageError(f"{args.file}: {exc.strerror or exc}") from None
    print(f"wrote {args.file}: 2 example jobs; submit with: omega submit {args.file}")
    return 0
