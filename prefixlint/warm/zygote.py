"""The zygote: a process that did a kind of work's imports once and forks one child per call.

``python -m prefixlint.warm.zygote SOCKET KIND`` takes the lock beside SOCKET (one zygote
per key; a second one exits at once), listens, runs ``KIND.set_up()`` (KIND is a module:
phase 2's ``prefixlint.introspect.process.forked`` or the CLI's ``prefixlint.warm.cli``;
nothing of the user's is read), then serves. Each connection hands it three descriptors
(the child's stdin, stdout and stderr) and a request with the caller's environment and
working folder; it forks a child, answers ``{"pid": ...}`` and, when the child ends,
``{"exit": code}``. The child takes the caller's environment where it differs from the
zygote's start and runs ``KIND.child(request)``. Once idle after its first child, it runs
``KIND.warm_up()`` when the kind has one (phase 2 builds one of vLLM's own models), so that
later children do not pay a first job's one-time costs; a caller who connects meanwhile
stops it and is served at once (it runs again at the next idle moment). Before each fork
it checks that no file it imported changed (an edited editable install): if one did, it
retires and the caller starts a new one. It stops after ``PREFIXLINT_WARM_IDLE`` seconds
without a child (default: its kind's ``IDLE``), on a ``stop`` request, on a ``retire``
request once its children ended (``registry.make_room``), or when its socket is removed or
replaced. It keeps a JSON file beside its socket that ``prefixlint warm status`` reads.
Linux and macOS (``fork``).
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
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from prefixlint.warm.client import DEFAULT_IDLE, IDLE_ENV, address, kill_group, read_line
from prefixlint.warm.registry import write_info

WARMED = "prefixlint zygote: warmed up"  # its log's line once the kind's warm-up ran
WARM_UP_STOPPED = "prefixlint zygote: warm-up stopped for a caller"  # runs again when idle
SERVED = "prefixlint zygote: served"  # its log's line for each child it forks
# The interpreter's own exit, taken before a kind's set-up may wrap ``os._exit`` (phase 2's
# crash trace): a child that returned is not a model that called ``os._exit``.
_exit = os._exit


class Zygote:
    def __init__(self, sock: Path, lock: Any, kind: ModuleType) -> None:
        self.sock = sock
        self.kind = kind
        self.lock = lock  # held for life; a child must not hold it
        self.start_env = dict(os.environ)  # before set-up: a child's differences apply to it
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.children: dict[int, socket.socket] = {}  # pid -> its caller's connection
        self.served = 0
        self.warmed = not hasattr(kind, "warm_up")  # its warm-up ran, or it has none
        # an idle time that fits what it holds: the kind says (phase 2's ~650 MB: 5 min)
        self.idle = float(os.environ.get(IDLE_ENV) or getattr(kind, "IDLE", DEFAULT_IDLE))
        self.info: dict[str, Any] = {
            "pid": os.getpid(),
            "kind": kind.__name__,
            "kind_name": getattr(kind, "NAME", kind.__name__),
            "key": sock.stem.removeprefix("zygote-"),
            "python": sys.executable,
            "started": time.time(),
            "last_used": time.time(),
            "idle_limit_s": self.idle,
            "served": 0,
        }
        self.last = time.monotonic()
        self.inode = 0
        # A child's exit wakes the loop at once (SIGCHLD writes to this pipe): its caller
        # waits for the exit code, and a 0.25 s select timeout cost a closing call that much.
        self.wakeup, self._wakeup_w = os.pipe()
        for fd in (self.wakeup, self._wakeup_w):
            os.set_blocking(fd, False)
        self.imported: dict[str, tuple[int, int]] = {}  # what it imported, as it was then
        self.retired = False  # a file it imported changed: it serves no one any more

    def watch_children(self) -> None:
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        signal.siginterrupt(signal.SIGCHLD, False)  # C code's system calls restart
        signal.set_wakeup_fd(self._wakeup_w)

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
        write_info(self.sock.with_suffix(".json"), self.info)

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
            if not self.children and (self.retired or time.monotonic() - self.last > self.idle):
                return
            if self.served and not self.warmed and not self.children and not self.retired:
                # after the first call, not before it: that call does not wait for it
                self.warm_up()
            if not self.retired and self.gone():
                return
            callers = list(self.children.values())
            ready = self.wait([self.wakeup, *callers] + ([] if self.retired else [self.listener]))
            self.orphans([c for c in callers if c in ready])
            if self.listener in ready and not self.retired:
                conn, _ = self.listener.accept()
                if self.answer(conn) == "stop":
                    return

    def warm_up(self) -> None:
        """The kind's warm-up, when idle. A caller who connects meanwhile stops it: served at
        once (it waited the whole warm-up before, 3 s on an idle machine, tens of seconds on
        a loaded one), and the warm-up runs again at the next idle moment."""
        self.warmed = True  # one that fails is not run again
        began = time.monotonic()
        try:
            with caller_interrupts(self.listener):
                self.kind.warm_up()
        except CallerWaiting:
            self.warmed = False
            said = f"{WARM_UP_STOPPED} after {time.monotonic() - began:.1f} s"
            print(said, file=sys.stderr, flush=True)
            return
        self.imported.update(imported_files(self.imported))
        print(f"{WARMED} in {time.monotonic() - began:.1f} s", file=sys.stderr, flush=True)
        self.last = time.monotonic()

    def wait(self, sources: list[Any]) -> list[Any]:
        """What is ready within 0.25 s: a child's exit (the wake-up pipe, drained), a
        caller's connection, a new caller."""
        ready, _, _ = select.select(sources, [], [], 0.25)
        if self.wakeup in ready:
            with contextlib.suppress(OSError):
                os.read(self.wakeup, 512)
        return ready

    def orphans(self, readable: list[socket.socket]) -> None:
        """A caller sends nothing after its request: a readable connection is one whose
        caller went away (killed, say). Its child goes too, as a cold process would have
        (a static check over a large tree, or phase 2's builds, would run on unseen)."""
        for pid, conn in list(self.children.items()):
            if conn not in readable:
                continue
            try:
                gone = conn.recv(1, socket.MSG_PEEK) == b""
            except OSError:
                gone = True
            if gone:
                kill_group(pid)

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
        if request.get("op") == "retire" and self.children:
            # the least recently used, making room: its children finish, then it ends
            self.retire("retired to make room for another")
            conn.close()
            return ""
        if head == b"S" or request.get("op") in ("stop", "retire"):
            self.stop_children()
            conn.close()
            return "stop"
        moved = changed(self.imported)
        if len(fds) != 3 or moved:
            for fd in fds:
                os.close(fd)
            if moved:
                # A child would run the old code (an edited vLLM, an editable install):
                # the caller starts a new zygote, which imports the files as they are now.
                # Retired first: the caller's next connect cannot reach this one again.
                self.retire(f"{moved} changed since the zygote imported it")
                _answer_stale(conn, f"{moved} changed since the zygote imported it")
            conn.close()
            return ""
        self.fork(conn, fds, request)
        return "fork"

    def retire(self, reason: str) -> None:
        """Serve no one else and leave the key to a new zygote: its socket, lock, log and
        temp folder are the new one's from now on; the children running finish. Callers
        that connected meanwhile (in the listener's backlog) are told to start the new
        one, never left with a reset connection (which would send them to a cold start)."""
        self.retired = True
        if not self.gone():
            with contextlib.suppress(OSError):
                self.sock.unlink()
        self.listener.setblocking(False)
        while True:
            try:
                waiting, _ = self.listener.accept()
            except OSError:
                break
            _answer_stale(waiting, reason)
            waiting.close()
        self.listener.close()
        self.lock.close()

    def fork(self, conn: socket.socket, fds: list[int], request: dict[str, Any]) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                signal.set_wakeup_fd(-1)  # the child's exits are not the zygote's
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                for fd in (self.wakeup, self._wakeup_w):
                    os.close(fd)
                self.listener.close()
                self.lock.close()
                for other in self.children.values():
                    other.close()
                conn.close()
                become_caller(fds, request.get("env") or {}, self.start_env)
                os.chdir(request.get("cwd") or "/")  # its caller's folder, as a cold process
                code = int(self.kind.child(request) or 0)
            except BaseException:  # the child must never return into the loop
                code = 70
            finally:
                _exit(code)
        for fd in fds:
            os.close(fd)
        self.served += 1
        self.children[pid] = conn
        print(f"{SERVED} {self.served}: child {pid}", flush=True)  # its log: one line a call
        self.info.update(last_used=time.time(), served=self.served, folder=request.get("cwd"))
        write_info(self.sock.with_suffix(".json"), self.info)
        conn.settimeout(None)
        with contextlib.suppress(OSError):
            reply = {"pid": pid, "zygote": os.getpid(), "served": self.served}
            conn.sendall(json.dumps(reply).encode() + b"\n")

    def remove_files(self) -> None:
        if not self.gone():
            with contextlib.suppress(OSError):
                self.sock.unlink()
        self.listener.close()
        for name in (".log", ".lock", ".json"):
            with contextlib.suppress(OSError):
                self.sock.with_suffix(name).unlink()
        import shutil

        shutil.rmtree(self.sock.with_suffix(".tmp"), ignore_errors=True)

    def stop_children(self) -> None:
        for pid in list(self.children):
            kill_group(pid)
        end = time.monotonic() + 10
        while self.children and time.monotonic() < end:
            self.reap()
            time.sleep(0.02)


