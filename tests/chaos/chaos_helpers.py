"""Shared parts of the chaos tests: ``omega`` processes that can be SIGKILLed and restarted, a
cell under a seeded workload, a client that submits through outages, bounded waits for the
schedulers to converge and the no-loss checks.

Every loop here is bounded in time; every process started is stopped by its owner
(``Crew.stop_all`` in a ``finally``).
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from cellstate.cellspec import CellSpec, init_cell
from cellstate.check import check_cell
from cellstate.codec.records import decode_alloc, decode_job_record, decode_machine
from cellstate.committer import StoreCommitter
from cellstate.etcd.cluster import EtcdCluster
from cellstate.etcd.options import EtcdOptions
from cellstate.etcd.store import EtcdStore
from cellstate.keys import CellKeys
from cellstate.model import Job, JobRecord, MachineState
from cellstate.replica.view import ReplicaView
from cellstate.stats_sink import LeasedStatsSink
from cellstate.store import StoreError
from cellstate.submit import JobsExist, submit_jobs
from omega.runtime import RuntimeOptions, SchedulerProcess
from schedulers.chains import make_scheduler, retry_policy_for
from tools.workload import WorkloadMix, generate

ROOT = Path(__file__).resolve().parents[2]

# ~1300 tasks of 0.25–4 cores on 200 machines of 8–32 cores: about a fifth of the cell.
CHAOS_MIX = WorkloadMix(batch_rate=4.0, service_rate=1.0, batch_tasks_median=6, batch_tasks_sigma=0.8,
                        batch_tasks_max=40, service_tasks_median=3, service_tasks_max=12,
                        batch_duration_median_s=300.0)


# ----------------------------------------------------------------------------- etcd


def own_etcd(size: int = 1) -> EtcdCluster:
    """A started etcd cluster of ``size`` members owned by one test (it may kill it)."""
    return EtcdCluster(size, options=EtcdOptions(unsafe_no_fsync=True)).start()


def store_on(cluster: EtcdCluster, endpoints: list[str] | None = None, timeout: float = 2.0) -> EtcdStore:
    """An EtcdStore on ``endpoints`` (default: every member) with the cluster's limits."""
    return EtcdStore(endpoints or cluster.endpoints, max_txn_ops=cluster.options.max_txn_ops,
                     max_request_bytes=cluster.options.max_request_bytes, timeout=timeout)


def retrying(call, deadline: float, what: str, pause: float = 0.1):
    """``call()`` until it does not raise StoreError (an outage), up to ``deadline`` (monotonic)."""
    while True:
        try:
            return call()
        except StoreError as exc:
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} still failing at the deadline: {exc}") from exc
            time.sleep(pause)


# ----------------------------------------------------------------------------- processes


class OmegaProc:
    """One ``omega …`` subprocess (a scheduler or the agents); output goes to log files so
    nothing blocks on a pipe. ``start`` again after ``kill`` starts a new incarnation."""

    def __init__(self, name: str, argv: list[str], log_dir: Path, ready_prefix: str):
        self.name = name
        self.argv = argv
        self.log_dir = log_dir
        self.ready_prefix = ready_prefix
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def _log(self, stream: str, start: int | None = None) -> Path:
        return self.log_dir / f"{self.name}.{start or self.starts}.{stream}"

    def start(self) -> None:
        if self.alive():
            raise RuntimeError(f"{self.name} is already running")
        self.starts += 1
        with open(self._log("out"), "w") as out, open(self._log("err"), "w") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "tools.cli", "-v", *self.argv], cwd=ROOT,
                                         stdout=out, stderr=err, stdin=subprocess.DEVNULL)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def ready(self) -> bool:
        """True once this incarnation printed its serving line; AssertionError if it died."""
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited with {self.proc.returncode}:\n{self.tail()}")
        text = self._log("out").read_text(errors="replace") if self.starts else ""
        return any(line.startswith(self.ready_prefix) for line in text.splitlines())

    def kill(self) -> None:
        """SIGKILL this incarnation (a crash) and reap it."""
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(10)

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait; the exit status (SIGKILL and AssertionError after ``timeout``)."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(f"{self.name} did not stop within {timeout} s of SIGTERM:\n{self.tail()}") from None

    def tail(self, lines: int = 15) -> str:
        if not self.starts:
            return "(never started)"
        parts = []
        for stream in ("out", "err"):
            text = self._log(stream).read_text(errors="replace").splitlines()
            parts.append(f"--- {self.name}.{self.starts}.{stream}\n" + "\n".join(text[-lines:]))
        return "\n".join(parts)

    def output(self) -> str:
        """stdout and stderr of every incarnation."""
        return "\n".join(self._log(s, n).read_text(errors="replace")
                         for n in range(1, self.starts + 1) for s in ("out", "err"))


