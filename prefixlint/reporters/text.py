"""Text in ruff's shape: ``path:row:col: CODE message``, a source frame, a summary.

Colours come from rich, only on a terminal and never with ``NO_COLOR`` (``FORCE_COLOR``
forces them); without colour the output is plain text, byte for byte."""

from __future__ import annotations

import os
from collections import Counter
from typing import TextIO

from prefixlint.diagnostic import Diagnostic, Severity, default_view
from prefixlint.sourcelines import SourceLines

_FRAME_WIDTH = 120


def _use_colour(out: TextIO) -> bool:
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return hasattr(out, "isatty") and out.isatty()


_STYLES = {"1": "bold", "31": "red", "33": "yellow", "36": "cyan"}


class _Style:
    """Styles a piece of text with rich (its ANSI rendering), or leaves it plain."""

    def __init__(self, on: bool) -> None:
        self.on = on
        self.console = None
        if on:
            from rich.console import Console

            self.console = Console(force_terminal=True, color_system="standard", no_color=False)

    def __call__(self, text: str, code: str) -> str:
        if self.console is None:
            return text
        from rich.text import Text

        style = " ".join(_STYLES.get(part, "") for part in code.split(";")).strip()
        with self.console.capture() as captured:
            self.console.print(Text(text, style=style), end="", soft_wrap=True)
        return captured.get()


def report_text(diagnostics: list[Diagnostic], out: TextIO, options: dict) -> None:
    style = _Style(_use_colour(out))
    show_source = options.get("show_source", True)
    sources = SourceLines()  # numbered as Python numbers lines (a form feed is no break)
    shown = default_view(diagnostics, bool(options.get("show_notes")))
    for d in shown:
        colour = {Severity.ERROR: "31", Severity.WARNING: "33"}.get(d.severity, "36")
        head = (
            f"{style(d.filename, '1')}:{d.location.row}:{d.location.column}: "
            f"{style(d.code, '1;' + colour)} {d.message}"
        )
        out.write(head + "\n")
        line = sources.line(d.filename, d.location.row) if show_source else None
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
    _summary(shown, out, options, hidden=len(diagnostics) - len(shown))


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _summary(diagnostics: list[Diagnostic], out: TextIO, options: dict, hidden: int = 0) -> None:
    unverified = [d for d in diagnostics if d.is_not_verified]
    if unverified:
        out.write(f"Not verified: {len(unverified)} (see the notes above).\n")
    if hidden:
        out.write(
            f"{_plural(hidden, 'note')} not shown (divergences with no consumer today, or "
            "deliberate ones): `--show-notes` lists them.\n"
        )
    diagnostics = [d for d in diagnostics if d.severity is not Severity.NOTE]
    counts = Counter(d.code for d in diagnostics)
    checked = options.get("files")
    checked_text = _plural(checked, "file") if isinstance(checked, int) else "? files"
    if diagnostics:
        errors = sum(d.severity is Severity.ERROR for d in diagnostics)
        warnings = len(diagnostics) - errors
        names = options.get("names", {})
        width = max(len(str(n)) for n in counts.values())
        for code, n in sorted(counts.items()):
            out.write(f"{n:>{width}}  {code}  {names.get(code, '')}\n")
        with_findings = len({d.filename for d in diagnostics})
        out.write(
            f"Found {_plural(len(diagnostics), 'finding')} ({_plural(errors, 'error')}, "
            f"{_plural(warnings, 'warning')}) in {_plural(with_findings, 'file')} "
            f"({checked_text} checked).\n"
        )
    elif unverified:
        out.write("No findings in what was verified.\n")
    elif checked == 0:  # nothing checked is not a pass
        out.write("Nothing checked: no Python files found under the given paths.\n")
    else:
        ran = options.get("phases") or ""
        out.write(f"All checks passed ({checked_text}{'; ' + ran if ran else ''}).\n")
