"""A cell on three hosts with mTLS (docs/DEPLOY.md), the hosts being network namespaces of this
machine: one etcd member per host (``omega cell up --secure --client-cert-auth --name
--initial-cluster``), the scheduler on h2, the agents on h3; h1's member is lost and the cell
keeps serving, ending with a clean ``omega check``.

Needs root and ``ip netns`` (CI runs as root); skipped otherwise. Every address bound is inside
the namespaces this test makes (10.77.0.1-3 on veths to a bridge in a fourth namespace, and
each namespace's own loopback); the namespaces are deleted by name at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HOSTS = ("h1", "h2", "h3")
SUBNET = "10.77.0"
PKI_TO_COPY = ("ca.pem", "server.pem", "server.key", "jwt.key", "jwt.pub")


def _netns_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root to make network namespaces (CI runs as root)"
    if shutil.which("ip") is None:
        return "needs the ip command (iproute2) for network namespaces"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"ip netns is unavailable: {probe.stderr.strip()}"
    return None


pytestmark = [pytest.mark.slow, pytest.mark.skipif(_netns_unavailable() is not None,
                                                   reason=_netns_unavailable() or "")]


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@pytest.fixture
def hosts():
    """{host: namespace} for h1..h3 linked by a bridge namespace; deleted by name afterwards."""
    tag = f"omega{os.getpid() % 100000}"
    bridge = f"{tag}-br"
    names = {h: f"{tag}-{h}" for h in HOSTS}
    made: list[str] = []
    try:
        ip("netns", "add", bridge)
        made.append(bridge)
        ip("-n", bridge, "link", "add", "br0", "type", "bridge")
        ip("-n", bridge, "link", "set", "br0", "up")
        for i, (_host, ns) in enumerate(names.items(), start=1):
            ip("netns", "add", ns)
            made.append(ns)
            ip("link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", f"v{i}", "netns", bridge)
            ip("-n", bridge, "link", "set", f"v{i}", "master", "br0")
            ip("-n", bridge, "link", "set", f"v{i}", "up")
            ip("-n", ns, "addr", "add", f"{SUBNET}.{i}/24", "dev", "eth0")
            ip("-n", ns, "link", "set", "eth0", "up")
            ip("-n", ns, "link", "set", "lo", "up")
        yield names
    finally:
        for ns in reversed(made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


class Host:
    """Runs omega commands inside one namespace; stops the processes it started, by PID."""

    def __init__(self, ns: str, log_dir: Path):
        self.ns, self.log_dir = ns, log_dir
        self.procs: dict[str, subprocess.Popen] = {}

    def argv(self, args: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.ns, sys.executable, "-m", "tools.cli", *args]

    def run(self, args: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(args), cwd=REPO, capture_output=True, text=True, timeout=60,
                              env=_env())

    def start(self, name: str, args: list[str]) -> subprocess.Popen:
        log = open(self.log_dir / f"{self.ns}-{name}.log", "w")
        # ip netns exec execs the command: the PID is omega's own
        proc = subprocess.Popen(self.argv(args), cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=_env())
        log.close()
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> str:
        return (self.log_dir / f"{self.ns}-{name}.log").read_text(errors="replace")

    def stop(self, name: str) -> int:
        proc = self.procs.pop(name)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return proc.returncode

    def stop_all(self) -> None:
        for name in list(self.procs):
            self.stop(name)


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMEGA_")}
    env["OMEGA_ENDPOINTS"] = ",".join(f"https://{SUBNET}.{i}:2379" for i in (1, 2, 3))
    return env


def wait_for(what: str, ready, timeout: float = 60.0, detail=lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, f"{what} not within {timeout:.0f} s\n{detail()}"
        time.sleep(0.5)


BATCH_JOBS = """
[[job]]
id = "{prefix}-a"
kind = "batch"
tasks = 3
cpu = 0.5
memory = "256Mi"
duration_s = 30

