"""Keys pressed while the live monitor runs: ``q`` (or ``Q``) quits it.

``KeyReader(fd)`` puts the terminal on ``fd`` in cbreak mode (keys arrive one by one, unechoed;
Ctrl-C still interrupts) and restores it on exit. ``wait(timeout)`` sleeps up to ``timeout``
seconds, returning True at once when ``q`` is read. On anything but a terminal (a pipe, a file,
``--once``, ``-o json``) it only sleeps: no key is read and nothing is changed.
"""

from __future__ import annotations

import os
import select
import sys
import time

QUIT_KEYS = frozenset(b"qQ")


class KeyReader:
    def __init__(self, fd: int | None = None):
        if fd is None:
            try:
                fd = sys.stdin.fileno()
            except (AttributeError, OSError, ValueError):  # no stdin, or one without a descriptor
                fd = -1
        self.fd = fd if fd >= 0 and os.isatty(fd) else None
        self.quit = False
        """Set by the monitor's loop when a quit key ended it."""
        self._saved = None

    @property
    def active(self) -> bool:
        """Whether keys are read (the descriptor is a terminal)."""
        return self.fd is not None

    def __enter__(self) -> KeyReader:
        if self.fd is not None:
            import termios
            import tty

            try:
                self._saved = termios.tcgetattr(self.fd)
                tty.setcbreak(self.fd, termios.TCSANOW)  # keys typed already stay readable
            except termios.error:  # not a terminal after all: just sleep
                self.fd = None
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is not None and self._saved is not None:
            import termios

            termios.tcsetattr(self.fd, termios.TCSADRAIN, self._saved)
            self._saved = None

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` s; True as soon as a quit key is read (other keys are dropped)."""
        if self.fd is None:
            time.sleep(max(0.0, timeout))
            return False
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            ready, _, _ = select.select([self.fd], [], [], max(0.0, deadline - time.monotonic()))
            if ready:
                data = os.read(self.fd, 64)
                if not data:  # the terminal went away: stop reading it
                    self.fd = None
                    time.sleep(max(0.0, deadline - time.monotonic()))
                    return False
                if QUIT_KEYS.intersection(data):
                    return True
            if time.monotonic() >= deadline:
                return False
