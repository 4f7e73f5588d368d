"""A worker's watchdog: when the command that started the worker ends, however it ends, the
worker and its temp files go too.

The parent (``client.py``) starts one per worker, as ``python -I -S watchdog.py PGID TMP
TRACE`` in a session of its own, holding the read end of a pipe (the lifeline, fd 0) whose
write end only the parent has. The kernel closes that end when the parent exits: a normal
exit, an exception, SIGTERM or SIGKILL alike. On end of file the watchdog kills the
worker's process group and removes its temp folder and trace file. A parent that stops the
worker itself writes one byte first: then the watchdog only removes what is left (the
group may already be gone, and its number reused).

A separate process, not a thread of the worker: a build stuck in C code holding the GIL
would keep a thread from running. Standard library only (it runs with ``-I -S``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys

LIFELINE_FD = 0
DISARM = b"d"  # the parent stopped the worker itself


def _kill(pgid: int) -> None:
    # The worker leads its own group (a new session); a warm worker may not have made
    # it yet when killed at once: its pid then.
    with contextlib.suppress(OSError):
        os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        os.kill(pgid, signal.SIGKILL)


def main(argv: list[str]) -> None:
    pgid, tmp, trace = int(argv[0]), argv[1], argv[2]
    # Ctrl-C and a terminal's hang-up are for the command: it stops its workers itself.
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    while True:
        try:
            data = os.read(LIFELINE_FD, 1)
            break
        except InterruptedError:
            continue
        except OSError:
            data = b""
            break
    if data != DISARM:
        _kill(pgid)
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)
    if trace:
        with contextlib.suppress(OSError):
            os.unlink(trace)


if __name__ == "__main__":
    main(sys.argv[1:])
