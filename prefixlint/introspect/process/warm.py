"""The parent's side of a warm worker: a worker forked from a zygote that already imported
torch and vLLM, so that phase 2 does not pay those imports on every call (issue 27).

The zygote (``prefixlint/warm/zygote.py``, kind ``forked.py``) listens on a unix socket in
the user's warm folder (``client.home``) whose name holds a key of everything its imports
depend on: the Python, the installed vLLM, torch and transformers, prefixlint's own
sources and the environment (less what differs from call to call, such as ``TMPDIR``; not
the working folder, which a worker never has on its ``sys.path``); it also retires when a
file it imported changed. At most ``MAX`` of them live at once. ``spawn``
connects (starting the zygote when none listens), hands it the child's stdin, stdout and
stderr and the environment, and gets back the child's pid; the child then serves jobs
exactly as a cold worker does (``server.serve``). Light: imports neither torch nor vLLM.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
from importlib import metadata
from pathlib import Path
from typing import IO, Any

from prefixlint.warm import client
from prefixlint.warm.client import IDLE_ENV, WARM_ENV, WarmUnavailable, stop

__all__ = ["IDLE_ENV", "WARM_ENV", "WarmProcess", "WarmUnavailable", "spawn", "stop"]
KIND = "prefixlint.introspect.process.forked"  # what its zygote imports and its children do
# Phase-2 zygotes alive at once (each holds ~650 MB): two environments stay warm; the
# bound of all kinds is ``registry.DEFAULT_MAX``.
MAX = 2
_PACKAGE = Path(__file__).resolve().parents[2]  # prefixlint/
_noted: set[str] = set()


def warm_folder(off: bool) -> Path | None:
    """Where the user's zygotes live (``client.home``), or None when warm workers are off:
    ``off`` (the ``--no-warm-worker`` flag) or ``PREFIXLINT_WARM_WORKER=0``."""
    if off or client.warm_off():
        return None
    return client.home()


def note_fallback(reason: str) -> None:
    """Once per reason and process: the warm worker failed, a cold one builds instead."""
    if reason not in _noted:
        _noted.add(reason)
        sys.stderr.write(f"prefixlint: no warm worker ({reason}); starting a cold one\n")


def _sources_digest() -> str:
    digest = hashlib.blake2b(digest_size=16)
    for path in sorted(_PACKAGE.rglob("*.py")):
        digest.update(str(path.relative_to(_PACKAGE)).encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _distribution(name: str) -> list[Any]:
    """The installed release of ``name`` and its metadata folder's time (a reinstall of
    the same version makes a new one), found without importing it."""
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return [name, None]
    folder = getattr(dist, "_path", None)
    try:
        stamp = os.stat(folder).st_mtime_ns if folder is not None else None
    except OSError:
        stamp = None
    return [name, dist.version, str(folder), stamp]


def key(env: dict[str, str]) -> str:
    """What a phase-2 zygote's imports depend on, as a short digest."""
    packages = [_distribution(n) for n in ("vllm", "torch", "transformers")]
    return client.key(env, packages=packages, sources=_sources_digest())


class WarmProcess:
    """A worker forked by a zygote, used as ``Worker`` uses a ``subprocess.Popen``."""

    def __init__(self, conn: socket.socket, pid: int, stdin: IO[str], stdout: IO[str]) -> None:
        self.conn, self.pid, self.stdin, self.stdout = conn, pid, stdin, stdout
        self.returncode: int | None = None
        self.info: dict[str, Any] = {}
        self._done = threading.Event()
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        """The zygote says how the child ended; a zygote that went away: as SIGKILL."""
        code = -9
        with contextlib.suppress(OSError, ValueError):
            for line in self.conn.makefile("r", encoding="utf-8"):
                message = json.loads(line)
                if "exit" in message:
                    code = int(message["exit"])
                    break
        self.returncode = code
        self._done.set()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._done.wait(timeout):
            raise subprocess.TimeoutExpired("warm worker", timeout or 0)
        return self.returncode if self.returncode is not None else -9

    def kill(self) -> None:
        if self.returncode is not None:
            return  # reaped by the zygote: its number may be another process's now
        client.kill_group(self.pid)

    def close(self) -> None:
        for f in (self.stdin, self.stdout, self.conn):
            with contextlib.suppress(OSError):
                f.close()


def spawn(folder: Path, env: dict[str, str], stderr: int) -> WarmProcess:
    """A worker forked from the zygote in ``folder`` for ``env``; its stderr to ``stderr``
    (a descriptor). Raises WarmUnavailable when there is none to be had. A zygote that
    finds a file it imported changed retires: a new one is started, once."""
    cwd = os.getcwd()
    files = client.paths(folder, key(env))
    info: dict[str, Any] = {}
    for _ in range(2):
        try:
            conn = client.connect_or_start(files, KIND, env, MAX)
        except OSError as e:
            raise WarmUnavailable(f"cannot start the zygote: {e}") from None
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        try:
            info = client.request_fork(conn, [stdin_r, stdout_w, stderr], {"env": env, "cwd": cwd})
        finally:
            os.close(stdin_r)
            os.close(stdout_w)
        if "pid" in info:
            proc = WarmProcess(
                conn,
                int(info["pid"]),
                open(stdin_w, "w", encoding="utf-8"),  # noqa: SIM115 (closed with the worker)
                open(stdout_r, encoding="utf-8"),  # noqa: SIM115
            )
            proc.info = info
            return proc
        for fd in (stdin_w, stdout_r):
            os.close(fd)
        conn.close()
        if not info.get("stale"):
            break
    raise WarmUnavailable(info.get("error") or "the zygote went away")
