"""Which files a run checks."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from prefixlint.config import DEFAULT_EXCLUDE, Config


class MissingPath(Exception):
    pass


class NotAFile(Exception):
    """A path named on the command line that is neither a regular file nor a folder (a
    named pipe, a socket, a device): reading it could block forever."""


def _regular(path: Path) -> bool:
    """A regular file (following links). ``os.walk`` lists pipes and sockets as files."""
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False


def discover(paths: Iterable[Path], config: Config) -> list[Path]:
    """Python files under ``paths``: files as given, folders recursively (sorted)."""
    out: list[Path] = []
    seen: set[Path] = set()
    for path in paths:
        if not path.exists():
            raise MissingPath(str(path))
        if not path.is_dir() and not _regular(path):
            raise NotAFile(f"{path} is not a regular file or a folder (a pipe or a device?)")
        if path.is_file():
            # An explicitly named file is checked even if its suffix differs (ruff does too).
            if path not in seen:
                seen.add(path)
                out.append(path)
            continue
        for folder, dirs, files in os.walk(path):
            base = Path(folder)
            dirs[:] = sorted(
                d
                for d in dirs
                if d not in DEFAULT_EXCLUDE
                and not d.endswith(".egg-info")
                and not config.is_excluded(base / d)
            )
            for name in sorted(files):
                if name.endswith((".py", ".pyi")):
                    f = base / name
                    # A named pipe called f.py would block the reader forever: skipped.
                    if f not in seen and _regular(f) and not config.is_excluded(f):
                        seen.add(f)
                        out.append(f)
    return out


def installed_vllm_model_dirs() -> list[Path]:
    """The installed vLLM's model folders, found on disk without importing vLLM."""
    from prefixlint.static.index import find_installed_package

    vllm = find_installed_package("vllm")
    if vllm is None:
        return []
    dirs = [vllm / "model_executor" / "models", vllm / "models"]
    return [d for d in dirs if d.is_dir()]
