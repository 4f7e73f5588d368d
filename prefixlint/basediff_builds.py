"""Phase 2's base against head: differences of the builds that are not findings yet.

Each comparison takes the base's and the head's ``Phase2Result`` (built with the same
configs) and head's phase-2 findings, and returns head's findings with what it adds or
settles. ``COMPARISONS`` lists them in order; another comparison of the same two builds
(the outputs on the same weights, PFX609) is one more function of this signature.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from prefixlint.check_introspect import Phase2Result
from prefixlint.codes import url_for
from prefixlint.diagnostic import Diagnostic, Position, Severity
from prefixlint.paths import display_path

LOST_LAYOUT_CODE = "PFX604"


def lost_layouts(
    base: Phase2Result, head: Phase2Result, found: list[Diagnostic]
) -> list[Diagnostic]:
    """A layout that built at the base and fails at head, with the same config, is the
    change's: PFX604 (a warning) at head's failing line, and never "not verified" (a
    config gap or a skip), since that config built the base."""
    out = list(found)
    for arch, then in base.builds.items():
        now = head.builds.get(arch)
        if now is None:
            continue
        lost = {
            name: now["layouts"][name][1]
            for name, (status, _) in then["layouts"].items()
            if status == "built" and now["layouts"].get(name, ("built", ""))[0] != "built"
        }
        if not lost:
            continue
        mine = [d for d in out if d.data.get("architecture") in (arch, f"{arch}__prefixlint")]
        if any(d.severity is Severity.ERROR for d in mine):
            continue  # head's build already says what broke, at its line
        notes = [d for d in mine if d.is_not_verified]
        where = notes[0] if notes else None
        row = where.location.row if where else int(now["line"])
        filename = where.filename if where else display_path(Path(now["file"]))
        reasons = "; ".join(f"{name}: {why or 'failed'}" for name, why in sorted(lost.items()))
        pos = Position(row, 1)
        out = [d for d in out if d not in notes]
        out.append(
            Diagnostic(
                LOST_LAYOUT_CODE,
                f"`{arch}` built at the base with the same config on "
                f"{', '.join(sorted(lost))}, and fails at head ({reasons})",
                Severity.WARNING,
                filename,
                pos,
                pos,
                phase="introspect",
                url=url_for(LOST_LAYOUT_CODE),
                data={"architecture": arch, "layouts": sorted(lost), "base_built": True},
            )
        )
    return out


Comparison = Callable[[Phase2Result, Phase2Result, list[Diagnostic]], list[Diagnostic]]
COMPARISONS: tuple[Comparison, ...] = (lost_layouts,)


def compare_builds(
    base: Phase2Result, head: Phase2Result, found: list[Diagnostic]
) -> list[Diagnostic]:
    """Head's phase-2 findings after every comparison with the base's builds."""
    for comparison in COMPARISONS:
        found = comparison(base, head, found)
    return found
