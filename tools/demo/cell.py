"""``run_demo``: a whole live cell on one machine.

1. an embedded etcd (fsync on, a high ``--max-txn-ops``, revision-based auto-compaction keeping
   the last ``etcd_compaction_retention`` revisions and a ``etcd_quota_bytes`` backend quota),
   with TLS and etcd auth when ``secure`` (the users and passwords of ``omega cell up --secure``);
2. the cell's machines (``init_cell``, in-process);
3. as separate processes, each in its own process group, logging to ``RUN_DIR/NAME.log``:
   the hollow machine agents (time running ``time_scale`` times faster, so batch tasks end
   during the demo), the schedulers (``batch-0``…, ``service-0``…, ``borg-0``…), and, once
   every scheduler has published its stats, the workload generator;
4. in the foreground the live conflict monitor (or, with ``monitor=False``, a status line
   every few seconds), until Ctrl-C, SIGTERM, SIGHUP, ``duration`` seconds, or a child that fails.

Then it stops the generator, the schedulers (reading their stats first; they print their
final stats on exit), the agents and etcd, in that order — SIGTERM to each process group,
SIGKILL for stragglers, also on errors — and returns a ``DemoSummary`` with the invariant
check of the cell.
"""

from __future__ import annotations

import operator
import shlex
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TextIO

from tenacity import Retrying, retry_if_result, stop_after_delay, wait_fixed

from cellstate.cellspec import DEMO_GPU_SHAPES, CellSpec, build_machines, gpu_mix, init_cell
from cellstate.check import check_cell
from cellstate.etcd.cluster import EtcdCluster
from cellstate.etcd.options import DEFAULT_COMPACTION_RETENTION, DEFAULT_QUOTA_BACKEND_BYTES, EtcdOptions
from cellstate.etcd.store import EtcdStore
from cellstate.keys import DEFAULT_ROOT, CellKeys
from cellstate.store import StoreError
from tools.demo.children import Child, Children
from tools.demo.signal_guard import SignalGuard
from tools.demo.summary import (
    DemoSummary, check_dict, describe_cell, final_stats, read_leased_stats, scheduler_summary,
)

MAX_TXN_OPS = 10_000         # the demo's etcd accepts big txns: a 1,000-task job commits in one
STATUS_EVERY_S = 5.0          # --no-monitor: a status line this often
SCHEDULERS_READY_S = 60.0     # how long the schedulers may take to publish their first stats
STOP_TIMEOUT_S = 15.0         # SIGTERM → SIGKILL
GENERATOR_FOREVER_S = 7 * 24 * 3600.0
METRICS_READY_S = 15.0        # how long a child may take to print where it serves metrics
GPU_BATCH_CHAIN = """# omega demo --gpu: the batch schedulers' chain (docs/GPU.md); a wider sample than the
# batch default (k 2 of 16): fragmentation-aware choices need candidates to choose from
k = 32
sample_size = 128
[[filters]]
name = "machine_state"
[[filters]]
name = "different_machine"
[[filters]]
name = "max_per_machine"
[[filters]]
name = "resources_fit"
[[filters]]
name = "constraints"
[[scorers]]
name = "fgd"
"""
METRICS_LINE = "metrics on "  # what ``scheduler run``/``agents run`` print: "metrics on URL"
OUTPUT_WIDTH = 80             # the demo's own lines wrap at this width


