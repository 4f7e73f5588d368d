"""Shared-memory segments of a smoke run: found where its processes map them, released
after the run.

vLLM's CPU tensor-parallel communicator makes one segment per rank in ``/dev/shm`` and
unlinks it only when its process exits normally; the run's engines are stopped, so the
segments would stay (4 MiB each, every TP 2 run). The child records the ``/dev/shm`` files
its process group maps while an engine is up (``/proc/<pid>/maps``); the parent unlinks
those that are left once the group is gone. Only names the run's own processes mapped are
touched: another run's segments are never seen.
"""

from __future__ import annotations

import os
from pathlib import Path

SHM = Path("/dev/shm")
_DELETED = " (deleted)"


def mapped_by_group(pgid: int, proc: Path = Path("/proc")) -> set[str]:
    """Names of the ``/dev/shm`` files that processes of process group ``pgid`` map (and
    that are not unlinked already)."""
    names: set[str] = set()
    try:
        pids = [p for p in proc.iterdir() if p.name.isdigit()]
    except OSError:
        return names  # no /proc: nothing to find, nothing to release
    for pid in pids:
        try:
            if os.getpgid(int(pid.name)) != pgid:
                continue
            maps = (pid / "maps").read_text(encoding="utf-8", errors="replace")
        except (OSError, ProcessLookupError):
            continue  # gone, or not ours to read
        for line in maps.splitlines():
            parts = line.split(maxsplit=5)
            path = parts[5] if len(parts) == 6 else ""
            if path.startswith(f"{SHM}/") and not path.endswith(_DELETED):
                names.add(path[len(f"{SHM}/") :])
    return names


def release(names: list[str] | set[str], folder: Path = SHM) -> list[str]:
    """Unlink the named segments that still exist; returns those removed."""
    removed = []
    for name in sorted(set(names)):
        if not name or "/" in name or name in (".", ".."):
            continue
        try:
            (folder / name).unlink()
        except FileNotFoundError:
            continue
        except OSError:
            continue  # not ours to remove: leave it
        removed.append(name)
    return removed