def scheduler_proc(kind: str, name: str, endpoints: list[str], cell: str, log_dir: Path, seed: int = 0,
                   *extra: str) -> OmegaProc:
    argv = ["scheduler", "run", "--kind", kind, "--name", name, "--seed", str(seed),
            "--endpoints", ",".join(endpoints), "--cell", cell, *extra]
    return OmegaProc(name, argv, log_dir, "scheduler ")


def agents_proc(endpoints: list[str], cell: str, log_dir: Path, time_scale: float = 60.0) -> OmegaProc:
    argv = ["agents", "run", "--name", "chaos", "--time-scale", str(time_scale),
            "--endpoints", ",".join(endpoints), "--cell", cell]
    return OmegaProc("agents", argv, log_dir, "agents ")


class ThreadScheduler:
    """A ``SchedulerProcess`` wired as ``omega scheduler run`` wires it (store errors are
    transient), run in a thread of the test so its replica can be inspected afterwards."""

    def __init__(self, store: EtcdStore, keys: CellKeys, kind: str, name: str, seed: int = 0, **replica_options):
        import anyio

        self.view = ReplicaView(store, keys, **replica_options)
        self.process = SchedulerProcess(make_scheduler(kind, name, seed), self.view, StoreCommitter(store, keys),
                                        LeasedStatsSink(store, keys, name), retry=retry_policy_for(kind),
                                        options=RuntimeOptions(transient_errors=(StoreError,)))
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(anyio,), name=f"scheduler-{name}", daemon=True)
        self.thread.start()

    def _run(self, anyio) -> None:
        try:
            anyio.run(self.process.run, False)
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def alive(self) -> bool:
        return self.thread.is_alive()

    def stop(self, timeout: float = 20.0) -> None:
        """Stop and join; AssertionError if the loop died or does not stop."""
        self.process.stop()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"{self.process.name} did not stop within {timeout} s"
        assert self.error is None, f"{self.process.name} died: {self.error!r}"


@dataclass
class Crew:
    """The processes of one test; ``stop_all`` ends every one (SIGTERM, then SIGKILL)."""

    procs: list[OmegaProc] = field(default_factory=list)

    def add(self, proc: OmegaProc) -> OmegaProc:
        self.procs.append(proc)
        proc.start()
        return proc

    def wait_ready(self, timeout: float = 30.0) -> None:
        wait_for(lambda: all(p.ready() for p in self.procs), timeout, "every process serving")

    def assert_alive(self) -> None:
        dead = [p for p in self.procs if not p.alive()]
        assert not dead, "exited during the run:\n" + "\n".join(p.tail() for p in dead)

    def stop_all(self) -> dict[str, int]:
        """Stop every process; their exit statuses by name (a kill after a timeout counts as -9)."""
        statuses = {}
        for proc in self.procs:
            try:
                statuses[proc.name] = proc.stop()
            except AssertionError:
                statuses[proc.name] = -9
        return statuses


# ----------------------------------------------------------------------------- cell and load


def chaos_cell(store: EtcdStore, keys: CellKeys, machines: int = 200, seed: int = 0) -> None:
    init_cell(store, keys, CellSpec(machines=machines, seed=seed))


def chaos_workload(seed: int, duration_s: float = 40.0, mix: WorkloadMix = CHAOS_MIX) -> list[tuple[float, Job]]:
    """(arrival offset, job) of a seeded workload; ids are unique per seed."""
    return list(generate(seed, duration_s, mix, id_prefix=f"c{seed}-"))


def submit_through_outages(store: EtcdStore, keys: CellKeys, jobs: list[Job], deadline: float) -> None:
    """Submit ``jobs`` in one txn, retrying through outages. A retry that finds exactly these
    ids present means the earlier attempt committed (its answer was lost): success."""
    ids = {job.id for job in jobs}
    while True:
        try:
            submit_jobs(store, keys, jobs, time.time())
            return
        except JobsExist as exc:
            if set(exc.job_ids) == ids:
                return
            raise
        except StoreError as exc:
            if time.monotonic() > deadline:
                raise AssertionError(f"could not submit {len(jobs)} jobs through the outage: {exc}") from exc
            time.sleep(0.1)


