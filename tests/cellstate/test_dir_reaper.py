"""``cellstate.dir_reaper``: a directory goes with the process that made it, SIGKILL included."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from cellstate.dir_reaper import DirReaper

ROOT = Path(__file__).resolve().parents[2]


def _poll(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_the_directory_goes_when_its_owner_is_sigkilled(tmp_path):
    target = tmp_path / "data"
    code = ("import os, signal, sys; from cellstate.dir_reaper import DirReaper; "
            "os.makedirs(sys.argv[1] + '/member/wal'); open(sys.argv[1] + '/member/wal/0.wal', 'w').write('x'); "
            "r = DirReaper(sys.argv[1]); print(r.pid, flush=True); os.kill(os.getpid(), signal.SIGKILL)")
    owner = subprocess.run([sys.executable, "-c", code, str(target)], cwd=ROOT, capture_output=True, text=True,
                           timeout=30)
    assert owner.returncode == -9 and owner.stdout.strip().isdigit(), owner.stderr
    _poll(lambda: not target.exists(), 30, f"{target} removed")


def test_released_it_leaves_the_directory_to_its_owner(tmp_path):
    target = tmp_path / "kept"
    target.mkdir()
    reaper = DirReaper(target)
    assert reaper.pid is not None
    pid = reaper.pid
    reaper.release()
    reaper.release()  # idempotent
    assert target.exists()
    try:
        os.kill(pid, 0)
        alive = True
    except ProcessLookupError:
        alive = False
    assert not alive, "the watcher ended with the release"