[[job]]
id = "{prefix}-b"
kind = "batch"
tasks = 2
cpu = 1
memory = "512Mi"
duration_s = 30
"""


def test_three_host_cell_with_mtls_survives_losing_a_host(hosts, tmp_path):
    data = {h: tmp_path / h for h in HOSTS}
    logs = tmp_path / "logs"
    logs.mkdir()
    run = {h: Host(ns, logs) for h, ns in hosts.items()}
    # the operator, on h1 (holding the CA): the PKI naming every member's address
    made = subprocess.run([sys.executable, "-m", "tools.cli", "cell", "certs", "--data-dir", str(data["h1"]),
                           *[a for i in (1, 2, 3) for a in ("--host", f"{SUBNET}.{i}")]],
                          cwd=REPO, capture_output=True, text=True, env=_env())
    assert made.returncode == 0, made.stderr
    for h in ("h2", "h3"):  # each member host gets the CA certificate, the server pair and the JWT keys
        (data[h] / "pki").mkdir(parents=True, mode=0o700)
        for name in PKI_TO_COPY:
            shutil.copy2(data["h1"] / "pki" / name, data[h] / "pki" / name)
    assert not (data["h2"] / "pki" / "ca.key").exists()
    initial = ",".join(f"m{i}={SUBNET}.{i}:2380" for i in (1, 2, 3))
    try:
        def cell_up(i: int, h: str) -> None:
            extra = ["--metrics-loopback"] if h == "h2" else []
            run[h].start("etcd", ["cell", "up", "--secure", "--client-cert-auth", "--data-dir", str(data[h]),
                                  "--name", f"m{i}", "--initial-cluster", initial, "--no-fsync", *extra])

        for i, h in enumerate(HOSTS, start=1):
            cell_up(i, h)
        for i, h in enumerate(HOSTS, start=1):
            wait_for(f"member m{i} on {h}", lambda h=h, i=i: f" member m{i} pid " in run[h].log("etcd"),
                     detail=lambda h=h: run[h].log("etcd"))
        assert "(mTLS + auth)" in run["h1"].log("etcd")
        assert "auth is set up by member m1's host" in run["h2"].log("etcd")
        creds = data["h1"] / "credentials"
        wait_for("the credential files", lambda: (creds / "default-agent.json").exists())
        for name in ("default-scheduler", "default-agent", "default-monitor", "admin"):
            assert (creds / f"{name}.pem").exists() and (creds / f"{name}.key").exists(), name
        # the scheduler's host gets its file, its certificate and the CA only
        mine = tmp_path / "h2-creds"
        mine.mkdir(mode=0o700)
        for name in ("default-scheduler.json", "default-scheduler.pem", "default-scheduler.key", "ca.pem"):
            shutil.copy2(creds / name, mine / name)
        as_scheduler = ["--credentials", str(mine / "default-scheduler.json"), "--cacert", str(mine / "ca.pem")]
        as_agent = ["--credentials", str(creds / "default-agent.json")]
        as_monitor = ["--credentials", str(creds / "default-monitor.json")]

        # nothing without a client certificate connects: not the password alone, not a bare scrape
        password = json.loads((creds / "default-monitor.json").read_text())["users"]["default-monitor"]["password"]
        (tmp_path / "pw").write_text(password)
        refused = run["h3"].run(["check", "--cacert", str(creds / "ca.pem"), "--user", "default-monitor",
                                 "--password-file", str(tmp_path / "pw")])
        assert refused.returncode == 1 and "client certificate" in refused.stderr, refused.stderr
        plain = run["h3"].run(["check", "--endpoints", f"http://{SUBNET}.1:2379"])
        assert plain.returncode == 1, plain.stderr
        scrape = _scrape(hosts["h3"], f"https://{SUBNET}.1:2379/metrics", creds / "ca.pem")
        assert scrape.startswith("refused"), scrape
        metrics_url = next(w for line in run["h2"].log("etcd").splitlines() if " member m2 pid " in line
                           for w in line.split() if w.startswith("http://127.0.0.1:"))
        assert "etcd_server_has_leader 1" in _scrape(hosts["h2"], f"{metrics_url}/metrics", None)

        init = run["h2"].run(["cell", "init", "--machines", "6", *as_scheduler])
        assert init.returncode == 0, init.stderr
        run["h2"].start("scheduler", ["scheduler", "run", "--kind", "batch", "--name", "b1", *as_scheduler])
        run["h3"].start("agents", ["agents", "run", "--time-scale", "60", *as_agent])
        jobs = tmp_path / "jobs.toml"

        def submit_and_finish(prefix: str, host: str) -> None:
            jobs.write_text(BATCH_JOBS.format(prefix=prefix))
            done = run[host].run(["submit", str(jobs), *as_scheduler])
            assert done.returncode == 0, done.stderr

            def finished() -> bool:
                listing = run["h2"].run(["job", "list", "-o", "json", *as_monitor])
                rows = {r["id"]: r for r in json.loads(listing.stdout)["jobs"]} if listing.returncode == 0 else {}
                return all(rows.get(f"{prefix}-{j}", {}).get("states", {}).get("finished") == n
                           for j, n in (("a", 3), ("b", 2)))

            wait_for(f"jobs {prefix}-* finished", finished,
                     detail=lambda: run["h2"].log("scheduler") + run["h3"].log("agents"))

        submit_and_finish("before", "h3")

        # h1 is lost: its cell up stops and takes its member down
        member_pid = int(next(line.split()[3] for line in run["h1"].log("etcd").splitlines()
                              if " member m1 pid " in line))
        run["h1"].stop("etcd")
        assert not _alive(member_pid)
        submit_and_finish("after", "h1")  # h1's host still runs clients; its etcd endpoint is dead
        check = run["h2"].run(["check", *as_monitor])
        assert check.returncode == 0 and "OK" in check.stdout, check.stdout + check.stderr
        assert run["h2"].procs["scheduler"].poll() is None and run["h3"].procs["agents"].poll() is None

        # h1 comes back: the same command rejoins its member from the recorded layout and data
        (logs / f"{hosts['h1']}-etcd.log").unlink()
        cell_up(1, "h1")
        wait_for("member m1 back", lambda: " member m1 pid " in run["h1"].log("etcd"),
                 detail=lambda: run["h1"].log("etcd"))
        alone = run["h2"].run(["check", "--endpoints", f"https://{SUBNET}.1:2379", *as_monitor])
        assert alone.returncode == 0 and "4 jobs" in alone.stdout, alone.stdout + alone.stderr
    finally:
        for host in run.values():
            host.stop_all()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


SCRAPE = """
import ssl, sys, urllib.request
url, ca = sys.argv[1], sys.argv[2]
context = ssl.create_default_context(cafile=ca) if ca else None
try:
    print(urllib.request.urlopen(url, timeout=5, context=context).read().decode())
except Exception as exc:
    print(f"refused: {type(exc).__name__}: {exc}")
"""


def _scrape(ns: str, url: str, ca: Path | None) -> str:
    """GET ``url`` from inside ``ns`` (trusting ``ca``, presenting no certificate)."""
    out = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", SCRAPE, url, str(ca or "")],
                         capture_output=True, text=True, timeout=30)
    return out.stdout
