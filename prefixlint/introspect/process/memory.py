"""A worker's memory: bounded while it builds, and its peak read by the parent.

A meta-device build holds no weights, yet a worker once reached 14 GB resident (issue 30).
``watch_memory`` (in the worker) reads the resident size from ``/proc/self/statm`` twice a
second and, past the bound (``PREFIXLINT_WORKER_MAX_RSS_MB``, default 8192; 0: none),
writes why and every thread's stack into the crash trace and kills its own process: the
parent reports the build as dead at the line it was at. Resident size, not ``RLIMIT_AS``:
torch reserves far more address space than it uses. ``peak_rss_mb`` (in the parent) reads
a live worker's high-water mark (``VmHWM``), which ``reset_peak`` (in the worker, as a job
starts) restarts: the mark read after a job is that job's own peak, one per architecture.
Linux only; elsewhere none of them does anything.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import signal
import threading
import time
from pathlib import Path

LIMIT_ENV = "PREFIXLINT_WORKER_MAX_RSS_MB"
# Room for the parent and a second worker on a 24 GB machine. Builds peak near 1.5 GB since
# the dry-run's recorder stopped holding a byte per element of the model (Molmo: 12 GB+
# before, 1 GB after; docs/precision.md): 8 GB is headroom, not a figure any build needs.
DEFAULT_LIMIT_MB = 8192
# The words a worker stopped at its bound dies with (``_watch``): a tool limit, not the
# model's defect, so the parent says "not verified" (``over_bound``).
OVER_BOUND = "worker memory over its bound"
INTERVAL = 0.5  # seconds between two reads


def _status_mb(pid: int, key: str) -> float | None:
    """A ``kB`` field of ``/proc/PID/status`` in MB (None: not readable)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def peak_rss_mb(pid: int) -> float | None:
    """The high-water mark of ``pid``'s resident memory since it started or since its
    last ``reset_peak``, in MB (None: not readable)."""
    return _status_mb(pid, "VmHWM")


def rss_mb(pid: int) -> float | None:
    """``pid``'s resident memory now, in MB (None: not readable)."""
    return _status_mb(pid, "VmRSS")


def resident_mb() -> float | None:
    """This process's resident memory now, in MB."""
    return rss_mb(os.getpid())


def reset_peak() -> None:
    """Restart this process's high-water mark (Linux's ``clear_refs`` 5), so that the
    mark read after a job is that job's peak, not the largest of every job before."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def release() -> None:
    """Give back what a finished job left: a build's modules and tensors in reference
    cycles wait for the collector, and glibc keeps freed heap pages. Ernie4.5-VL-MoE's
    build left 790 MB resident; after this, 64 MB (docs/precision.md)."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # glibc only
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _limit() -> float:
    try:
        return float(os.environ.get(LIMIT_ENV) or DEFAULT_LIMIT_MB)
    except ValueError:
        return float(DEFAULT_LIMIT_MB)


def _watch(limit: float) -> None:
    from prefixlint.introspect.process import crash

    while True:
        time.sleep(INTERVAL)
        rss = resident_mb()
        if rss is not None and rss > limit:
            crash.fatal(
                f"{OVER_BOUND} of {limit:.0f} MB ({rss:.0f} MB resident; "
                f"{LIMIT_ENV} sets the bound)"
            )
            os.kill(os.getpid(), signal.SIGKILL)


def watch_memory() -> None:
    limit = _limit()
    if limit > 0 and resident_mb() is not None:
        threading.Thread(target=_watch, args=(limit,), daemon=True, name="memory").start()


def over_bound(message: str) -> bool:
    """A worker's death message says it was stopped at its memory bound."""
    return OVER_BOUND in message
