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


# One site, two phases: a phase-2 code and the static codes that name the same defect at
# the same statement (a prefix that is not the module's path is PFX301-PFX304 statically
# and PFX601 at run time; a duplicate name from such a prefix, PFX602; SupportsPP without
# a working ``make_empty_intermediate_tensors``, PFX501 and PFX606; a layer the
# quantization config treats otherwise than its name says, PFX405 or a wrong prefix, and
# PFX702). ``check --introspect`` merges them into one finding, and one noqa comment for
# either silences both.
PREFIX_CODES = ("PFX301", "PFX302", "PFX303", "PFX304")
SAME_DEFECT: dict[str, tuple[str, ...]] = {
    "PFX601": PREFIX_CODES,
    "PFX602": PREFIX_CODES,
    "PFX606": ("PFX501",),
    "PFX702": ("PFX405", *PREFIX_CODES),
}


def is_suppressed(
    diagnostic: Diagnostic, lines: Sequence[str], rows: tuple[int, int] | None = None
) -> bool:
    """A ``# noqa`` silences ``diagnostic``: on its line, or on any line of ``rows`` (the
    statement it is reported at, first and last row: phase 2 reports a multi-line call
    at its first line, where the comment of the argument at fault is not), for its own code
    or a static code of the same defect (``SAME_DEFECT``)."""
    row = diagnostic.location.row
    first, last = rows if rows is not None else (row, row)
    same = {diagnostic.code, *SAME_DEFECT.get(diagnostic.code, ())}
    for at in range(max(first, 1), min(last, len(lines)) + 1):
        codes = noqa_codes(lines[at - 1])
        if codes is not None and (not codes or codes & same):
            return True
    return False
