"""One etcd member: its identity, host and ports (``MemberSpec``), its process (on 127.0.0.1 unless
placed elsewhere, ``cellstate.etcd.placement``) with its own data directory and log, its command
line and health. A member is stopped with SIGTERM, then SIGKILL; one launched from the main
thread gets SIGTERM when its parent dies without stopping it (``cellstate.child_process``)."""

from __future__ import annotations

import json
import signal
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from cellstate.child_process import ending_with_parent
from cellstate.etcd.options import EtcdOptions
from cellstate.etcd.placement import WILDCARDS, url_host
from cellstate.etcd.ports import HOST, check_port_free


@dataclass
class MemberSpec:
    """One member's identity and ports; ``scheme`` is "https" when the cluster uses TLS. ``host``
    is where it is reached (advertised), ``listen`` the IP it binds (default ``host``)."""

    name: str
    client_port: int
    peer_port: int
    scheme: str = "http"
    host: str = HOST
    listen: str | None = None

    @property
    def client_url(self) -> str:
        return f"{self.scheme}://{url_host(self.host)}:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"{self.scheme}://{url_host(self.host)}:{self.peer_port}"

    @property
    def bind(self) -> str:
        return self.listen or self.host

    def listen_client_urls(self) -> list[str]:
        """The client URLs it binds: the listen IP's, plus loopback's for a specific other IP."""
        urls = [f"{self.scheme}://{url_host(self.bind)}:{self.client_port}"]
        if self.bind not in (HOST, *WILDCARDS):
            urls.append(f"{self.scheme}://{HOST}:{self.client_port}")
        return urls

    def binds(self) -> list[tuple[str, int]]:
        """(IP, port) of every socket it binds."""
        pairs = [(self.bind, self.client_port), (self.bind, self.peer_port)]
        if self.bind not in (HOST, *WILDCARDS):
            pairs.append((HOST, self.client_port))
        return pairs


class EtcdMember:
    """One etcd process with its data directory."""

    def __init__(self, spec: MemberSpec, cluster: list[MemberSpec], data_root: Path, options: EtcdOptions,
                 binary: str, token: str, metrics_port: int | None = None):
        self.spec = spec
        self.cluster = cluster
        self.data_dir = data_root / f"{spec.name}.etcd"
        self.log_path = data_root / f"{spec.name}.log"
        self.options = options
        self.binary = binary
        self.token = token
        self.metrics_port = metrics_port  # a plain-HTTP /metrics listener on loopback, when set
        self.process: subprocess.Popen | None = None
        self._health_context = options.health_context()

    @property
    def endpoint(self) -> str:
        return f"{url_host(self.spec.host)}:{self.spec.client_port}"

    @property
    def metrics_url(self) -> str:
        """etcd's own /metrics listener: plain HTTP on loopback, or "" (none: /metrics is then
        only on the client port, behind its TLS and client certificates)."""
        return f"http://{HOST}:{self.metrics_port}" if self.metrics_port else ""

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
            "--listen-client-urls", ",".join(self.spec.listen_client_urls()),
            "--advertise-client-urls", self.spec.client_url,
            "--listen-peer-urls", f"{self.spec.scheme}://{url_host(self.spec.bind)}:{self.spec.peer_port}",
            "--initial-advertise-peer-urls", self.spec.peer_url,
            "--initial-cluster", initial, "--initial-cluster-token", self.token,
            "--initial-cluster-state", "new",
            "--max-txn-ops", str(self.options.max_txn_ops),
            "--max-request-bytes", str(self.options.max_request_bytes),
            "--listen-metrics-urls", self.metrics_url, "--log-level", "warn",
        ] + self.options.history_args()
        if self.options.unsafe_no_fsync:
            args.append("--unsafe-no-fsync")
        return args + self.options.tls_args() + list(self.options.extra_args)

    def launch(self) -> None:
        """Start the process (no health wait); EtcdError if a port is taken."""
        if self.running:
            return
        for host, port in self.spec.binds() + ([(HOST, self.metrics_port)] if self.metrics_port else []):
            check_port_free(port, host)
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
