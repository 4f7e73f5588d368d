"""How a command that runs workers stops: SIGTERM like Ctrl-C, and once only.

A cancelled CI job sends SIGTERM, whose default ends the process at once: no ``finally``
runs, so no worker is stopped and no report is written. Inside ``stop_on_signals`` the
first SIGINT or SIGTERM raises ``KeyboardInterrupt`` in the main thread (the commands'
interrupted path: workers closed, what finished reported); later ones while the command
shuts down are ignored with a line on stderr, so a second Ctrl-C cannot cut the report
short. Once a signal has arrived they stay ignored after the block too, by the operating
system (``SIG_IGN``): the command is ending, and a second signal landing between the
block's end and the exit must not turn the interrupted exit (2) into a death by signal.
A Python handler would not do: the interpreter's finalization puts the default action
back for every signal with a Python handler (``_PySignal_Fini``), and a Ctrl-C in that
window killed the process (the CI's -2). (A worker outlives nothing in any case: see
``watchdog.py``.)
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stopping:
    """``shield()``: from now on (the work is done, its report is being written) a
    signal is ignored too."""

    def __init__(self) -> None:
        self.stopping = False
        self.signalled = False

    def shield(self) -> None:
        self.stopping = True

    def handler(self, signum: int, frame: FrameType | None) -> None:
        if self.stopping:
            sys.stderr.write("prefixlint: stopping; the report is being written\n")
            return
        self.stopping = self.signalled = True
        raise KeyboardInterrupt


@contextlib.contextmanager
def stop_on_signals() -> Iterator[Stopping]:
    state = Stopping()
    if threading.current_thread() is not threading.main_thread():
        yield state  # handlers can only be set from the main thread
        return
    previous = {sig: signal.getsignal(sig) for sig in _SIGNALS}
    for sig in _SIGNALS:
        signal.signal(sig, state.handler)
    try:
        yield state
    finally:
        for sig, old in previous.items():
            # interrupted: the process is ending; ignored at the OS level, through exit
            signal.signal(sig, signal.SIG_IGN if state.signalled else old)
