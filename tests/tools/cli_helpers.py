"""Running the ``omega`` command line in-process from tests."""

from __future__ import annotations

import contextlib
import io
import signal
import subprocess
import sys
import threading
from pathlib import Path

from tools.cli import main

ROOT = Path(__file__).resolve().parents[2]


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """``omega ARGV`` in this process: (exit status, stdout, stderr); a usage error's
    ``SystemExit`` becomes its status."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as exit_:
            status = exit_.code
    return status, out.getvalue(), err.getvalue()


def exit_status(argv: list[str]) -> int:
    """``omega ARGV`` in this process, its output left to the test's capture: the exit status
    (a usage error's ``SystemExit`` becomes its status)."""
    try:
        return main(argv)
    except SystemExit as exit_:
        return exit_.code


class CommandLines:
    """``omega ARGV`` as a subprocess (from the repository root) whose stdout and stderr lines
    are collected by threads into ``out`` and ``err``."""

    def __init__(self, *argv: str):
        self.proc = subprocess.Popen([sys.executable, "-m", "tools.cli", *argv], cwd=ROOT, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.out: list[str] = []
        self.err: list[str] = []
        self._readers = [threading.Thread(target=self._read, args=(s, lines), daemon=True)
                         for s, lines in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream, lines: list[str]) -> None:
        for line in stream:
            lines.append(line.rstrip("\n"))

    def terminate(self, timeout: float) -> bool:
        """SIGTERM unless it ended, and wait up to ``timeout`` s; killed (and False) if it does
        not end by then. The output is read to its end."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
            ended = True
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            ended = False
        for reader in self._readers:
            reader.join(5)
        return ended