@dataclass(frozen=True, slots=True)
class DemoConfig:
    """What ``run_demo`` starts; see ``omega demo --help``."""

    machines: int = 1000
    zones: int = 3
    batch_schedulers: int = 2
    service_schedulers: int = 1
    borg_schedulers: int = 0
    solver_schedulers: int = 0
    rate: float = 40.0
    service_fraction: float = 0.1
    duration: float | None = None
    seed: int = 1
    monitor: bool = True
    conflict_mode: str = "resource-fit"
    time_scale: float = 30.0
    steal_after: float | None = None
    secure: bool = False
    cell: str = "demo"
    etcd_compaction_retention: int = DEFAULT_COMPACTION_RETENTION  # revisions etcd keeps; 0: no compaction
    etcd_quota_bytes: int = DEFAULT_QUOTA_BACKEND_BYTES
    gpu: bool = False
    """A GPU cell (``DEMO_GPU_SHAPES``), GPU batch tasks (``generate --gpu``) and batch
    schedulers that score by fragmentation (the ``fgd`` scorer, ``GPU_BATCH_CHAIN``)."""

    def __post_init__(self):
        checks = [("machines", self.machines >= 1), ("zones", 1 <= self.zones <= 26),
                  ("batch_schedulers", self.batch_schedulers >= 0),
                  ("service_schedulers", self.service_schedulers >= 0),
                  ("borg_schedulers", self.borg_schedulers >= 0),
                  ("solver_schedulers", self.solver_schedulers >= 0), ("rate", self.rate >= 0),
                  ("service_fraction", 0 <= self.service_fraction <= 1), ("time_scale", self.time_scale > 0),
                  ("steal_after", self.steal_after is None or self.steal_after >= 0),
                  ("duration", self.duration is None or self.duration > 0),
                  ("cell", bool(self.cell) and "/" not in self.cell),
                  ("etcd_compaction_retention", self.etcd_compaction_retention >= 0),
                  ("etcd_quota_bytes", self.etcd_quota_bytes >= 0)]
        for name, ok in checks:
            if not ok:
                raise ValueError(f"demo {name}: invalid value {getattr(self, name)!r}")
        if self.schedulers == 0:
            raise ValueError("demo: at least one scheduler is needed")

    @property
    def schedulers(self) -> int:
        return self.batch_schedulers + self.service_schedulers + self.borg_schedulers + self.solver_schedulers

    @property
    def routes(self) -> str:
        """The generator's ``--route``: jobs go to the borg and solver classes in proportion to
        their schedulers' share of all schedulers (the others to their kind's class), so
        every class has work and every job one class. Without a batch or a service scheduler,
        every job goes to the borg and solver classes (in proportion to their schedulers)."""
        generalists = self.borg_schedulers + self.solver_schedulers
        whole = generalists if not (self.batch_schedulers and self.service_schedulers) else self.schedulers
        shares = [(kind, n / whole) for kind, n in (("borg", self.borg_schedulers),
                                                    ("solver", self.solver_schedulers)) if n]
        return ",".join(f"{kind}={share:.4g}" for kind, share in shares)

    def scheduler_names(self) -> list[tuple[str, str]]:
        """(name, kind) of every scheduler: batch-0…, service-0…, borg-0…, solver-0…."""
        counts = (("batch", self.batch_schedulers), ("service", self.service_schedulers),
                  ("borg", self.borg_schedulers), ("solver", self.solver_schedulers))
        return [(f"{kind}-{i}", kind) for kind, n in counts for i in range(n)]