class Trickle:
    """Submits a workload's jobs as their (scaled) arrival times pass; ``due`` is called from
    the test's chaos loop, so no extra thread runs."""

    def __init__(self, store: EtcdStore, keys: CellKeys, arrivals: list[tuple[float, Job]], scale: float = 1.0):
        self.store, self.keys = store, keys
        self.arrivals = [(t * scale, job) for t, job in arrivals]
        self.started = time.monotonic()
        self.sent = 0

    def due(self, deadline: float) -> int:
        """Submit every job whose time has come; how many were submitted."""
        elapsed = time.monotonic() - self.started
        batch = []
        while self.sent + len(batch) < len(self.arrivals) and self.arrivals[self.sent + len(batch)][0] <= elapsed:
            batch.append(self.arrivals[self.sent + len(batch)][1])
        if batch:
            submit_through_outages(self.store, self.keys, batch, deadline)
            self.sent += len(batch)
        return len(batch)

    def one_now(self, deadline: float) -> bool:
        """Submit the next job at once, due or not; False when none is left."""
        if self.done:
            return False
        submit_through_outages(self.store, self.keys, [self.arrivals[self.sent][1]], deadline)
        self.sent += 1
        return True

    @property
    def done(self) -> bool:
        return self.sent == len(self.arrivals)

    def flush(self, deadline: float) -> None:
        rest = [job for _, job in self.arrivals[self.sent:]]
        if rest:
            submit_through_outages(self.store, self.keys, rest, deadline)
            self.sent = len(self.arrivals)


# ----------------------------------------------------------------------------- convergence


def wait_for(predicate, timeout: float, what: str, interval: float = 0.1):
    """Poll ``predicate`` until truthy (its value); AssertionError naming ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def job_records(store: EtcdStore, keys: CellKeys) -> dict[str, JobRecord]:
    """The effective job records at one revision (placements that wrote no record applied:
    ``JobRecord.with_allocs``)."""
    jobs = store.range(keys.kind_prefix("jobs"))
    allocs: dict[str, list] = {}
    for kv in store.range(keys.kind_prefix("allocs"), jobs.revision).kvs:
        alloc = decode_alloc(kv.key, kv.value)
        allocs.setdefault(alloc.job_id, []).append(alloc)
    records = (decode_job_record(kv.key, kv.value) for kv in jobs.kvs)
    return {record.id: record.with_allocs(allocs.get(record.id, ())) for record in records}


def pending_that_fit(store: EtcdStore, keys: CellKeys) -> list[str]:
    """Ids of jobs with a pending task that some up machine has the free resources for."""
    machines = [decode_machine(kv.key, kv.value) for kv in store.range(keys.kind_prefix("machines")).kvs]
    free = [m.free for m in machines if m.state is MachineState.UP]
    return sorted(record.id for record in job_records(store, keys).values()
                  if not record.killed and "p" in record.tasks
                  and any(record.job.request.fits_in(room) for room in free))


def wait_converged(store: EtcdStore, keys: CellKeys, timeout: float) -> float:
    """Seconds until no pending task fits anywhere; AssertionError naming the jobs on timeout."""
    started = time.monotonic()
    deadline = started + timeout
    while True:
        try:
            left = pending_that_fit(store, keys)
        except StoreError:
            left = ["(store unavailable)"]
        if not left:
            return time.monotonic() - started
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(left)} job(s) still have pending tasks that fit after {timeout} s: "
                                 f"{left[:10]}")
        time.sleep(0.25)


def assert_nothing_lost(store: EtcdStore, keys: CellKeys, submitted: list[Job]) -> dict[str, JobRecord]:
    """The cell passes ``check_cell``; every submitted job is there with its spec and one state
    per task; returns the records."""
    report = check_cell(store, keys)
    assert report.ok, f"{len(report.violations)} violation(s): {report.violations[:5]}"
    records = job_records(store, keys)
    missing = [job.id for job in submitted if job.id not in records]
    assert not missing, f"{len(missing)} submitted job(s) lost: {missing[:10]}"
    for job in submitted:
        record = records[job.id]
        assert record.job == job, f"job {job.id} changed its spec: {record.job} != {job}"
        assert len(record.tasks) == job.tasks, f"job {job.id}: {len(record.tasks)} task states for {job.tasks}"
    assert len(records) == len(submitted), f"{len(records) - len(submitted)} job(s) nobody submitted"
    return records


def task_counts(records: dict[str, JobRecord]) -> dict[str, int]:
    """How many tasks are in each state letter across ``records``."""
    counts: dict[str, int] = {}
    for record in records.values():
        for char in record.tasks:
            counts[char] = counts.get(char, 0) + 1
    return counts


def seeded(seed: int) -> random.Random:
    return random.Random(seed)
