"""`omega --help` (building the parser) loads neither the solver's OR-tools/pandas nor gRPC or
numpy; OR-tools loads only when a solver scheduler is made, and its absence is a one-line error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("ortools", "pandas", "grpc", "etcd3", "numpy", "matplotlib")


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_building_the_parser_loads_no_heavy_module():
    done = _python(
        "import sys\n"
        "from tools.cli import build_parser\n"
        "build_parser()\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_scheduler_kinds_load_without_ortools_until_a_solver_is_made():
    done = _python(
        "import sys\n"
        "from schedulers.chains import make_scheduler\n"
        "make_scheduler('batch', 'b', 0); make_scheduler('borg', 'g', 0)\n"
        "print('ortools' in sys.modules, 'pandas' in sys.modules)\n"
        "make_scheduler('solver', 's', 0)\n"
        "print('ortools' in sys.modules)\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False", "True"]


def test_a_solver_without_ortools_is_a_one_line_error_naming_the_extra():
    done = _python(
        "import sys\n"
        "sys.modules['ortools'] = None  # as if the solver extra were not installed\n"
        "from tools.cli import main\n"
        "sys.exit(main(['scheduler', 'run', '--kind', 'solver', '--endpoints', '127.0.0.1:1']))\n")
    assert done.returncode == 1  # a missing optional dependency: a runtime error, before anything starts
    assert done.stderr.strip().splitlines() == [
        "omega: scheduler run: solver: the solver scheduler needs OR-tools (ortools is not installed): "
        "pip install 'omega-scheduler[solver]'"]


def test_the_parsers_copies_of_heavy_modules_constants_agree():
    """Kept in the command modules so that building the parser imports neither module."""
    import re

    from cellstate.submit import DEFAULT_RETRY_FOR_S
    from tools.cli import jobs as cmd_jobs, scheduler as cmd_scheduler

    assert cmd_jobs.DEFAULT_RETRY_FOR_S == DEFAULT_RETRY_FOR_S
    registered = re.findall(r'^register_kind\("(\w+)"', (REPO / "schedulers" / "chains.py").read_text(), re.M)
    assert sorted(cmd_scheduler.BUILT_IN_KINDS) == sorted(registered) and len(registered) == 5
