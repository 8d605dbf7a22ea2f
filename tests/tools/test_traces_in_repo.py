"""The public traces the tests and benchmarks use ship with the repository, byte for byte as
published, and ``traces_dir`` finds them there unless ``$OMEGA_TRACES`` says otherwise."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from tools.trace import shared

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "traces"


def _published_files() -> dict[str, str]:
    """relative path -> sha256, from the README's tables."""
    text = (DATA / "README.md").read_text()
    found: dict[str, str] = {}
    for section, body in re.findall(r"^## (\S+)/ .*?$(.*?)(?=^## |\Z)", text, re.M | re.S):
        for name, digest in re.findall(r"^\| `([^`]+)` \| [\d,]+ \| `([0-9a-f]{64})` \|$", body, re.M):
            found[f"{section}/{name}"] = digest
    return found


def test_traces_dir_defaults_to_the_repository_copy(monkeypatch):
    monkeypatch.delenv("OMEGA_TRACES", raising=False)
    assert shared.traces_dir() == DATA


def test_omega_traces_overrides(monkeypatch, tmp_path):
    monkeypatch.setenv("OMEGA_TRACES", str(tmp_path))
    assert shared.traces_dir() == tmp_path


def test_every_trace_file_is_listed_with_its_published_checksum():
    listed = _published_files()
    assert set(listed) == {
        "google-2011/task_events/part-00000-of-00500.csv.gz",
        "google-2011/job_events/part-00000-of-00500.csv.gz",
        "swf/KTH-SP2-1996-2.1-cln.swf.gz",
        "sweep/tiny-a.omt.gz",
        "sweep/tiny-b.omt.gz",
        "alibaba-openb/openb_node_list_gpu_node.csv.gz",
        "alibaba-openb/openb_pod_list_default.csv.gz",
        "alibaba-openb/openb_pod_list_gpushare40.csv.gz",
        "alibaba-openb/openb_pod_list_gpuspec10.csv.gz",
        "alibaba-openb/openb_pod_list_multigpu20.csv.gz",
    }
    on_disk = {str(p.relative_to(DATA)) for p in DATA.rglob("*") if p.is_file() and p.name != "README.md"}
    assert on_disk == set(listed)
    for name, digest in listed.items():
        assert hashlib.sha256((DATA / name).read_bytes()).hexdigest() == digest, name


def test_readme_names_licence_and_citation():
    text = (DATA / "README.md").read_text()
    assert "CC-BY 4.0" in text and "Reiss" in text
    assert "Feitelson" in text and "Malinowsky" in text
    assert "Weng" in text and "cluster-trace-gpu-v2023" in text
