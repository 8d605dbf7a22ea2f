"""Child processes that end with the process that started them, even when it is SIGKILLed.

``ending_with_parent(command)`` returns ``command`` prefixed with ``setpriv --pdeathsig TERM --``
(util-linux), which asks Linux to send the child SIGTERM when its parent dies, whatever killed
it; ``setpriv`` then execs the command, so the child keeps its process id. The prefix is added
only on Linux, when ``setpriv`` is on PATH, and when called from the main thread: Linux sends the
signal when the *thread* that started the child ends, and only the main thread lives as long as
the process. Otherwise the command is returned unchanged and a parent that dies without stopping
its children (SIGKILL, a crash) leaves them running, as before. A parent that dies between the
start and ``setpriv``'s own call (microseconds) also leaves the child running.
"""

from __future__ import annotations

import shutil
import sys
import threading
from collections.abc import Sequence

PARENT_DEATH_SIGNAL = "TERM"


def ending_with_parent(command: Sequence[str]) -> list[str]:
    """``command`` made to receive SIGTERM when the calling process dies (see the module)."""
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return list(command)
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return list(command)
    return [setpriv, "--pdeathsig", PARENT_DEATH_SIGNAL, "--", *command]
