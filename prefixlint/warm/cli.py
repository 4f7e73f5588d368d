"""``prefixlint check`` from a warm process: the command line's entry point.

A static ``check`` of one file spends most of its time importing (libcst, the rules and the
static phase: ~0.5 s of ~0.7 s). ``main`` hands such a call to a zygote of this kind
(``prefixlint/warm/zygote.py``) that has done those imports once: its child runs the same
command (``prefixlint.cli``) with the caller's arguments, working folder, environment,
stdin, stdout and stderr (the descriptors themselves: a terminal stays a terminal), and the
caller exits with its exit code. The zygote imports modules only: no file is read and no
result is kept in it, so a child computes what a fresh process computes (the results and
fact caches on disk are the command's own). When no zygote listens, the call runs here and,
when it did its work (exit 0 or 1: not a usage error or Ctrl-C), starts one for the next
call; any failure before the child starts runs the command here. The zygote lives in the
user's warm folder (``client.home``) and serves every working folder of an environment.

Only ``check`` (with ``--introspect`` too: the child is phase 2's client, its builds run in
phase 2's own warm workers), not with ``--no-cache`` or ``--no-warm-worker`` (runs that must
not reuse anything) or ``PREFIXLINT_WARM_WORKER=0``. Ctrl-C, SIGTERM and a hang-up are
passed to the child; a caller that is killed takes its child with it (the zygote watches
its connection). Linux and macOS. Standard library only until the command runs here.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from prefixlint.warm import client

KIND = "prefixlint.warm.cli"
# Options after which ``check`` runs here: a run that asks to reuse nothing.
COLD_OPTIONS = ("--no-cache", "--no-warm-worker")
# What a static ``check`` imports: done once in the zygote (packages: every module).
MODULES = (
    "prefixlint.cli",
    "prefixlint.commands.check",
    "prefixlint.commands.lint",
    "prefixlint.config",
    "prefixlint.noqa",
    "prefixlint.sourcelines",
    "libcst",
    "libcst.metadata",
    "libcst.native",  # the parser, imported on the first parse
    "tomllib",
    "subprocess",
    "concurrent.futures",
)
PACKAGES = ("prefixlint.static", "prefixlint.rules", "prefixlint.reporters")


NAME = "check"  # what ``prefixlint warm status`` calls this kind
IDLE = 1800.0  # seconds unused before it stops: it holds ~35 MB


def main() -> None:
    """The ``prefixlint`` command: a warm child's exit code, else the command run here
    (and, when it did its work, a zygote started for the next call)."""
    argv = sys.argv[1:]
    code = run_warm(argv)
    if code is not None:
        sys.exit(code)
    from prefixlint.cli import main as cli_main

    try:
        cli_main()
    except SystemExit as e:
        if e.code in (None, 0, 1) and eligible(argv):
            start_zygote()  # not after a usage error or Ctrl-C (exit 2): that starts nothing
        raise


def eligible(argv: list[str]) -> bool:
    return (
        bool(argv)
        and argv[0] == "check"
        and not any(a.split("=")[0] in COLD_OPTIONS for a in argv[1:])
        and not client.warm_off()
        and hasattr(os, "fork")
        and hasattr(socket, "send_fds")
    )


def zygote_files() -> dict[str, Path]:
    """This environment's zygote of this kind, in the user's warm folder."""
    return client.paths(client.home(), f"cli-{client.key(dict(os.environ))}")


def start_zygote() -> None:
    """A zygote for the next call, unless one listens (or cannot be started)."""
    files = zygote_files()
    if client.connect(files["sock"]) is None:
        with contextlib.suppress(OSError):
            client.start(files, KIND, dict(os.environ))


def run_warm(argv: list[str]) -> int | None:
    """``prefixlint ARGV`` in a child of this environment's zygote: its exit code, or None
    when the command is to run here (not eligible, no zygote yet, or it failed before the
    child started)."""
    if not eligible(argv):
        return None
    cwd, env = os.getcwd(), dict(os.environ)
    conn = client.connect(zygote_files()["sock"])
    if conn is None:
        return None
    with conn:
        sys.stdout.flush()
        sys.stderr.flush()
        request = {"env": env, "cwd": cwd, "argv": argv, "prog_name": program_name()}
        info = client.request_fork(conn, [0, 1, 2], request)
        if "pid" not in info:
            return None  # a retired zygote (a file it imported changed) or a failure
        return _exit_code(conn, int(info["pid"]))


def program_name() -> str:
    """The name click's usage lines give this command, found as click finds it
    (``click.utils._detect_program_name``): ``prefixlint``, or ``python -m prefixlint``."""
    main = sys.modules.get("__main__")
    path = sys.argv[0] if sys.argv else ""
    package = getattr(main, "__package__", None)
    if package in (None, ""):
        return os.path.basename(path)
    name = os.path.splitext(os.path.basename(path))[0]
    module = package if name == "__main__" else f"{package}.{name}"
    return f"python -m {module.lstrip('.')}"


def _exit_code(conn: socket.socket, pid: int) -> int:
    """Wait for the child's end; Ctrl-C, a hang-up or SIGTERM here go to it."""

    def forward(signum: int, frame: Any) -> None:
        with contextlib.suppress(OSError):
            os.kill(pid, signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, forward)
    line = client.read_line(conn)  # the zygote writes it when the child ends
    try:
        code = int(json.loads(line)["exit"])
    except (ValueError, KeyError, TypeError):
        sys.stderr.write("prefixlint: the warm process went away before the check ended\n")
        return 2
    return code if code >= 0 else 128 - code  # killed by a signal: as a shell says it


# -- in the zygote and its children ------------------------------------------------------


def set_up() -> None:
    """Import what a static ``check`` imports (nothing of the user's is read)."""
    import importlib
    import pkgutil

    for name in MODULES:
        importlib.import_module(name)
    for name in PACKAGES:
        package = importlib.import_module(name)
        for module in pkgutil.walk_packages(package.__path__, f"{name}."):
            importlib.import_module(module.name)
    from prefixlint.static.cache import code_version

    code_version()  # the results cache's key, stamped once for every child
    import gc

    gc.collect()
    gc.freeze()  # the children do not copy these pages to collect them


def child(request: dict[str, Any]) -> int:
    """Run the command as the caller would have: its folder, arguments and exit code."""
    os.chdir(request.get("cwd") or ".")
    argv = [str(a) for a in request.get("argv") or []]
    sys.argv = ["prefixlint", *argv]
    # ``python -m`` put the folder prefixlint is imported from first on sys.path (the key
    # holds it); the caller's folder is not on it, as for the ``prefixlint`` script.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    from prefixlint.cli import main as cli_main

    try:
        cli_main(args=argv, prog_name=request.get("prog_name") or "prefixlint")
        code: Any = 0
    except SystemExit as e:
        code = e.code
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    sys.stderr.write(f"{code}\n")
    return 1
