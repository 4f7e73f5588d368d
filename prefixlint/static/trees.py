"""A module file's ``ast``, parsed once per version (path, mtime, size) for rules that read
a body of another module (the sketch keeps only the linted file's)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path


@functools.lru_cache(maxsize=512)
def _parsed(path: str, stamp: tuple[int, int]) -> ast.Module | None:
    try:
        return ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return None


def module_tree(path: Path | str) -> ast.Module | None:
    """The parsed file, or None when it cannot be read or parsed."""
    try:
        st = Path(path).stat()
    except OSError:
        return None
    return _parsed(str(path), (st.st_mtime_ns, st.st_size))
