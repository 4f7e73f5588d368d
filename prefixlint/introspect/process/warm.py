"""The parent's side of a warm worker: a worker forked from a zygote that already imported
torch and vLLM, so that phase 2 does not pay those imports on every call (issue 27).

The zygote (``zygote.py``) listens on a unix socket in the cache folder whose name holds a
key of everything its imports depend on: the Python, the installed vLLM and torch,
prefixlint's own sources, the working folder and the environment (less what differs from
call to call, such as ``TMPDIR``). A changed key is another socket, so a zygote is never
reused across a change; the old one stops after its idle time. ``spawn`` connects (starting
the zygote when none listens), hands it the child's stdin, stdout and stderr and the
environment, and gets back the child's pid; the child then serves jobs exactly as a cold
worker does (``server.serve``). Light: imports neither torch nor vLLM.
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
import time
from importlib import metadata
from pathlib import Path
from typing import IO, Any

WARM_ENV = "PREFIXLINT_WARM_WORKER"  # "0": cold workers only
IDLE_ENV = "PREFIXLINT_WARM_IDLE"  # seconds an unused zygote lives (default: 600)
DEFAULT_IDLE = 600.0
# Seconds a zygote may take to import torch and vLLM before its first child.
STARTUP_ALLOWANCE = 300.0
# What differs from one call to the next without changing what the zygote imported:
# left out of the key, and set in each child from the caller's environment.
VOLATILE = ("TMPDIR", "TEMP", "TMP", "PWD", "OLDPWD", "SHLVL", "_", "COLUMNS", "LINES")
VOLATILE_PREFIXES = ("PYTEST_", "PREFIXLINT_WORKER_", "PREFIXLINT_WARM_", "TERM", "SSH_")
_PACKAGE = Path(__file__).resolve().parents[2]  # prefixlint/
_noted: set[str] = set()


class WarmUnavailable(Exception):
    """No warm worker this time (the caller starts a cold one)."""


def warm_folder(off: bool, cache_dir: Path | None = None) -> Path | None:
    """Where a command's zygote lives (``cache_dir``, else ``$PREFIXLINT_CACHE_DIR``, else
    ``./.prefixlint_cache``, as ``check``'s results cache), or None when warm workers are
    off: ``off`` (the ``--no-warm-worker`` flag) or ``PREFIXLINT_WARM_WORKER=0``."""
    if off or os.environ.get(WARM_ENV, "1").strip().lower() in ("0", "no", "false", "off"):
        return None
    from prefixlint.static.cache import ResultCache

    return cache_dir or ResultCache.default_folder()


def note_fallback(reason: str) -> None:
    """Once per reason and process: the warm worker failed, a cold one builds instead."""
    if reason not in _noted:
        _noted.add(reason)
        sys.stderr.write(f"prefixlint: no warm worker ({reason}); starting a cold one\n")


def volatile(name: str) -> bool:
    return name in VOLATILE or name.startswith(VOLATILE_PREFIXES)


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


def key(cwd: str, env: dict[str, str]) -> str:
    """What a zygote's imports depend on, as a short digest."""
    parts = {
        "python": [sys.executable, sys.version, sys.prefix],
        "packages": [_distribution(n) for n in ("vllm", "torch", "transformers")],
        "prefixlint": _sources_digest(),
        "cwd": cwd,
        "env": sorted((k, v) for k, v in env.items() if not volatile(k)),
    }
    return hashlib.blake2b(json.dumps(parts).encode(), digest_size=8).hexdigest()


def paths(folder: Path, name: str) -> dict[str, Path]:
    base = folder.resolve() / f"zygote-{name}"
    return {s: base.with_suffix(f".{s}") for s in ("sock", "lock", "log", "tmp")}


