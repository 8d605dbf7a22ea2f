"""``SignalGuard``: how a running demo treats signals and failed children (see the class)."""

from __future__ import annotations

import _thread
import signal
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tools.demo.cell import Demo


class SignalGuard:
    """Running: SIGTERM and SIGHUP act as Ctrl-C (the children run in process groups of their
    own, so a closed terminal reaches only the demo, which must stop them), and a watchdog
    interrupts the main thread when a child fails. ``shield()`` (while stopping): Ctrl-C,
    SIGTERM and SIGHUP are only noted, so stopping runs to
    its end. ``restore()``: the previous handlers. Outside the main thread it does nothing."""

    def __init__(self, demo: Demo):
        self.demo = demo
        self.active = threading.current_thread() is threading.main_thread()
        self.previous: dict = {}
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._watch, name="demo-watchdog", daemon=True)

    def __enter__(self) -> SignalGuard:
        if self.active:
            self.previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
            signal.signal(signal.SIGTERM, _raise_interrupt)
            signal.signal(signal.SIGHUP, _raise_interrupt)  # the terminal closed: stop the cell, leave nothing
            self.thread.start()
        return self

    def _watch(self) -> None:
        while not self.done.wait(0.5):
            failed = self.demo.children.failed()
            if failed:
                with self.lock:
                    if not self.done.is_set():
                        self.demo.stop_reason = f"{failed[0].name} exited with status {failed[0].returncode}"
                        _thread.interrupt_main()
                return

    def shield(self) -> None:
        if not self.active:
            return
        while True:
            try:
                with self.lock:
                    self.done.set()
                    for sig in self.previous:
                        signal.signal(sig, self._note)
                break
            except KeyboardInterrupt:  # arrived before the swap: we are stopping anyway
                continue
        self.thread.join()

    def _note(self, signum, _frame) -> None:
        self.demo.stop_reason += f"; {signal.Signals(signum).name} ignored while stopping"

    def __exit__(self, *exc) -> None:
        self.shield()
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def _raise_interrupt(*_) -> None:
    raise KeyboardInterrupt
