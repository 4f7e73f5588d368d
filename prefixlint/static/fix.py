"""Applying the fixes that findings carry (``--fix`` / ``--diff``).

The rules attach each fix to its finding (the JSON ``fix``, SARIF ``fixes``, rdjson
``suggestions`` and review suggestions show the same edits). Fixing a file is linting it
with the fixable rules and applying those edits: non-overlapping edits at once, then a
fresh lint for what an overlapping edit held back, until nothing changes. Everything
outside the edited spans stays byte for byte, line endings and comments included.
"""

from __future__ import annotations

import difflib
import io
import re
import tokenize
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from prefixlint.codes import FIXABLE
from prefixlint.diagnostic import Diagnostic, Edit
from prefixlint.static.engine import Linter
from prefixlint.static.index import package_root_for
from prefixlint.static.resolve import ModuleLoader, Resolver
from prefixlint.static.source import SourceError, decode, parse_ast

# An edit can hold back one that overlaps it for one more round; nesting is shallow.
_MAX_ROUNDS = 8


@dataclass(frozen=True)
class Applied:
    """One rewrite: the finding's code, its 1-based line in the input, what was done."""

    code: str
    line: int
    description: str


@dataclass
class FixResult:
    new_code: str
    applied: list[Applied] = field(default_factory=list)
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (line, reason)

    @property
    def changed(self) -> bool:
        return bool(self.applied)


def fix_source(
    code: str,
    filename: str,
    codes: Iterable[str] = tuple(sorted(FIXABLE)),
    *,
    resolver: Resolver | None = None,
) -> FixResult:
    """Apply the fixes that the findings of ``codes`` in ``code`` carry.

    ``filename`` names the file ``code`` comes from: its package (when the file sits in one)
    resolves imported layer classes, as a lint of that file does. ``codes`` must be
    fixable codes (others raise ``ValueError``). ``resolver`` is the linter's resolver; by
    default one reading the file's package and the installed vLLM.

    Returns ``new_code`` (``code`` itself when nothing applies), ``applied`` (one
    ``Applied(code, line, description)`` per fixed finding, lines of ``code``) and
    ``skipped`` (``(line, reason)`` per finding left alone). Findings silenced by
    ``# noqa`` are neither fixed nor listed. Never writes anything. Idempotent: fixing the
    result again applies nothing.
    """
    from prefixlint.rules import RULES_BY_CODE

    wanted = tuple(dict.fromkeys(codes))
    unknown = [c for c in wanted if c not in FIXABLE]
    if unknown:
        fixable = ", ".join(sorted(FIXABLE))
        raise ValueError(f"no autofix for {', '.join(unknown)}; fixable: {fixable}")
    try:
        parse_ast(code)
    except SourceError as e:
        return FixResult(code, skipped=[(e.row, f"not fixed: {e.message}")])
    linter = Linter([RULES_BY_CODE[c] for c in wanted], resolver or default_resolver(filename))
    result = FixResult(code)
    current = code
    for _ in range(_MAX_ROUNDS):
        found = linter.lint_text(current, Path(filename), filename)
        fixes = [d for d in found if d.fix is not None and d.fix.edits]
        if current is code:  # the findings of the input are the ones to account for
            result.skipped = sorted(
                (d.location.row, f"{d.code}: {d.no_fix}") for d in found if d.no_fix
            )
        current, done = apply_fixes(current, fixes)
        result.applied += done
        if not done:
            break
    result.new_code = current
    result.applied.sort(key=lambda a: (a.line, a.code))
    return result


_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


def lines_with_ends(text: str) -> list[str]:
    """Lines with their endings, as Python and git number them (``str.splitlines`` would
    also split at form feeds and other separators)."""
    return _LINE.findall(text)


def apply_fixes(text: str, fixes: list[Diagnostic]) -> tuple[str, list[Applied]]:
    """Apply the edits of ``fixes`` that overlap no other, last first."""
    lines = lines_with_ends(text) or [""]
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(row: int, column: int) -> int:
        return starts[min(row, len(lines)) - 1] + column - 1

    spans: list[tuple[int, int, Edit, Diagnostic]] = []
    for d in fixes:
        assert d.fix is not None
        for e in d.fix.edits:
            spans.append(
                (
                    offset(e.location.row, e.location.column),
                    offset(e.end_location.row, e.end_location.column),
                    e,
                    d,
                )
            )
    spans.sort(key=lambda s: (s[0], s[1]))
    chosen: list[tuple[int, int, Edit, Diagnostic]] = []
    for span in spans:
        if chosen and span[0] < chosen[-1][1]:
            continue  # overlaps the previous edit: next round
        chosen.append(span)
    applied = []
    for start, end, edit, d in reversed(chosen):
        text = text[:start] + edit.content + text[end:]
        assert d.fix is not None
        applied.append(Applied(d.code, d.location.row, d.fix.message))
    return text, applied


def fix_file(path: str | Path, write: bool = False, **kwargs) -> tuple[str, FixResult]:
    """Fix one file: ``(unified diff, FixResult)``; the diff is ``""`` when nothing changes.

    The file is decoded as Python decodes it (BOM, coding cookie) and, with ``write=True``
    and a change, written back in the same encoding. ``kwargs`` go to ``fix_source``.
    """
    path = Path(path)
    data = path.read_bytes()
    bom = data.startswith(b"\xef\xbb\xbf")
    try:
        text = decode(data)
        encoding = "utf-8" if bom else tokenize.detect_encoding(io.BytesIO(data).readline)[0]
    except (SourceError, SyntaxError) as e:
        reason = e.message if isinstance(e, SourceError) else str(e)
        return "", FixResult(data.decode("utf-8", "replace"), skipped=[(1, f"not fixed: {reason}")])
    result = fix_source(text, str(path), **kwargs)
    if not result.changed:
        return "", result
    diff = unified_diff(text, result.new_code, str(path))
    if write:
        out = result.new_code.encode(encoding)
        path.write_bytes(b"\xef\xbb\xbf" + out if bom else out)
    return diff, result


def unified_diff(old: str, new: str, name: str) -> str:
    """A ``git apply``-able unified diff of one file (``a/name`` -> ``b/name``)."""
    out = []
    for line in difflib.unified_diff(
        lines_with_ends(old),
        lines_with_ends(new),
        fromfile=f"a/{name}",
        tofile=f"b/{name}",
    ):
        out.append(line)
        if not line.endswith(("\n", "\r")):
            out.append("\n\\ No newline at end of file\n")
    return "".join(out)


def default_resolver(filename: str) -> Resolver:
    """The resolver a lint of ``filename`` would use: its package and the installed vLLM."""
    root = package_root_for(Path(filename)) if Path(filename).exists() else None
    roots = []
    if root is not None:
        rel = Path(filename).resolve().relative_to(root)
        roots.append(root / rel.parts[0])
    return Resolver(ModuleLoader(roots=roots))
