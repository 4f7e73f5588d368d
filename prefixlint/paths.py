"""How a file is named in output, by every phase."""

from __future__ import annotations

import os
from pathlib import Path


def display_path(path: str | os.PathLike[str]) -> str:
    """``path`` relative to the current folder when it lies below it (what a person can
    click from where they ran the command), else as given."""
    try:
        return Path(path).resolve().relative_to(Path.cwd().resolve()).as_posix()
    except (ValueError, OSError):
        return str(path)
