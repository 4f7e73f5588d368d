"""The user's zygotes, as a list: what each holds, and the bound on how many live.

Each zygote keeps a small JSON file beside its socket (``zygote-KEY.json``: its pid,
kind, key, Python, when it started, when it last forked a child and for which folder);
``live`` reads them, ``make_room`` retires the least recently used ones before a new one
starts, and ``prefixlint warm status`` / ``stop`` (``prefixlint/commands/warm.py``) show
and stop them. Standard library only (the launcher imports it before a start).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

MAX_ENV = "PREFIXLINT_WARM_MAX"  # zygotes of all kinds that may live at once (per folder)
# Three: a phase-2 zygote holds ~650 MB and a command-line one ~35 MB, so phase 2 in two
# environments (and the command line's) stays near 1.3 GB; phase 2's kind also keeps at
# most two of its own (``introspect.process.warm.MAX``).
DEFAULT_MAX = 3
ZYGOTE_MODULE = "prefixlint.warm.zygote"


def write_info(path: Path, info: dict[str, Any]) -> None:
    """A zygote's file, replaced whole (a reader never sees half of it)."""
    part = path.with_suffix(".json.part")
    with contextlib.suppress(OSError):
        part.write_text(json.dumps(info), encoding="utf-8")
        os.replace(part, path)


def _is_zygote(pid: int) -> bool:
    """``pid`` is alive and is a zygote (not a process that reused a dead one's number)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # another user's
    try:
        return ZYGOTE_MODULE in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return True  # no /proc (macOS): alive is the best known


def rss_mb(pid: int) -> float | None:
    """Resident memory of ``pid`` (MB), from /proc; None where there is none."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def live(folder: Path) -> list[dict[str, Any]]:
    """The live zygotes of ``folder``, least recently used first; ``listening``: False for
    one that retired and waits for its children. A dead one's file is removed."""
    rows = []
    for path in sorted(folder.glob("zygote-*.json")) if folder.is_dir() else []:
        try:
            info = json.loads(path.read_text(encoding="utf-8"))
            pid = int(info["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if not _is_zygote(pid):
            with contextlib.suppress(OSError):
                path.unlink()
            continue
        sock = path.with_suffix(".sock")
        info["sock"] = str(sock)
        info["listening"] = sock.exists() and _owner(path) == pid
        rows.append(info)
    return sorted(rows, key=lambda r: float(r.get("last_used") or 0))


def _owner(info_path: Path) -> int | None:
    """The pid in the key's lock file: the zygote that serves the key now."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(info_path.with_suffix(".lock").read_text().split()[0])
    return None


def make_room(
    folder: Path, kind: str, limit: int | None, retire: Callable[[Path], Any]
) -> list[int]:
    """Before a zygote of ``kind`` starts in ``folder``: the least recently used ones
    retire (``retire``: asks the zygote of a socket) until fewer than
    ``PREFIXLINT_WARM_MAX`` listen there and fewer than ``limit`` of ``kind``. One caller
    at a time (a lock in the folder). The pids that retired."""
    bound = max(1, _int_env(MAX_ENV, DEFAULT_MAX))
    retired: list[int] = []
    with open(folder / "start.lock", "a+", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        rows = [r for r in live(folder) if r["listening"]]
        while rows:
            same = [r for r in rows if r.get("kind") == kind]
            if limit is not None and len(same) >= limit:
                oldest = same[0]
            elif len(rows) >= bound:
                oldest = rows[0]
            else:
                break
            retire(Path(oldest["sock"]))
            retired.append(int(oldest["pid"]))
            rows.remove(oldest)
    return retired


def _int_env(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name) or default)
    except ValueError:
        return default


def status_rows(folder: Path) -> list[dict[str, Any]]:
    """What ``prefixlint warm status`` shows of each live zygote."""
    now = time.time()
    rows = []
    for info in reversed(live(folder)):  # most recently used first
        pid = int(info["pid"])
        rows.append(
            {
                "pid": pid,
                "kind": info.get("kind_name") or info.get("kind"),
                "key": info.get("key"),
                "python": info.get("python"),
                "folder": info.get("folder") or "-",
                "rss_mb": rss_mb(pid),
                "idle_s": round(now - float(info.get("last_used") or now)),
                "idle_limit_s": info.get("idle_limit_s"),
                "served": info.get("served", 0),
                "state": "serving" if info["listening"] else "retiring",
            }
        )
    return rows