def _answer_stale(conn: socket.socket, reason: str) -> None:
    """Tell a caller this zygote retired: it connects again, to a new one."""
    with contextlib.suppress(OSError):
        conn.setblocking(True)
        conn.sendall(json.dumps({"error": reason, "stale": True}).encode() + b"\n")


def _same_user(conn: socket.socket) -> bool:
    """A caller of another user must not make this process import its files."""
    opt = getattr(socket, "SO_PEERCRED", None)
    if opt is None:
        return True  # the socket's mode (0600) keeps others out
    import struct

    creds = conn.getsockopt(socket.SOL_SOCKET, opt, struct.calcsize("3i"))
    _, uid, _ = struct.unpack("3i", creds)
    return uid == os.getuid()


def imported_files(known: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    """(mtime, size) of the file of every imported module not in ``known``."""
    out: dict[str, tuple[int, int]] = {}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if not isinstance(path, str) or path in known or path in out:
            continue
        with contextlib.suppress(OSError):
            stat = os.stat(path)
            out[path] = (stat.st_mtime_ns, stat.st_size)
    return out


def changed(files: dict[str, tuple[int, int]]) -> str | None:
    """The first of ``files`` that is gone or not as it was."""
    for path, stamp in files.items():
        try:
            stat = os.stat(path)
        except OSError:
            return path
        if (stat.st_mtime_ns, stat.st_size) != stamp:
            return path
    return None


class CallerWaiting(BaseException):
    """A caller connected during the warm-up (a BaseException: the warm-up's own
    ``suppress(Exception)`` must not swallow it)."""


@contextlib.contextmanager
def caller_interrupts(listener: socket.socket, every: float = 0.1) -> Iterator[None]:
    """Raise ``CallerWaiting`` in the block as soon as ``listener`` has a caller waiting:
    a timer looks every ``every`` s (in the main thread, between bytecodes: no thread
    in a process that forks)."""

    def look(signum: int, frame: Any) -> None:
        if select.select([listener], [], [], 0)[0]:
            signal.setitimer(signal.ITIMER_REAL, 0)  # once: nothing fires after the raise
            raise CallerWaiting

    previous = signal.signal(signal.SIGALRM, look)
    signal.siginterrupt(signal.SIGALRM, False)  # C code's system calls restart
    signal.setitimer(signal.ITIMER_REAL, every, every)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def become_caller(fds: list[int], env: dict[str, str], start_env: dict[str, str]) -> None:
    """In the forked child: the caller's stdin, stdout, stderr and environment."""
    os.setsid()  # its own group, as a cold worker's: the watchdog kills it whole
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    # The caller's environment where it differs from the zygote's start (its TMPDIR,
    # trace file); what the kind's imports set in the zygote stays, as in a cold start.
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


def main(argv: list[str]) -> None:
    import importlib

    sock, kind = Path(argv[0]), importlib.import_module(argv[1])
    lock = open(sock.with_suffix(".lock"), "a+", encoding="utf-8")  # noqa: SIM115 (held for life)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return  # another zygote of this key serves: the caller connects to it
    lock.truncate(0)
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    zygote = Zygote(sock, lock, kind)
    zygote.bind()  # callers may connect (and wait) while the imports run
    kind.set_up()  # a failure ends it here, with the traceback in its log for the note
    zygote.imported = imported_files({})
    zygote.watch_children()
    zygote.last = time.monotonic()
    try:
        zygote.loop()
    finally:
        zygote.stop_children()
        if not zygote.retired:  # a retired one's files are its successor's
            zygote.remove_files()


if __name__ == "__main__":
    main(sys.argv[1:])
