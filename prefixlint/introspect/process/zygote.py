"""The zygote: a process that has imported torch and vLLM and forks one worker per call.

``python -m prefixlint.introspect.process.zygote SOCKET`` takes the lock beside SOCKET (one
zygote per key; a second one exits at once), listens, does the set-up a cold worker does
before its first job (``server.set_up``: nothing of the user's model), then serves. Each
connection hands it three descriptors (the child's stdin, stdout and stderr), the caller's
environment and working folder; it forks a child, answers ``{"pid": ...}`` and, when the
child ends, ``{"exit": code}``. The child takes the caller's environment where it differs
from the zygote's start, and serves jobs as a cold worker (``server.serve``). Once idle
after its first child, the zygote builds one of vLLM's own models (``server.warm_up_build``)
so that later children do not pay a first build's one-time costs. The zygote
stops after ``PREFIXLINT_WARM_IDLE`` seconds without a child (default 600), on a ``stop``
request, or when its socket is removed or replaced. Linux and macOS (``fork``).
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import select
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

from prefixlint.introspect.process.server import warm_up_build
from prefixlint.introspect.process.warm import DEFAULT_IDLE, IDLE_ENV, address, read_line

WARMED = "prefixlint zygote: warmed up"  # its log's line once the warm-up build ran


class Zygote:
    def __init__(self, sock: Path, lock: Any) -> None:
        self.sock = sock
        self.lock = lock  # held for life; a child must not hold it
        self.start_env = dict(os.environ)  # before set-up: a child's differences apply to it
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.children: dict[int, socket.socket] = {}  # pid -> its caller's connection
        self.served = 0
        self.warmed = False  # the warm-up build ran (server.warm_up_build)
        self.idle = float(os.environ.get(IDLE_ENV) or DEFAULT_IDLE)
        self.last = time.monotonic()
        self.inode = 0

    def bind(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.sock.unlink()  # stale: its zygote no longer holds the lock
        old = os.umask(0o177)  # only this user may connect
        try:
            self.listener.bind(address(self.sock))
        finally:
            os.umask(old)
        self.listener.listen(16)
        self.inode = self.sock.stat().st_ino

    def gone(self) -> bool:
        """The socket was removed or replaced: no caller can reach this zygote."""
        try:
            return self.sock.stat().st_ino != self.inode
        except OSError:
            return True

    def reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            self.last = time.monotonic()
            if conn is not None:
                with contextlib.suppress(OSError):
                    code = os.waitstatus_to_exitcode(status)
                    conn.sendall(json.dumps({"exit": code}).encode() + b"\n")
                conn.close()

    def loop(self) -> None:
        while True:
            self.reap()
            if not self.children and time.monotonic() - self.last > self.idle:
                return
            if self.served and not self.warmed and not self.children:
                # after the first call, not before it: that call does not wait for it
                self.warmed = True
                began = time.monotonic()
                warm_up_build()
                print(f"{WARMED} in {time.monotonic() - began:.1f} s", file=sys.stderr, flush=True)
                self.last = time.monotonic()
            if self.gone():
                return
            ready, _, _ = select.select([self.listener], [], [], 0.25)
            if ready:
                conn, _ = self.listener.accept()
                if self.answer(conn) == "stop":
                    return

    def answer(self, conn: socket.socket) -> str:
        conn.settimeout(10)
        try:
            if not _same_user(conn):
                conn.close()
                return ""
            head, fds, _, _ = socket.recv_fds(conn, 1, 3)
            request = json.loads(read_line(conn, 65536))
        except (OSError, ValueError):
            conn.close()
            return ""
        if head == b"S" or request.get("op") == "stop":
            self.stop_children()
            conn.close()
            return "stop"
        if len(fds) != 3:
            for fd in fds:
                os.close(fd)
            conn.close()
            return ""
        self.fork(conn, fds, request)
        return "fork"

    def fork(self, conn: socket.socket, fds: list[int], request: dict[str, Any]) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                self.listener.close()
                self.lock.close()
                for other in self.children.values():
                    other.close()
                conn.close()
                child(fds, request.get("env") or {}, self.start_env)
            except BaseException:  # the child must never return into the loop
                code = 70
            finally:
                os._exit(code)
        for fd in fds:
            os.close(fd)
        self.served += 1
        self.children[pid] = conn
        conn.settimeout(None)
        with contextlib.suppress(OSError):
            reply = {"pid": pid, "zygote": os.getpid(), "served": self.served}
            conn.sendall(json.dumps(reply).encode() + b"\n")

    def stop_children(self) -> None:
        for pid in list(self.children):
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        end = time.monotonic() + 10
        while self.children and time.monotonic() < end:
            self.reap()
            time.sleep(0.02)


def _same_user(conn: socket.socket) -> bool:
    """A caller of another user must not make this process import its files."""
    opt = getattr(socket, "SO_PEERCRED", None)
    if opt is None:
        return True  # the socket's mode (0600) keeps others out
    import struct

    creds = conn.getsockopt(socket.SOL_SOCKET, opt, struct.calcsize("3i"))
    _, uid, _ = struct.unpack("3i", creds)
    return uid == os.getuid()


def child(fds: list[int], env: dict[str, str], start_env: dict[str, str]) -> None:
    """In the forked child: become a worker of the caller, then serve its jobs."""
    os.setsid()  # its own group, as a cold worker's: the watchdog kills it whole
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    # The caller's environment where it differs from the zygote's start (its TMPDIR,
    # trace file); what vLLM's imports set in the zygote stays, as in a cold worker.
    for name in set(env) | set(start_env):
        if env.get(name) != start_env.get(name):
            if name in env:
                os.environ[name] = env[name]
            else:
                os.environ.pop(name, None)
    import tempfile

    tempfile.tempdir = None  # read TMPDIR again
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.FileIO(0, "r"), encoding="utf-8")
    out = io.TextIOWrapper(io.FileIO(1, "w"), encoding="utf-8", write_through=True)
    sys.stdout = sys.__stdout__ = out
    err = io.TextIOWrapper(io.FileIO(2, "w"), encoding="utf-8", write_through=True)
    sys.stderr = sys.__stderr__ = err
    from prefixlint.introspect.process.server import serve

    serve()


def main(argv: list[str]) -> None:
    sock = Path(argv[0])
    lock = open(sock.with_suffix(".lock"), "a+", encoding="utf-8")  # noqa: SIM115 (held for life)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return  # another zygote of this key serves: the caller connects to it
    lock.truncate(0)
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    zygote = Zygote(sock, lock)
    zygote.bind()  # callers may connect (and wait) while the imports run
    from prefixlint.introspect.process.server import set_up

    set_up()  # a failure ends it here, with the traceback in its log for the note
    zygote.last = time.monotonic()
    try:
        zygote.loop()
    finally:
        zygote.stop_children()
        if not zygote.gone():
            with contextlib.suppress(OSError):
                sock.unlink()
        zygote.listener.close()
        for name in (".log", ".lock"):
            with contextlib.suppress(OSError):
                sock.with_suffix(name).unlink()
        import shutil

        shutil.rmtree(sock.with_suffix(".tmp"), ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
