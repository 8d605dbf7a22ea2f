"""Prometheus conventions of the scheduler and agents processes: process and Python metrics,
``cell``/``kind`` labels, queue-depth and replica-lag gauges, the commit-latency histogram,
``--metrics-addr``; and metrics behind a secure cell's door (TLS with client certificates
from the cell's CA: a scrape without one is refused)."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "omega"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from runtime_helpers import add_machines, batch_jobs, settled, submit, wait_for  # noqa: E402
from test_cmd_scheduler import SchedulerRun  # noqa: E402
from cellstate import pki  # noqa: E402
from cellstate.memory.store import MemoryStore  # noqa: E402
from cellstate.keys import CellKeys  # noqa: E402
from cellstate.replica.watched import Replica  # noqa: E402
from tools.agents.metrics import AgentMetrics  # noqa: E402
from tools.cli import main  # noqa: E402
from tools.metrics.endpoint import MetricsEndpoint, MetricsTls, parse_metrics_addr  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def sample(body: str, name: str, **labels: str) -> float | None:
    """The value of the sample ``name{labels…}`` (labels in any order, others allowed) in ``body``."""
    for line in body.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            head, value = line.rsplit(" ", 1)
            if all(f'{k}="{v}"' in head for k, v in labels.items()):
                return float(value)
    return None


def scrape(url: str, context: ssl.SSLContext | None = None) -> str:
    return urllib.request.urlopen(url, timeout=5, context=context).read().decode()


def test_scheduler_process_serves_conventional_metrics(etcd_server, etcd_store, cell_keys):
    add_machines(etcd_store, cell_keys, 1)  # 4 cores: 8 tasks fit, 4 stay queued
    submit(etcd_store, cell_keys, batch_jobs("j", 3, 4, 500))
    run = SchedulerRun(etcd_server.endpoints, cell_keys.cell, "m1", "--metrics-addr", "127.0.0.1:0")
    try:
        url = wait_for(lambda: next((line.split(" on ", 1)[1] for line in run.out if line.startswith("metrics on ")),
                                    None) or run.serving() and None, 20, "the metrics address")
        assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
        wait_for(lambda: settled(etcd_store, cell_keys, 8), 15, "8 tasks placed")
        labels = dict(cell=cell_keys.cell, kind="batch", scheduler="m1")

        def queued() -> str | None:
            body = scrape(url)
            return body if sample(body, "omega_scheduler_queue_tasks", **labels) == 4 else None

        body = wait_for(queued, 10, "the 4 queued tasks in the metrics")
        assert sample(body, "omega_scheduler_queue_jobs", **labels) >= 1
        assert sample(body, "omega_scheduler_tasks_placed_total", **labels) == 8
        assert sample(body, "process_cpu_seconds_total") > 0 and sample(body, "process_resident_memory_bytes") > 0
        assert sample(body, "python_info") == 1 and "python_gc_collections_total" in body
        assert sample(body, "omega_scheduler_commit_seconds_count", outcome="committed", **labels) >= 1
        assert sample(body, "omega_scheduler_commit_seconds_bucket", le="+Inf", outcome="committed", **labels) >= 1
        revision = sample(body, "omega_replica_revision", **labels)
        lag = sample(body, "omega_replica_lag_revisions", **labels)
        assert 0 < revision <= etcd_store.revision() and 0 <= lag < 1000
        etcd_store.put(cell_keys.root + "/elsewhere", b"x")  # a write outside the cell: the head moves on
        lag_after = sample(scrape(url), "omega_replica_lag_revisions", **labels)
        assert lag_after >= 1
    finally:
        run.stop()


def test_replica_lag_counts_the_revisions_the_watch_has_not_brought():
    store, keys = MemoryStore(), CellKeys("c")
    replica = Replica(store, keys)
    replica.sync()
    metrics = AgentMetrics(cell="c", agent="a")
    metrics.watch_replica(replica, store.revision)
    for i in range(3):
        store.put(keys.stats(f"s{i}"), b"\x80")
    value = metrics.registry.get_sample_value
    assert value("omega_replica_lag_revisions", metrics.labels) == 3
    replica.pump(1.0)
    assert value("omega_replica_lag_revisions", metrics.labels) == 0
    assert value("omega_replica_revision", metrics.labels) == store.revision()

    def down() -> int:
        raise ConnectionError("store down")

    broken = AgentMetrics(cell="c", agent="b")
    broken.watch_replica(replica, down)
    lag = broken.registry.get_sample_value("omega_replica_lag_revisions", broken.labels)
    assert lag != lag  # NaN: unknown, the scrape still works


def test_agents_process_labels_and_metrics_addr(etcd_server, cell_keys):
    cmd = [sys.executable, "-m", "tools.cli", "agents", "run", "--init-machines", "5", "--run-for", "60",
           "--metrics-addr", "127.0.0.1:0", "--endpoints", ",".join(etcd_server.endpoints), "--cell", cell_keys.cell]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = None
        for line in proc.stdout:
            if line.startswith("metrics on "):
                url = line.split(" on ", 1)[1].strip()
            if line.startswith("agents "):
                break
        assert url, "no metrics line"
        body = scrape(url)
        assert sample(body, "omega_agent_machines", cell=cell_keys.cell, agent="agents") == 5
        assert sample(body, "omega_replica_lag_revisions", cell=cell_keys.cell, agent="agents") is not None
        assert sample(body, "process_open_fds") > 0
    finally:
        proc.terminate()
        proc.wait(15)


@pytest.mark.parametrize("text,expected", [
    ("127.0.0.1:0", ("127.0.0.1", 0)), ("localhost:9100", ("localhost", 9100)), ("[::1]:9100", ("::1", 9100)),
])
def test_parse_metrics_addr(text, expected):
    assert parse_metrics_addr(text) == expected


@pytest.mark.parametrize("argv,message", [
    (["--metrics-addr", "9100"], "--metrics-addr must be HOST:PORT"),
    (["--metrics-addr", "127.0.0.1:70000"], "--metrics-addr must be HOST:PORT"),
    (["--metrics-addr", "[nope]:1"], "not an IPv6 address"),
    (["--metrics-addr", "127.0.0.1:0", "--metrics-port", "0"], "exclude each other"),
    (["--metrics-cert", "c.pem"], "need --metrics-addr"),
    (["--metrics-port", "0", "--metrics-cert", "c.pem"], "needs all of"),
    (["--metrics-port", "0", "--metrics-cert", "/nonexistent.pem", "--metrics-key", "/nonexistent.key",
      "--metrics-client-ca", "/nonexistent-ca.pem"], "cannot load the client CA"),
], ids=["bare-port", "port-range", "bad-ipv6", "addr-and-port", "tls-without-addr", "tls-partial", "tls-files"])
@pytest.mark.parametrize("command", [["scheduler", "run", "--kind", "batch"], ["agents", "run"]])
def test_bad_metrics_flags_are_usage_errors(command, argv, message, capsys):
    with pytest.raises(SystemExit) as info:
        main([*command, *argv])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) <= 2, err


# -- behind the secure cell's door ----------------------------------------------------------------


@pytest.fixture(scope="module")
def cell_pki(tmp_path_factory):
    """A cell CA with the metrics certificates (``pki.issue_metrics_certs``), and a stranger CA."""
    directory = tmp_path_factory.mktemp("pki")
    pki.ensure_local_pki(directory)
    server, scraper = pki.issue_metrics_certs(directory)
    stranger_dir = tmp_path_factory.mktemp("stranger")
    pki.ensure_local_pki(stranger_dir)
    stranger = pki.issue_cert(stranger_dir, "intruder", server=False)
    return server, scraper, stranger


def _client(ca: str, cert=None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=ca)
    if cert is not None:
        context.load_cert_chain(cert.cert, cert.key)
    return context


@pytest.fixture
def tls_endpoint(cell_pki):
    server, scraper, stranger = cell_pki
    endpoint = MetricsEndpoint()
    endpoint.serve(0, tls=MetricsTls(server.cert, server.key, server.ca))
    yield endpoint, server, scraper, stranger
    endpoint.close()


def test_tls_scrape_with_the_cells_client_certificate_works(tls_endpoint):
    endpoint, server, scraper, _ = tls_endpoint
    assert endpoint.url.startswith("https://127.0.0.1:")
    body = scrape(endpoint.url, _client(server.ca, scraper))
    assert "process_cpu_seconds_total" in body


def test_tls_scrape_without_a_client_certificate_is_refused(tls_endpoint):
    endpoint, server, _, stranger = tls_endpoint
    for context in (_client(server.ca), _client(server.ca, stranger)):  # none; one from another CA
        with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
            scrape(endpoint.url, context)
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):  # plain HTTP on the TLS port
        scrape(endpoint.url.replace("https://", "http://"))
    # a client that never finishes its handshake does not block the others
    port = int(endpoint.url.rsplit(":", 1)[1].split("/")[0])
    with socket.create_connection(("127.0.0.1", port)):
        assert "process_cpu_seconds_total" in scrape(endpoint.url, _client(server.ca, tls_endpoint[2]))


def test_an_address_in_use_is_a_one_line_error(etcd_server, etcd_store, cell_keys):
    add_machines(etcd_store, cell_keys, 1)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for command in (["scheduler", "run", "--kind", "batch", "--duration", "5"],
                        ["agents", "run", "--run-for", "5"]):
            done = subprocess.run([sys.executable, "-m", "tools.cli", *command, "--metrics-addr", f"127.0.0.1:{port}",
                                   "--endpoints", ",".join(etcd_server.endpoints), "--cell", cell_keys.cell],
                                  cwd=ROOT, capture_output=True, text=True, timeout=60)
            assert done.returncode == 1, (command, done.stderr)
            assert f"cannot serve metrics on 127.0.0.1:{port}: Address already in use" in done.stderr, done.stderr
            assert "Traceback" not in done.stderr
