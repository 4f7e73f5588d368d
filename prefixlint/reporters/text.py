"""Text in ruff's shape: ``path:row:col: CODE message``, a source frame, a summary."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import TextIO

from prefixlint.diagnostic import Diagnostic, Severity

_FRAME_WIDTH = 120


def _use_colour(out: TextIO) -> bool:
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return hasattr(out, "isatty") and out.isatty()


class _Style:
    def __init__(self, on: bool) -> None:
        self.on = on

    def __call__(self, text: str, code: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.on else text


def _source_line(path: str, row: int, cache: dict[str, list[str] | None]) -> str | None:
    if path not in cache:
        try:
            cache[path] = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            cache[path] = None
    lines = cache[path]
    if lines is None or not 1 <= row <= len(lines):
        return None
    return lines[row - 1]


def report_text(diagnostics: list[Diagnostic], out: TextIO, options: dict) -> None:
    style = _Style(_use_colour(out))
    show_source = options.get("show_source", True)
    sources: dict[str, list[str] | None] = {}
    for d in diagnostics:
        colour = {Severity.ERROR: "31", Severity.WARNING: "33"}.get(d.severity, "36")
        head = (
            f"{style(d.filename, '1')}:{d.location.row}:{d.location.column}: "
            f"{style(d.code, '1;' + colour)} {d.message}"
        )
        out.write(head + "\n")
        line = _source_line(d.filename, d.location.row, sources) if show_source else None
        if line is not None:
            gutter = " " * len(str(d.location.row))
            start = d.location.column - 1
            # Control bytes of a binary file would garble the terminal.
            line = "".join(ch if ch.isprintable() or ch == "\t" else "?" for ch in line)
            if len(line) > _FRAME_WIDTH:  # show a window around the column, not the line
                left = max(0, start - _FRAME_WIDTH // 2)
                line = ("…" if left else "") + line[left : left + _FRAME_WIDTH] + "…"
                start = start - left + (1 if left else 0)
            if d.end_location.row == d.location.row:
                width = max(1, d.end_location.column - d.location.column)
            else:
                width = max(1, len(line.rstrip()) - start)
            out.write(f"{gutter} |\n{d.location.row} | {line.rstrip()}\n")
            out.write(f"{gutter} | {' ' * start}{style('^' * width, colour)}\n\n")
    notes = [d for d in diagnostics if d.severity is Severity.NOTE]
    if notes:
        out.write(f"Not verified: {len(notes)} (see the PFX600 notes above).\n")
    diagnostics = [d for d in diagnostics if d.severity is not Severity.NOTE]
    counts = Counter(d.code for d in diagnostics)
    if diagnostics:
        errors = sum(d.severity is Severity.ERROR for d in diagnostics)
        warnings = len(diagnostics) - errors
        names = options.get("names", {})
        width = max(len(str(n)) for n in counts.values())
        for code, n in sorted(counts.items()):
            out.write(f"{n:>{width}}  {code}  {names.get(code, '')}\n")
        out.write(
            f"Found {len(diagnostics)} finding{'s' if len(diagnostics) != 1 else ''} "
            f"({errors} error{'s' if errors != 1 else ''}, "
            f"{warnings} warning{'s' if warnings != 1 else ''}) "
            f"in {options.get('files', '?')} files.\n"
        )
    elif notes:
        out.write("No findings in what was verified.\n")
    else:
        out.write(f"All checks passed ({options.get('files', '?')} files).\n")
