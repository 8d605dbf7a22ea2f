"""``Children``: the ``omega`` sub-processes of a demo, each in its own process group with its
output in a log file; stopped together with SIGTERM, then SIGKILL for stragglers.

Every child is started as ``sys.executable -m tools.cli ARGS`` from the project root, in a
new session (so a Ctrl-C at the terminal reaches only the demo, which then stops the
children in order). ``stop_all`` is registered with ``atexit`` while children live, so an
exception or ``sys.exit`` never leaves an orphan behind; a child started from the main thread also
gets SIGTERM when the demo dies without stopping it (SIGKILL, a crash:
``cellstate.child_process.ending_with_parent``).
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from cellstate.child_process import ending_with_parent

PROJECT_ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Child:
    """One ``omega`` sub-process: its name, arguments, log file and process."""

    name: str
    args: list[str]
    log_path: Path
    process: subprocess.Popen
    expected_exit: bool = False  # True for a child that ends by itself (the workload generator)
    stopped_by_us: bool = field(default=False, init=False)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.process.poll()

    def failed(self) -> bool:
        """Ended on its own with an error (or at all, unless it was expected to end)."""
        code = self.process.poll()
        if code is None or self.stopped_by_us:
            return False
        return code != 0 or not self.expected_exit

    def log_lines(self) -> list[str]:
        try:
            return self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return []

    def log_tail(self, lines: int = 10) -> str:
        return "\n".join(self.log_lines()[-lines:]) or "(empty log)"


class Children:
    """The demo's child processes, started in ``run_dir`` (logs: ``run_dir/NAME.log``)."""

    def __init__(self, run_dir: Path, env: dict[str, str] | None = None):
        self.run_dir = Path(run_dir)
        self.env = dict(os.environ if env is None else env)
        self.env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROJECT_ROOT), self.env.get("PYTHONPATH")) if p)
        self.env["PYTHONUNBUFFERED"] = "1"
        self.children: list[Child] = []
        self._atexit = False

    def start(self, name: str, args: list[str], expected_exit: bool = False) -> Child:
        """Start ``omega ARGS`` as ``name`` in a new process group, logging to ``NAME.log``."""
        if any(c.name == name for c in self.children):
            raise ValueError(f"a child named {name!r} already exists")
        log_path = self.run_dir / f"{name}.log"
        with open(log_path, "ab") as log:
            process = subprocess.Popen(ending_with_parent([sys.executable, "-m", "tools.cli", *args]), cwd=PROJECT_ROOT, env=self.env,
                                       stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        child = Child(name, list(args), log_path, process, expected_exit)
        self.children.append(child)
        if not self._atexit:
            atexit.register(self.stop_all)
            self._atexit = True
        return child

    def named(self, prefix: str) -> list[Child]:
        return [c for c in self.children if c.name.startswith(prefix)]

    def failed(self) -> list[Child]:
        """Children that ended on their own when they should not have."""
        return [c for c in self.children if c.failed()]

    def stop(self, children: list[Child], timeout: float = 15.0) -> None:
        """SIGTERM each child's process group, wait up to ``timeout`` s for all, SIGKILL the rest."""
        for child in children:
            if child.running:
                child.stopped_by_us = True
                _signal_group(child.process, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for child in children:
            try:
                child.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for child in children:
            if child.running:  # a straggler: kill its whole group
                _signal_group(child.process, signal.SIGKILL)
                child.process.wait()

    def stop_all(self, timeout: float = 15.0) -> None:
        """Stop every child (idempotent)."""
        self.stop(self.children, timeout)
        if self._atexit:
            atexit.unregister(self.stop_all)
            self._atexit = False


def _signal_group(process: subprocess.Popen, sig: signal.Signals) -> None:
    """Send ``sig`` to the process group led by ``process`` (gone already: nothing to do)."""
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
