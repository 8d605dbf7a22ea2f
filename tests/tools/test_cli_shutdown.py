"""A command that has stopped its work exits even if closing a client or the interpreter's
teardown hangs (``tools.cli.common.exit_once_stopped``), with every thread's stack logged."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tools.cli.common import _PROCESS, exit_once_stopped

ROOT = Path(__file__).resolve().parents[2]


def test_a_hang_after_stopping_ends_with_the_commands_status_and_the_stacks():
    hang = ("from tools.cli.common import own_process, exit_once_stopped\n"
            "own_process(); exit_once_stopped(3, 0.5)\n"
            "import time; time.sleep(60)  # a close that never returns\n")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", hang], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert done.returncode == 3
    assert time.monotonic() - started < 20
    assert "had not exited 0.5 s after stopping its work" in done.stderr
    assert "Current thread" in done.stderr and "time.sleep" not in done.stdout


def test_a_prompt_exit_is_not_touched():
    quick = ("from tools.cli.common import own_process, exit_once_stopped\n"
             "own_process(); exit_once_stopped(3, 5.0)\n")
    done = subprocess.run([sys.executable, "-c", quick], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and "had not exited" not in done.stderr


def test_in_process_it_does_nothing():
    assert _PROCESS["entry"] is False  # pytest is not the command line's own process
    exit_once_stopped(3, 0.01)
    time.sleep(0.2)  # still here


def test_a_reader_that_closed_stdout_gets_a_quiet_stop_not_a_traceback():
    """``omega completion bash | head -1``: the pipe's reader is gone before the command writes."""
    import os

    read, write = os.pipe()
    os.close(read)  # the reader left: every write to the pipe fails (EPIPE)
    try:
        done = subprocess.run([sys.executable, "-m", "tools.cli", "completion", "bash"], cwd=ROOT, stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write)
    assert done.returncode == 141 and done.stderr == "", done.stderr
