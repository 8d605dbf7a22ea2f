"""tools/venv.sh: which interpreter .venv is built on."""

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _omega_python(env_extra: dict[str, str]) -> str:
    env = {k: v for k, v in os.environ.items() if k != "OMEGA_PYTHON"} | env_extra
    done = subprocess.run(["bash", "-c", "source tools/venv.sh && omega_python"], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_omega_python_overrides_the_choice():
    assert _omega_python({"OMEGA_PYTHON": "/opt/some/python3.12"}) == "/opt/some/python3.12"


def test_the_chosen_interpreter_can_build_the_venv():
    chosen = _omega_python({})
    check = subprocess.run([chosen, "-c", "import sys, ensurepip, venv; print(sys.version_info >= (3, 11))"],
                           capture_output=True, text=True, check=True)
    assert check.stdout.strip() == "True"


def test_the_distribution_python_comes_first_when_it_qualifies():
    system = Path("/usr/bin/python3")
    usable = system.exists() and subprocess.run(
        [str(system), "-c", "import sys, ensurepip, venv; sys.exit(sys.version_info < (3, 11))"],
        capture_output=True, check=False).returncode == 0
    assert (_omega_python({}) == str(system)) == usable
