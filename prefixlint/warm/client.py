"""The caller's side of a zygote (``zygote.py``): find or start the zygote of a key in the
user's warm folder, ask it for a child, stop zygotes. Standard library only: the command
line's launcher (``cli.py``) imports it before anything else.

A zygote's socket is named by its kind and a key of everything its imports depend on (the
Python, where prefixlint is imported from, the environment less what differs from call to
call; phase 2 adds the installed packages and prefixlint's sources): a changed key is
another socket, so a zygote is never reused across such a change. The working folder is
not in the key (a child runs in its caller's folder, which is not on its ``sys.path``), so
one zygote serves every folder of an environment. The folder is the user's own
(``home``): at most ``PREFIXLINT_WARM_MAX`` zygotes (default 3) live in it at once, the
least recently used retiring for a new one (``registry.make_room``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

WARM_ENV = "PREFIXLINT_WARM_WORKER"  # "0": no warm process of any kind
IDLE_ENV = "PREFIXLINT_WARM_IDLE"  # seconds an unused zygote lives (default: its kind's)
DEFAULT_IDLE = 600.0  # a kind that says nothing (phase 2's: 300 s, the command line's: 1800 s)
DIR_ENV = "PREFIXLINT_WARM_DIR"  # the folder of the user's zygotes (default: ``home``)
# Seconds a zygote may take for its imports before its first child.
STARTUP_ALLOWANCE = 300.0
# What differs from one call to the next without changing what the zygote imported:
# left out of the key, and set in each child from the caller's environment.
VOLATILE = ("TMPDIR", "TEMP", "TMP", "PWD", "OLDPWD", "SHLVL", "_", "COLUMNS", "LINES")
VOLATILE_PREFIXES = ("PYTEST_", "PREFIXLINT_WORKER_", "PREFIXLINT_WARM_", "TERM", "SSH_")


class WarmUnavailable(Exception):
    """No warm process this time (the caller does the work itself)."""


def warm_off() -> bool:
    """``PREFIXLINT_WARM_WORKER=0`` (or no, false, off)."""
    return os.environ.get(WARM_ENV, "1").strip().lower() in ("0", "no", "false", "off")


def volatile(name: str) -> bool:
    return name in VOLATILE or name.startswith(VOLATILE_PREFIXES)


def kill_group(pid: int) -> None:
    """SIGKILL a child that leads its own process group (what it started goes too), and
    the child itself should it not have made that group yet."""
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)


def home() -> Path:
    """The user's warm folder: ``$PREFIXLINT_WARM_DIR``, else ``$XDG_RUNTIME_DIR/prefixlint``
    (a per-user tmpfs, gone at log-out), else ``~/.cache/prefixlint/warm``. Never the
    working folder: a zygote serves every folder, and a run that fails writes nothing
    there."""
    given = os.environ.get(DIR_ENV)
    if given:
        return Path(given)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return Path(runtime) / "prefixlint"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "prefixlint" / "warm"


def source_root() -> str:
    """The folder prefixlint is imported from: a zygote started there (``python -m``) imports
    this prefixlint, as its caller did."""
    return str(Path(__file__).resolve().parents[2])


def key(env: dict[str, str], **more: Any) -> str:
    """A short digest of the Python, where prefixlint comes from, the environment less its
    volatile names, and ``more``."""
    parts = {
        "python": [sys.executable, sys.version, sys.prefix],
        "prefixlint": source_root(),
        "env": sorted((k, v) for k, v in env.items() if not volatile(k)),
        **more,
    }
    return hashlib.blake2b(json.dumps(parts).encode(), digest_size=8).hexdigest()


def paths(folder: Path, name: str) -> dict[str, Path]:
    base = folder.resolve() / f"zygote-{name}"
    return {s: base.with_suffix(f".{s}") for s in ("sock", "lock", "log", "tmp", "json")}


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


def connect(sock: Path) -> socket.socket | None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(address(sock))
        return s
    except OSError:
        s.close()
        return None


def read_line(conn: socket.socket, chunk: int = 1) -> str:
    """One line from ``conn``, ``chunk`` bytes at a time. The client reads a reply one byte
    at a time: the child's exit may follow at once; the zygote reads a request, the only
    thing its caller sends, in large chunks."""
    data = b""
    while not data.endswith(b"\n"):
        part = conn.recv(chunk)
        if not part:
            break
        data += part
    return data.decode()


def make_folder(folder: Path) -> None:
    """The warm folder, this user's only."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)


