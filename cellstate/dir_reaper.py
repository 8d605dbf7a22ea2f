"""A directory removed when the process that made it dies, however it dies (SIGKILL too).

``DirReaper(path)`` starts a small watcher process (``python -I -S``, in a session of its own so
that a Ctrl-C or a closed terminal does not reach it) holding the read end of a pipe whose only
write end this process keeps (not inherited by any child). When this process ends, the kernel
closes that end; the watcher reads end-of-file and removes ``path``, retrying for up to
``REMOVE_FOR_S`` seconds while the processes that wrote there (an etcd, which its own parent-death
signal stops: ``cellstate.child_process``) let go of it. ``release()`` (the owner removed the
directory itself) closes the pipe and reaps the watcher, which then finds nothing to remove.
Off Linux and macOS (no ``pass_fds``) nothing is started and nothing is guaranteed.
"""

from __future__ import annotations

import os
import subprocess
import sys

REMOVE_FOR_S = 30.0

_WATCHER = """
import os, shutil, sys, time
fd, path, remove_for = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
released = False
while True:
    try:
        data = os.read(fd, 4096)
    except InterruptedError:
        continue
    if not data:
        break
    released = released or b"k" in data
if released:
    sys.exit(0)
deadline = time.monotonic() + remove_for
while os.path.lexists(path):
    shutil.rmtree(path, ignore_errors=True)
    if not os.path.lexists(path) or time.monotonic() > deadline:
        break
    time.sleep(0.2)
"""


class DirReaper:
    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self._write_fd: int | None = None
        self._watcher: subprocess.Popen | None = None
        if os.name != "posix":
            return
        read_fd, write_fd = os.pipe()  # both close-on-exec: no other child inherits the write end
        try:
            self._watcher = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _WATCHER, str(read_fd), self.path, str(REMOVE_FOR_S)],
                pass_fds=(read_fd,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True, cwd="/")
        except OSError:
            os.close(write_fd)
            write_fd = None
        finally:
            os.close(read_fd)
        self._write_fd = write_fd

    @property
    def pid(self) -> int | None:
        """The watcher's process id (None: none runs)."""
        return None if self._watcher is None else self._watcher.pid

    def release(self, timeout: float = 5.0) -> None:
        """Stop watching, leaving the directory to its owner (idempotent): tell the watcher, close
        the pipe and wait for the watcher to end."""
        if self._write_fd is not None:
            try:
                os.write(self._write_fd, b"k")
            except OSError:  # the watcher is gone already: nothing to tell
                pass
            os.close(self._write_fd)
            self._write_fd = None
        if self._watcher is not None:
            try:
                self._watcher.wait(timeout)
            except subprocess.TimeoutExpired:  # still removing: it ends by itself (REMOVE_FOR_S)
                pass
            self._watcher = None
