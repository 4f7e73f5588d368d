"""Where a build that hung or killed its worker was: the model's line, not 1:1.

A build runs in the worker process, so a model that hangs, calls ``os._exit`` or crashes
the interpreter (a segfault in an extension it calls) leaves no Python exception to read.
The worker therefore keeps a trace file (``faulthandler``): the interpreter writes the
Python stack of every thread there on a fatal signal, on ``SIGUSR1`` (which the parent
sends to a worker that ran past its timeout, before it kills it) and, through a wrapper,
when the worker's own process calls ``os._exit``. The parent reads the innermost frame of
the model's code from it.

Both sides are here: ``arm`` and ``event`` run in the worker; ``TraceFile`` and
``crash_site`` in the parent, which imports neither torch nor vLLM.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from prefixlint.introspect.finding import in_vllm_models, model_code

TRACE_ENV = "PREFIXLINT_WORKER_TRACE"
EVENT_MARK = "@@prefixlint-event@@ "
DUMP_SIGNAL = getattr(signal, "SIGUSR1", None)
DUMP_WAIT = 3.0  # seconds the parent gives a worker to write its stacks

# -- worker side ----------------------------------------------------------------------------

_TRACE: Any = None


def arm() -> None:
    """In the worker, once: stacks into the trace file on a fatal signal, on
    ``DUMP_SIGNAL``, and before this process's own ``os._exit``."""
    global _TRACE
    import faulthandler

    path = os.environ.get(TRACE_ENV)
    if _TRACE is not None:
        # Again before the jobs: what the imports since set-up installed for fatal signals
        # (a cold worker armed before torch and vLLM) is dropped for ours (a segfault then
        # left the worker hanging, reported as a hang at the class line; a forked worker,
        # armed after them, died at the model's line). enable() alone keeps the old ones.
        faulthandler.disable()
        faulthandler.enable(file=_TRACE, all_threads=True)
        return
    if not path:
        return

    _TRACE = open(path, "w", encoding="utf-8")  # noqa: SIM115 (open for the process's life)
    faulthandler.enable(file=_TRACE, all_threads=True)
    if DUMP_SIGNAL is not None:
        faulthandler.register(DUMP_SIGNAL, file=_TRACE, all_threads=True)
    real_exit = os._exit
    pid = os.getpid()

    def _exit(code: int) -> None:  # the model's os._exit: say where, then exit as asked
        if os.getpid() == pid:  # not a forked child (multiprocessing exits its own so)
            with contextlib.suppress(Exception):
                _TRACE.write(f"os._exit({code}) called\n")
                faulthandler.dump_traceback(file=_TRACE, all_threads=False)
                _TRACE.flush()
        real_exit(code)

    os._exit = _exit


def new_job() -> None:
    """A job starts: the stacks of the previous one are no longer of interest."""
    if _TRACE is not None:
        with contextlib.suppress(OSError):
            _TRACE.seek(0)
            _TRACE.truncate()
            _TRACE.flush()


def fatal(message: str) -> None:
    """Why this process is about to be killed, and every thread's stack, into the trace
    (read as ``how_it_ended`` and ``crash_site``)."""
    if _TRACE is None:
        return
    import faulthandler

    with contextlib.suppress(Exception):
        _TRACE.write(f"Fatal Python error: {message}\n")
        _TRACE.flush()
        faulthandler.dump_traceback(file=_TRACE, all_threads=True)
        _TRACE.flush()


def event(kind: str, **data: Any) -> None:
    """A progress line for the parent (``started``: the job's clock starts; ``building``:
    the class being built, its file and line)."""
    out = sys.__stdout__
    if out is None:
        return
    out.write(EVENT_MARK + json.dumps({"event": kind, **data}, default=str) + "\n")
    out.flush()


# -- parent side ----------------------------------------------------------------------------


class TraceFile:
    """The trace file of one worker process: made before it starts, removed with it."""

    def __init__(self) -> None:
        handle, self.path = tempfile.mkstemp(prefix="prefixlint-worker-", suffix=".trace")
        os.close(handle)

    def read(self) -> str:
        try:
            return Path(self.path).read_text("utf-8", "replace")
        except OSError:
            return ""

    def request_dump(self, pid: int) -> None:
        """Ask a live worker for its stacks and wait (briefly) until they are written."""
        if DUMP_SIGNAL is None:
            return
        before = self.read()
        try:
            os.kill(pid, DUMP_SIGNAL)
        except OSError:
            return
        end = time.monotonic() + DUMP_WAIT
        last = before
        while time.monotonic() < end:
            time.sleep(0.2)
            text = self.read()
            if text != before and text == last:
                return  # written, and no longer growing
            last = text

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.path)


_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
_THREAD = re.compile(r"^(Current thread|Thread) 0x[0-9a-f]+")


def _threads(text: str) -> list[list[tuple[str, int, str]]]:
    """The stacks in a faulthandler dump, each innermost frame first."""
    out: list[list[tuple[str, int, str]]] = []
    for line in text.splitlines():
        if _THREAD.match(line) or line.startswith("Stack (most recent call first)"):
            out.append([])
            continue
        m = _FRAME.match(line)
        if m:
            if not out:
                out.append([])
            out[-1].append((m["file"], int(m["line"]), m["func"]))
    return [t for t in out if t]


def crash_site(text: str, prefer: list[str] | str = ()) -> tuple[str, int] | None:
    """The innermost frame of the model's code in a faulthandler dump, of the stack that
    runs the worker's job: in the folder of a file of ``prefer`` (the class's file, a file
    target), else in vLLM's model folders. None when no frame is the model's: a frame in
    some other package (an import of torchvision that hung) is never taken for it."""
    stacks = _threads(text)
    if not stacks:
        return None
    job = [s for s in stacks if any(f.endswith("introspect/process/server.py") for f, _, _ in s)]
    stack = (job or stacks)[0]
    model = [(f, n) for f, n, _ in stack if model_code(f)]
    wanted = [prefer] if isinstance(prefer, str) else list(prefer)
    folders = [str(Path(p).resolve().parent) + os.sep for p in wanted if p]
    for f, n in model:
        if any(str(Path(f).resolve()).startswith(folder) for folder in folders):
            return f, n
    for f, n in model:
        if in_vllm_models(f):
            return f, n
    return None


def how_it_ended(text: str) -> str:
    """The first line of the dump that says why (``Segmentation fault``, ``os._exit(3)``)."""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("Fatal Python error:"):
            return line.removeprefix("Fatal Python error:").strip()
        if line.startswith("os._exit("):
            return line.removesuffix(" called")
    return ""