class Demo:
    """The running parts of one demo (see the module docstring)."""

    def __init__(self, config: DemoConfig, run_dir: Path, out: TextIO):
        self.config = config
        self.run_dir = run_dir
        self.out = out
        self.keys = CellKeys(cell=config.cell, root=DEFAULT_ROOT)
        self.cluster: EtcdCluster | None = None
        self.credentials: Path | None = None
        self.store: EtcdStore | None = None
        self.children = Children(run_dir)
        self.started_at = time.monotonic()
        self.stop_reason = ""
        self.metrics_tls = None  # (server, scraper) TlsFiles when secure
        self.metrics_urls: dict[str, str] = {}

    # -- start ----------------------------------------------------------------------------

    def start_etcd(self) -> None:
        limits = dict(max_txn_ops=MAX_TXN_OPS, auto_compaction_retention=self.config.etcd_compaction_retention,
                      quota_backend_bytes=self.config.etcd_quota_bytes)
        options = EtcdOptions(**limits)
        if self.config.secure:
            from cellstate.security import secure_options

            options = secure_options(self.run_dir / "pki", **limits)
        self.cluster = EtcdCluster(size=1, options=options).start()
        if self.config.secure:
            from cellstate.security import CREDENTIALS_DIR, secure_cells

            self.credentials = self.run_dir / CREDENTIALS_DIR
            secure_cells(self.cluster.endpoints, [self.keys.cell], self.credentials, self.keys.root,
                         self.cluster.ca_cert)
            from cellstate.pki import issue_metrics_certs

            self.metrics_tls = issue_metrics_certs(self.run_dir / "pki")
        self.store = self.open_store("scheduler")

    def open_store(self, component: str) -> EtcdStore:
        """A store on the demo's etcd, logged in as the cell's ``component`` user when secure."""
        auth = {}
        if self.credentials is not None:
            from cellstate.security import cell_user, credential_file, load_credentials

            user = cell_user(self.keys.cell, component)
            auth = load_credentials(credential_file(self.credentials, user)).store_kwargs(user)
        return EtcdStore(self.cluster.endpoints, max_txn_ops=MAX_TXN_OPS, **auth)

    def child_args(self, component: str) -> list[str]:
        """The store flags of a child connecting as the cell's ``component`` user."""
        args = ["--endpoints", ",".join(self.cluster.endpoints), "--cell", self.keys.cell,
                "--max-txn-ops", str(MAX_TXN_OPS)]
        if self.credentials is not None:
            from cellstate.security import cell_user, credential_file

            args += ["--credentials", str(credential_file(self.credentials, cell_user(self.keys.cell, component)))]
        return args

    def metrics_args(self) -> list[str]:
        """A child's metrics flags: a free loopback port, over TLS with the cell's CA when secure."""
        args = ["--metrics-addr", "127.0.0.1:0"]
        if self.metrics_tls is not None:
            server = self.metrics_tls[0]
            args += ["--metrics-cert", server.cert, "--metrics-key", server.key, "--metrics-client-ca", server.ca]
        return args

    def collect_metrics_urls(self) -> dict[str, str]:
        """Where each agents and scheduler child serves metrics (from its "metrics on URL" line)."""
        wanted = ["agents"] + [name for name, _ in self.config.scheduler_names()]

        def found() -> bool:
            for child in self.children.children:
                if child.name in wanted and child.name not in self.metrics_urls:
                    line = next((x for x in child.log_lines() if x.startswith(METRICS_LINE)), None)
                    if line is not None:
                        self.metrics_urls[child.name] = line[len(METRICS_LINE):].strip()
            if len(self.metrics_urls) == len(wanted):
                return True
            self.raise_if_failed()
            return False

        _poll(found, METRICS_READY_S, lambda: f"no metrics address from "
              f"{', '.join(sorted(set(wanted) - set(self.metrics_urls)))} after {METRICS_READY_S:g} s; "
              f"logs in {self.run_dir}")
        return self.metrics_urls

    def monitor_command(self) -> list[str]:
        """The ``omega monitor`` argv that attaches to this demo's cell."""
        args = self.child_args("monitor")  # the store flags a monitor child would get, less the txn limit
        at = args.index("--max-txn-ops")
        return ["omega", "monitor", *args[:at], *args[at + 2:]]

    def init_cell(self) -> tuple[int, str]:
        """Write the demo cell; its revision and its GPU mix (``cellspec.gpu_mix``, empty: none)."""
        c = self.config
        shapes = {"shapes": DEMO_GPU_SHAPES} if c.gpu else {}
        spec = CellSpec(machines=c.machines, zones=c.zones, seed=c.seed, **shapes)
        return init_cell(self.store, self.keys, spec), gpu_mix(build_machines(spec))

    def start_children(self) -> None:
        """Agents and schedulers; then, once every scheduler publishes, the generator."""
        c = self.config
        self.children.start("agents", ["agents", "run", "--time-scale", f"{c.time_scale:g}",
                                       "--seed", str(c.seed), *self.metrics_args(), *self.child_args("agent")])
        chain: tuple[str, ...] = ()
        if c.gpu:
            path = self.run_dir / "gpu-batch-chain.toml"
            path.write_text(GPU_BATCH_CHAIN)
            chain = ("--config", str(path))
        for i, (name, kind) in enumerate(c.scheduler_names()):
            self.children.start(name, ["scheduler", "run", "--kind", kind, "--name", name,
                                       *(chain if kind == "batch" else ()),
                                       "--seed", str(c.seed + i), "--conflict-mode", c.conflict_mode,
                                       *(("--steal-after", f"{c.steal_after:g}") if c.steal_after is not None else ()),
                                       *self.metrics_args(), *self.child_args("scheduler")])
        self.wait_for_schedulers()
        self.collect_metrics_urls()
        arrivals = c.duration if c.duration is not None else GENERATOR_FOREVER_S
        self.children.start("generator", ["generate", "--submit", "--rate", f"{c.rate:g}",
                                          "--duration", f"{arrivals:g}", "--seed", str(c.seed),
                                          "--service-fraction", f"{c.service_fraction:g}",
                                          *(("--gpu",) if c.gpu else ()),
                                          *(("--route", c.routes) if c.routes else ()),
                                          *self.child_args("scheduler")], expected_exit=True)
        self.started_at = time.monotonic()

    def wait_for_schedulers(self) -> None:
        """Until every scheduler's stats key exists; RuntimeError if one fails or it takes too long."""
        wanted = {name for name, _ in self.config.scheduler_names()}

        def serving() -> bool:
            if wanted <= set(read_leased_stats(self.store, self.keys)):
                return True
            self.raise_if_failed()
            return False

        _poll(serving, SCHEDULERS_READY_S,
              lambda: f"schedulers not serving after {SCHEDULERS_READY_S:g} s; logs in {self.run_dir}")

    def raise_if_failed(self) -> None:
        failed = self.children.failed()
        if failed:
            child = failed[0]
            raise RuntimeError(f"{child.name} exited with status {child.returncode}:\n{child.log_tail()}")

    # -- foreground -----------------------------------------------------------------------

    def foreground(self) -> None:
        """The monitor, or status lines, until the duration elapses (or an interrupt)."""
        c = self.config
        if c.monitor:
            from tools.monitor.live import run_monitor

            monitor_store = self.open_store("monitor")
            try:
                run_monitor(monitor_store, self.keys, duration=c.duration)
            finally:
                monitor_store.close()
            return
        next_status = time.monotonic() + STATUS_EVERY_S
        while c.duration is None or time.monotonic() - self.started_at < c.duration:
            time.sleep(0.1)
            if time.monotonic() >= next_status:
                self.print_status()
                next_status += STATUS_EVERY_S

    def print_status(self) -> None:
        try:
            stats = read_leased_stats(self.store, self.keys).values()
        except StoreError as exc:
            self.out.write(f"status: store error: {exc}\n")
            return
        placed = sum(s.tasks_placed for s in stats)
        say(self.out, f"t={time.monotonic() - self.started_at:5.1f}s  schedulers {len(stats)}  "
                      f"placements {placed}  txns {sum(s.txns for s in stats)}  "
                      f"conflicts {sum(s.conflicts for s in stats)}")

    # -- stop -------------------------------------------------------------------------------

    def stop_children(self) -> dict:
        """Generator, schedulers, agents, in that order; the schedulers' last leased stats."""
        try:
            leased = read_leased_stats(self.store, self.keys) if self.store else {}
        except StoreError:
            leased = {}
        for prefix in ("generator", "batch-", "service-", "borg-", "agents"):
            self.children.stop(self.children.named(prefix), STOP_TIMEOUT_S)
        self.children.stop_all(STOP_TIMEOUT_S)
        return leased

    def summarize(self, leased: dict) -> DemoSummary:
        """The summary of the stopped cell (children stopped, etcd still up)."""
        by_name = {c.name: c for c in self.children.children}
        schedulers = []
        for name, kind in self.config.scheduler_names():
            child: Child | None = by_name.get(name)
            final = final_stats(child.log_lines()) if child else None
            schedulers.append(scheduler_summary(name, kind, child.returncode if child else None, final,
                                                leased.get(name)))
        summary = DemoSummary(self.keys.cell, str(self.run_dir), time.monotonic() - self.started_at, schedulers,
                              children={c.name: {"pid": c.pid, "exit_code": c.returncode}
                                        for c in self.children.children},
                              failed_children=[c.name for c in self.children.failed()],
                              etcd_endpoints=list(self.cluster.endpoints) if self.cluster else [],
                              metrics=dict(self.metrics_urls))
        try:
            describe_cell(summary, self.store, self.keys, time.time())
            summary.check = check_dict(check_cell(self.store, self.keys))
        except (StoreError, ValueError) as exc:
            summary.check = {"ok": False, "error": str(exc), "violations": []}
        return summary

    def close(self) -> None:
        """Stop whatever still runs: children, the store connection, etcd (idempotent)."""
        self.children.stop_all(STOP_TIMEOUT_S)
        if self.store is not None:
            self.store.close()
            self.store = None
        if self.cluster is not None:
            self.cluster.stop()
            self.cluster = None


