"""The lines of reported files, numbered as Python numbers them (``str.splitlines`` would
also split at form feeds and other separators), for source frames and suggestions."""

from __future__ import annotations

import re
from pathlib import Path

_NEWLINE = re.compile(r"\r\n|\r|\n")


def split_lines(text: str) -> list[str]:
    """Lines as Python numbers them, without their line endings."""
    return _NEWLINE.split(text)


class SourceLines:
    """Lines of files read on demand, once each; ``None`` for an unreadable file or row."""

    def __init__(self) -> None:
        self._files: dict[str, list[str] | None] = {}

    def lines(self, path: str) -> list[str] | None:
        if path not in self._files:
            try:
                text = Path(path).read_text(encoding="utf-8", errors="replace")
            except OSError:
                self._files[path] = None
            else:
                self._files[path] = split_lines(text)
        return self._files[path]

    def line(self, path: str, row: int) -> str | None:
        lines = self.lines(path)
        if lines is None or not 1 <= row <= len(lines):
            return None
        return lines[row - 1]
