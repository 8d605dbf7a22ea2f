"""docs/EXTENDING.md, run: the listed module is docs/examples/mymod.py, the notebook steps run
(registration, a replay with the new kind and with the new scorer), the ``omega replay
--plugin`` commands run, the live run places the jobs on a real etcd, an ``omega.plugins``
entry point is loaded, and a bad ``--plugin`` module is one line and exit status 2."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from cellstate.check import check_cell
from schedulers import chains, registry

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "EXTENDING.md"
EXAMPLES = ROOT / "docs" / "examples"
BLOCK = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```$", re.S | re.M)


def blocks(lang: str, info: str = "") -> list[str]:
    return [body for kind, rest, body in BLOCK.findall(DOC.read_text()) if kind == lang and rest.strip() == info]


def omega_lines(prefix: str) -> list[list[str]]:
    """The doc's ``sh`` command lines starting with ``prefix``, as argv after ``omega``."""
    out = []
    for body in blocks("sh"):
        for line in body.splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith(prefix):
                out.append(shlex.split(line.removeprefix("PYTHONPATH=docs/examples ").removeprefix("omega ")))
    return out


def run_omega(argv: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(EXAMPLES), str(ROOT)]))
    return subprocess.run([sys.executable, "-m", "tools.cli", *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture
def registrations(monkeypatch):
    """Registrations made by a test are undone after it (the tables are process-wide)."""
    saved = dict(chains.KINDS), dict(registry.FILTERS), dict(registry.SCORERS)
    monkeypatch.syspath_prepend(str(EXAMPLES))
    yield
    for table, old in zip((chains.KINDS, registry.FILTERS, registry.SCORERS), saved):
        table.clear()
        table.update(old)
    for name in ("mymod", "ep_plugin"):
        sys.modules.pop(name, None)


def test_the_listing_is_the_example_module():
    (listing,) = blocks("python", "docs/examples/mymod.py")
    assert listing == (EXAMPLES / "mymod.py").read_text()


def test_the_notebook_steps_run(tmp_path, monkeypatch, registrations, capsys):
    monkeypatch.chdir(tmp_path)
    steps = blocks("python")
    assert len(steps) == 3
    namespace: dict = {}
    for step in steps:
        exec(compile(step, str(DOC), "exec"), namespace)
    assert namespace["scheduler"].kind == "firstfit"
    assert namespace["result"].schedulers[0].tasks_placed > 0 and namespace["packer"].check["ok"]
    assert (tmp_path / "small.omt").exists()
    assert "tasks placed; invariants ok: True" in capsys.readouterr().out


def test_the_command_line_replays_run(tmp_path, monkeypatch, registrations):
    monkeypatch.chdir(tmp_path)
    exec(compile(blocks("python")[1], str(DOC), "exec"), {})  # writes small.omt
    commands = omega_lines("PYTHONPATH=docs/examples omega replay")
    assert len(commands) == 2
    for argv in commands:
        done = run_omega(argv, tmp_path)
        assert done.returncode == 0, done.stderr
        assert "invariants: ok" in done.stdout and "tasks placed" in done.stdout


@pytest.mark.slow
def test_the_live_run_places_the_jobs(tmp_path, etcd_server, etcd_store, cell_keys):
    (jobs,) = [b for b in blocks("toml") if "[[job]]" in b]
    (tmp_path / "jobs.toml").write_text(jobs)
    store_args = ["--endpoints", ",".join(etcd_server.endpoints), "--cell", cell_keys.cell]
    init, submit = omega_lines("omega cell init"), omega_lines("omega job submit")
    assert submit, "the document submits its jobs"
    (run,) = omega_lines("PYTHONPATH=docs/examples omega scheduler run")
    for argv in init + submit:
        done = run_omega(argv + store_args, tmp_path)
        assert done.returncode == 0, done.stderr
    done = run_omega(run + store_args, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "(firstfit," in done.stdout
    final = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("final-stats "))
                       .split(" ", 1)[1])
    assert final["kind"] == "firstfit" and final["tasks_placed"] == 4
    report = check_cell(etcd_store, cell_keys)
    assert report.ok and report.allocs == 4, report.violations


def test_an_entry_point_is_loaded(tmp_path, monkeypatch, registrations):
    from schedulers.api import load_plugins, scorer_names

    (tmp_path / "ep_plugin.py").write_text(
        "from schedulers.api import register_scorer\n"
        "from mymod import FullestCpu\n"
        "def register():\n"
        "    register_scorer('ep_scorer', lambda args=None: FullestCpu())\n")
    dist = tmp_path / "ep_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ep-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[omega.plugins]\nep = ep_plugin:register\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "ep_scorer" not in scorer_names()
    assert "ep" in load_plugins()
    assert "ep_scorer" in scorer_names()


@pytest.mark.parametrize("argv", [
    ["replay", "x.omt", "--plugin", "no_such_module"],
    ["experiment", "architectures", "--quick", "--plugin", "broken_plugin"],
    ["scheduler", "run", "--kind", "firstfit", "--plugin", "mymod", "--plugin", "broken_plugin"],
], ids=["replay-missing", "experiment-raises", "scheduler-raises"])
def test_a_bad_plugin_module_is_one_line_and_exit_2(tmp_path, argv):
    (tmp_path / "broken_plugin.py").write_text("raise RuntimeError('half-written\\nplugin')\n")
    env_path = os.pathsep.join([str(tmp_path), str(EXAMPLES), str(ROOT)])
    done = subprocess.run([sys.executable, "-m", "tools.cli", *argv], cwd=tmp_path, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=env_path), timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("omega: error: --plugin: plugin "), done.stderr
    assert argv[-1] in lines[0]


def test_register_kind_refuses_a_taken_kind_and_a_bad_name(registrations):
    from schedulers.api import PluginConfigError, register_kind

    with pytest.raises(PluginConfigError, match="already registered"):
        register_kind("batch", lambda name, seed, config: None)
    with pytest.raises(PluginConfigError, match="without"):
        register_kind("a/b", lambda name, seed, config: None)
    with pytest.raises(ValueError, match="retry attempts"):
        register_kind("zero", lambda name, seed, config: None, retry_attempts=0)
    assert "zero" not in chains.KINDS