def run_demo(config: DemoConfig, out: TextIO | None = None, run_dir: str | None = None) -> DemoSummary:
    """Run the demo (see the module docstring) and return its summary. Children are stopped
    and etcd is stopped whatever happens; the logs stay in ``run_dir`` (default: a new temp dir)."""
    out = out or sys.stdout
    directory = Path(run_dir) if run_dir else Path(tempfile.mkdtemp(prefix="omega-demo-"))
    directory.mkdir(parents=True, exist_ok=True)
    demo = Demo(config, directory, out)
    with SignalGuard(demo) as guard:
        try:
            try:
                _start(demo)
                demo.foreground()
                demo.stop_reason = demo.stop_reason or "duration elapsed"
            except KeyboardInterrupt:
                demo.stop_reason = demo.stop_reason or "interrupted"
            finally:
                guard.shield()
            out.write(f"\nstopping ({demo.stop_reason}) …\n")
            out.flush()
            leased = demo.stop_children()
            return demo.summarize(leased)
        finally:
            demo.close()


def say(out: TextIO, text: str) -> None:
    """``text`` wrapped at ``OUTPUT_WIDTH`` (continuation lines indented), flushed."""
    out.write(textwrap.fill(text, OUTPUT_WIDTH, subsequent_indent="    ", break_on_hyphens=False,
                            break_long_words=False) + "\n")
    out.flush()


