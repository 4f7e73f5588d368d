"""How a file is named in output, by every phase, and its resolved path."""

from __future__ import annotations

import functools
import os
from pathlib import Path


@functools.lru_cache(maxsize=65536)
def _resolve(absolute: str) -> Path:
    parent, name = os.path.split(absolute)
    if name in ("", ".", "..") or parent == absolute or os.path.islink(absolute):
        return Path(absolute).resolve()
    # Not a link: its folder resolved (once for all the files in it), and its name.
    return _resolve(parent) / name


def resolved(path: str | os.PathLike[str]) -> Path:
    """``Path(path).resolve()``, worked out once per path: a run asks it of each file
    several times (its cache key, its package, its display name, its configuration's
    patterns), and each ``resolve`` is a system call per folder of the path. Keyed by the
    absolute path, so a change of the current folder is seen; ``forget_resolved`` starts
    afresh (each run calls it: links may change between runs of a long-lived process)."""
    return _resolve(os.path.join(os.getcwd(), os.fspath(path)))


def forget_resolved() -> None:
    _resolve.cache_clear()


def display_path(path: str | os.PathLike[str]) -> str:
    """``path`` relative to the current folder when it lies below it (what a person can
    click from where they ran the command), else as given."""
    try:
        return resolved(path).relative_to(resolved(os.getcwd())).as_posix()
    except (ValueError, OSError):
        return str(path)
