"""``# noqa`` comments: which codes a line silences. Standard library only: phase 2's
findings are filtered by it in the CLI's process, which does not import libcst."""

from __future__ import annotations

import re
from collections.abc import Sequence

from prefixlint.diagnostic import Diagnostic

_NOQA = re.compile(
    r"#\s*noqa(?::[\s]?(?P<codes>[A-Z]+[0-9]+(?:[,\s]+[A-Z]+[0-9]+)*))?", re.IGNORECASE
)


def noqa_codes(line: str) -> frozenset[str] | None:
    """Codes silenced on a line: None when none, an empty set for a bare ``# noqa``."""
    if "noqa" not in line.lower():
        return None
    m = _NOQA.search(line)
    if m is None:
        return None
    codes = m.group("codes")
    if not codes:
        return frozenset()
    return frozenset(c.upper() for c in re.split(r"[,\s]+", codes.strip()) if c)


def is_suppressed(diagnostic: Diagnostic, lines: Sequence[str]) -> bool:
    row = diagnostic.location.row
    if not 1 <= row <= len(lines):
        return False
    codes = noqa_codes(lines[row - 1])
    if codes is None:
        return False
    return not codes or diagnostic.code in codes