def _start(demo: Demo) -> None:
    out, c = demo.out, demo.config
    demo.start_etcd()
    say(out, f"etcd up ({'TLS + auth' if c.secure else 'plain'}): {','.join(demo.cluster.endpoints)}; "
             f"logs in {demo.run_dir}")
    revision, gpus = demo.init_cell()
    say(out, f"cell {c.cell!r}: {c.machines} machines in {c.zones} zones{'; ' + gpus if gpus else ''} "
             f"at revision {revision}")
    demo.start_children()
    names = ", ".join(name for name, _ in c.scheduler_names())
    say(out, f"running: agents (time x{c.time_scale:g}), generator at {c.rate:g} jobs/s, schedulers {names}")
    _print_endpoints(demo)


def _print_endpoints(demo: Demo) -> None:
    """Where the processes serve metrics, and how to attach a monitor to the cell."""
    out = demo.out
    urls = demo.metrics_urls
    scheme = next(iter(urls.values())).split("://")[0] if urls else "http"
    host = {url.split("://")[1].rsplit(":", 1)[0] for url in urls.values()}
    ports = ", ".join(f"{name} {url.rsplit(':', 1)[1].split('/')[0]}" for name, url in urls.items())
    say(out, f"metrics: {scheme}://{'|'.join(sorted(host))}:PORT/metrics, PORT of {ports}")
    if demo.metrics_tls is not None:
        scraper = demo.metrics_tls[1]
        say(out, f"  (TLS: scrape with --cacert {scraper.ca} --cert {scraper.cert} --key {scraper.key})")
    say_command(out, "attach a monitor: ", demo.monitor_command())


def say_command(out: TextIO, label: str, argv: list[str]) -> None:
    """``label`` and the shell command ``argv``, broken before a flag into lines of at most
    ``OUTPUT_WIDTH`` ending in `` \\`` (so it still pastes as one command)."""
    words = [shlex.quote(a) for a in argv]
    chunks: list[str] = []
    for word in words:  # a flag stays on the line of its value
        if chunks and not word.startswith("-") and chunks[-1].startswith("-") and " " not in chunks[-1]:
            chunks[-1] += " " + word
        else:
            chunks.append(word)
    lines = [label.rstrip() + " " + chunks[0] if label else chunks[0]]
    for chunk in chunks[1:]:
        if len(lines[-1]) + 1 + len(chunk) + 2 <= OUTPUT_WIDTH:
            lines[-1] += " " + chunk
        else:
            lines.append("    " + chunk)
    out.write(" \\\n".join(lines) + "\n")
    out.flush()


def _poll(ready: Callable[[], bool], timeout_s: float, timed_out: Callable[[], str]) -> None:
    """Call ``ready`` every 0.1 s until it is true (its exceptions propagate);
    RuntimeError(``timed_out()``) once ``timeout_s`` seconds have passed."""
    def give_up(state) -> None:
        raise RuntimeError(timed_out())

    Retrying(retry=retry_if_result(operator.not_), stop=stop_after_delay(timeout_s), wait=wait_fixed(0.1),
             retry_error_callback=give_up)(ready)