def start(
    files: dict[str, Path], kind: str, env: dict[str, str], limit: int | None = None
) -> subprocess.Popen:
    """Start the zygote of ``files`` (``kind``: the module that says what it imports and
    what its children do), after the least recently used ones retire to keep the bound
    (``limit``: of this kind; see ``registry.make_room``); it outlives the caller."""
    from prefixlint.warm.registry import make_room

    make_folder(files["sock"].parent)
    make_room(files["sock"].parent, kind, limit, lambda sock: ask(sock, "retire", 10))
    files["tmp"].mkdir(parents=True, exist_ok=True)
    # Without what differs from call to call (each child gets its caller's): a first
    # caller's worker trace file, armed in the zygote, would be every child's (their
    # os._exit and crashes then said nothing of the model's line). Its own temp root.
    zenv = {k: v for k, v in env.items() if not volatile(k)}
    if IDLE_ENV in env:  # not in the key, but the zygote reads it (it was left out: 300 s)
        zenv[IDLE_ENV] = env[IDLE_ENV]
    zenv["TMPDIR"] = str(files["tmp"])
    with open(files["log"], "w", encoding="utf-8") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "prefixlint.warm.zygote", str(files["sock"]), kind],
            cwd=source_root(),  # ``-m`` puts it first on sys.path: the caller's prefixlint
            env=zenv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,  # it outlives this command, and Ctrl-C is not for it
        )


def connect_or_start(
    files: dict[str, Path], kind: str, env: dict[str, str], limit: int | None = None
) -> socket.socket:
    """A connection to the zygote of ``files``, started (and waited for) when none
    listens."""
    conn = connect(files["sock"])
    if conn is not None:
        return conn
    started = start(files, kind, env, limit)
    end = time.monotonic() + 30  # it binds before it imports anything heavy
    while time.monotonic() < end:
        conn = connect(files["sock"])
        if conn is not None:
            return conn
        if started.poll() not in (None, 0):  # 0: another zygote of this key won the lock
            raise WarmUnavailable(f"the zygote exited; see {files['log']}")
        time.sleep(0.05)
    raise WarmUnavailable("the zygote did not start listening")


def request_fork(conn: socket.socket, fds: list[int], request: dict[str, Any]) -> dict[str, Any]:
    """Hand the zygote the child's stdin, stdout and stderr and ``request``; its answer:
    ``{"pid": ...}`` or ``{"error": ..., "stale": ...}``. ``stale`` (connect again, once:
    a new zygote serves) also when the connection was reset or closed unanswered: the
    zygote retired or stopped between the connect and the request."""
    try:
        socket.send_fds(conn, [b"F"], fds)
        conn.sendall(json.dumps({"op": "fork", **request}).encode() + b"\n")
        conn.settimeout(STARTUP_ALLOWANCE)
        reply = read_line(conn)
        conn.settimeout(None)
        return json.loads(reply) if reply else {"error": "the zygote went away", "stale": True}
    except TimeoutError as e:
        return {"error": f"the zygote did not answer: {e}"}
    except (OSError, ValueError) as e:
        return {"error": f"the zygote did not answer: {e}", "stale": True}


def ask(sock: Path, op: str, wait: float = 30) -> bool:
    """Send ``op`` (``stop``: it ends now, with the children it serves; ``retire``: it
    serves no one else and ends when its children have) to the zygote of ``sock`` and wait
    until it closes the connection; False when none listens there."""
    conn = connect(sock)
    if conn is None:
        return False
    with conn, contextlib.suppress(OSError):
        conn.sendall(b"S" + json.dumps({"op": op}).encode() + b"\n")
        conn.settimeout(wait)
        conn.recv(1)  # closed when it has stopped (or retired)
    return True


def stop(folder: Path) -> int:
    """Stop every zygote listening in ``folder`` (and the children it is serving); how
    many there were."""
    socks = sorted(folder.glob("zygote-*.sock")) if folder.is_dir() else []
    return sum(ask(sock, "stop") for sock in socks)
