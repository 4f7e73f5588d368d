"""``prefixlint check`` from a warm process: the command line's entry point.

A static ``check`` of one file spends most of its time importing (libcst, the rules and the
static phase: ~0.5 s of ~0.7 s). ``main`` hands such a call to a zygote of this kind
(``prefixlint/warm/zygote.py``) that has done those imports once: its child runs the same
command (``prefixlint.cli``) with the caller's arguments, working folder, environment,
stdin, stdout and stderr (the descriptors themselves: a terminal stays a terminal), and the
caller exits with its exit code. The zygote imports modules only: no file is read and no
result is kept in it, so a child computes what a fresh process computes (the results and
fact caches on disk are the command's own). When no zygote listens, the call runs here and
starts one for the next call; any failure before the child starts runs the command here.

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
# As ``static.cache.CACHE_DIR_ENV`` and ``ResultCache.folder_for``, spelt again: importing
# them costs the command's start-up ~10 ms (dataclasses), a third of a served call's.
CACHE_DIR_ENV = "PREFIXLINT_CACHE_DIR"
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


def main() -> None:
    """The ``prefixlint`` command: a warm child's exit code, else the command run here."""
    code = run_warm(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    from prefixlint.cli import main as cli_main

    cli_main()


def eligible(argv: list[str]) -> bool:
    return (
        bool(argv)
        and argv[0] == "check"
        and not any(a.split("=")[0] in COLD_OPTIONS for a in argv[1:])
        and not client.warm_off()
        and hasattr(os, "fork")
        and hasattr(socket, "send_fds")
    )


def cache_folder(argv: list[str]) -> Path:
    """The results cache folder ``check`` would use (``--cache-dir``, the environment, or
    ``./.prefixlint_cache``): the zygote lives there, as phase 2's does."""
    for i, arg in enumerate(argv):
        if arg == "--cache-dir" and i + 1 < len(argv):
            return Path(argv[i + 1])
        if arg.startswith("--cache-dir="):
            return Path(arg.partition("=")[2])
    return Path(os.environ.get(CACHE_DIR_ENV) or ".prefixlint_cache")


def run_warm(argv: list[str]) -> int | None:
    """``prefixlint ARGV`` in a child of this folder's zygote: its exit code, or None when
    the command is to run here (not eligible, no zygote yet: one is started, or it failed
    before the child started)."""
    if not eligible(argv):
        return None
    cwd, env = os.getcwd(), dict(os.environ)
    files = client.paths(cache_folder(argv), f"cli-{client.key(cwd, env)}")
    conn = client.connect(files["sock"])
    if conn is None:
        try:
            files["sock"].parent.mkdir(parents=True, exist_ok=True)
            client.start(files, KIND, cwd, env)  # for the next call; this one runs here
        except OSError:
            pass
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
    # ``python -m`` put the zygote's folder first on sys.path; the caller's is the same
    # (the key holds it), so its imports resolve as the caller's would.
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