def address(sock: Path) -> str:
    """A path ``bind``/``connect`` accept: a unix socket path has ~107 bytes at most, so a
    long one is reached through its folder's descriptor (kept open by the caller)."""
    text = str(sock)
    if len(text.encode()) < 100:
        return text
    fd = os.open(sock.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    _open_dirs.append(fd)  # the path stays valid while this process lives
    return f"/proc/self/fd/{fd}/{sock.name}"


_open_dirs: list[int] = []


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
        with contextlib.suppress(OSError):
            os.killpg(self.pid, 9)
        with contextlib.suppress(OSError):
            os.kill(self.pid, 9)

    def close(self) -> None:
        for f in (self.stdin, self.stdout, self.conn):
            with contextlib.suppress(OSError):
                f.close()


def _connect(sock: Path) -> socket.socket | None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(address(sock))
        return s
    except OSError:
        s.close()
        return None


def read_line(conn: socket.socket, chunk: int = 1) -> str:
    """One line from ``conn``, ``chunk`` bytes at a time. The client reads a reply one byte
    at a time: the child's exit may follow at once, for ``_watch``; the zygote reads a
    request, the only thing its caller sends, in large chunks."""
    data = b""
    while not data.endswith(b"\n"):
        part = conn.recv(chunk)
        if not part:
            break
        data += part
    return data.decode()


def _start_zygote(files: dict[str, Path], cwd: str, env: dict[str, str]) -> subprocess.Popen:
    files["tmp"].mkdir(parents=True, exist_ok=True)
    # its own temp root (the callers' differ, and each child gets its caller's)
    zenv = {**env, "TMPDIR": str(files["tmp"])}
    with open(files["log"], "w", encoding="utf-8") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "prefixlint.introspect.process.zygote", str(files["sock"])],
            cwd=cwd,
            env=zenv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,  # it outlives this command, and Ctrl-C is not for it
        )


def _zygote(files: dict[str, Path], cwd: str, env: dict[str, str]) -> socket.socket:
    """A connection to the zygote of this key, started when none listens."""
    conn = _connect(files["sock"])
    if conn is not None:
        return conn
    files["sock"].parent.mkdir(parents=True, exist_ok=True)
    started = _start_zygote(files, cwd, env)
    end = time.monotonic() + 30  # it binds before it imports anything heavy
    while time.monotonic() < end:
        conn = _connect(files["sock"])
        if conn is not None:
            return conn
        if started.poll() not in (None, 0):  # 0: another zygote of this key won the lock
            raise WarmUnavailable(f"the zygote exited; see {files['log']}")
        time.sleep(0.05)
    raise WarmUnavailable("the zygote did not start listening")


def spawn(folder: Path, env: dict[str, str], stderr: int) -> WarmProcess:
    """A worker forked from the zygote in ``folder`` for ``env``; its stderr to ``stderr``
    (a descriptor). Raises WarmUnavailable when there is none to be had. A zygote that
    finds a file it imported changed retires: a new one is started, once."""
    cwd = os.getcwd()
    files = paths(folder, key(cwd, env))
    info: dict[str, Any] = {}
    for _ in range(2):
        try:
            conn = _zygote(files, cwd, env)
        except OSError as e:
            raise WarmUnavailable(f"cannot start the zygote: {e}") from None
        stdin_w, stdout_r, info = _fork_request(conn, env, cwd, stderr)
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


def _fork_request(
    conn: socket.socket, env: dict[str, str], cwd: str, stderr: int
) -> tuple[int, int, dict[str, Any]]:
    """Ask the zygote for a child: (its stdin's write end, its stdout's read end, the
    zygote's answer)."""
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    try:
        socket.send_fds(conn, [b"F"], [stdin_r, stdout_w, stderr])
        request = {"op": "fork", "env": env, "cwd": cwd}
        conn.sendall(json.dumps(request).encode() + b"\n")
        conn.settimeout(STARTUP_ALLOWANCE)
        reply = read_line(conn)
        conn.settimeout(None)
        info = json.loads(reply) if reply else {}
    except (OSError, ValueError) as e:
        info = {"error": f"the zygote did not answer: {e}"}
    finally:
        os.close(stdin_r)
        os.close(stdout_w)
    return stdin_w, stdout_r, info


def stop(folder: Path) -> int:
    """Stop every zygote listening in ``folder`` (and the children it is serving); how
    many there were."""
    stopped = 0
    for sock in sorted(folder.glob("zygote-*.sock")) if folder.is_dir() else []:
        conn = _connect(sock)
        if conn is None:
            continue
        with conn:
            with contextlib.suppress(OSError):
                conn.sendall(b"S" + json.dumps({"op": "stop"}).encode() + b"\n")
                conn.settimeout(30)
                conn.recv(1)  # closed when it has stopped
            stopped += 1
    return stopped
