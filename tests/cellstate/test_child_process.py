"""Children started with ``ending_with_parent`` end when their parent is SIGKILLed."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from cellstate.child_process import ending_with_parent

ROOT = Path(__file__).resolve().parents[2]
needs_setpriv = pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("setpriv") is None,
                                   reason="needs Linux and util-linux's setpriv")


def _gone(pid: int, timeout: float) -> bool:
    """True once ``pid`` no longer runs (gone, or a zombie nobody reaped) within ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def _parent_then_kill(script: str, tmp_path: Path) -> int:
    """Run ``script`` (it prints a child's pid, then sleeps) as a parent process, SIGKILL the
    parent once the pid is printed; the child's pid."""
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], cwd=ROOT, stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        line = parent.stdout.readline()
        assert line.strip().isdigit(), f"the parent printed {line!r}"
        child = int(line)
    finally:
        parent.kill()
        parent.wait()
    return child


def _assert_ends(pid: int, timeout: float, what: str) -> None:
    """``pid`` ends within ``timeout`` s of its parent's SIGKILL (SIGKILLed here if it does not)."""
    try:
        assert _gone(pid, timeout), f"{what} outlived its SIGKILLed parent"
    finally:
        if not _gone(pid, 0):
            os.kill(pid, signal.SIGKILL)


@needs_setpriv
def test_main_thread_prefixes_setpriv_and_other_threads_do_not():
    assert ending_with_parent(["sleep", "1"]) == [shutil.which("setpriv"), "--pdeathsig", "TERM", "--", "sleep", "1"]
    seen = []
    thread = threading.Thread(target=lambda: seen.append(ending_with_parent(["sleep", "1"])))
    thread.start()
    thread.join()
    assert seen == [["sleep", "1"]]


@needs_setpriv
def test_child_gets_sigterm_when_its_parent_is_sigkilled(tmp_path):
    child = _parent_then_kill("""
        import subprocess, sys, time
        from cellstate.child_process import ending_with_parent
        p = subprocess.Popen(ending_with_parent([sys.executable, "-c", "import time; time.sleep(60)"]))
        time.sleep(0.3)  # setpriv has exec'd by now
        print(p.pid, flush=True)
        time.sleep(60)
        """, tmp_path)
    _assert_ends(child, 10.0, "the child")


def test_a_child_without_it_outlives_its_parent(tmp_path):
    """The control: the same parent without the prefix leaves its child running."""
    child = _parent_then_kill("""
        import subprocess, sys, time
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        print(p.pid, flush=True)
        time.sleep(60)
        """, tmp_path)
    try:
        assert not _gone(child, 1.0)
    finally:
        os.kill(child, signal.SIGKILL)


@needs_setpriv
def test_embedded_etcd_ends_when_its_parent_is_sigkilled(tmp_path):
    member = _parent_then_kill(f"""
        import time
        from cellstate.etcd.cluster import EtcdCluster
        from cellstate.etcd.options import EtcdOptions
        cluster = EtcdCluster(size=1, options=EtcdOptions(unsafe_no_fsync=True), data_dir={str(tmp_path / 'etcd')!r}).start()
        print(cluster.members[0].process.pid, flush=True)
        time.sleep(60)
        """, tmp_path)
    _assert_ends(member, 15.0, "etcd")


@needs_setpriv
def test_demo_children_are_started_ending_with_their_parent(tmp_path):
    from tools.demo.children import Children

    children = Children(tmp_path)
    child = children.start("help", ["--help"], expected_exit=True)
    try:
        child.process.wait(30)
        assert child.process.args[1:3] == ["--pdeathsig", "TERM"]
        assert child.returncode == 0, child.log_tail()
    finally:
        children.stop_all()
