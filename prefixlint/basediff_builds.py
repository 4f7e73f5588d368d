"""Phase 2's base against head: differences of the builds that are not findings yet.

Each comparison takes the base's and the head's ``Phase2Result`` (built with the same
configs) and head's phase-2 findings, and returns head's findings with what it adds or
settles. ``COMPARISONS`` lists them in order; another comparison of the same two builds
(the outputs on the same weights, PFX609) is one more function of this signature.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from prefixlint.check_introspect import Phase2Result
from prefixlint.codes import CHECKPOINT_COVERAGE_CODE, url_for
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
            name: now["layouts"][name].get("reason") or ""
            for name, layout in then["layouts"].items()
            if layout.get("status") == "built" and _status(now, name) not in ("built", None)
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


def _status(build: dict[str, Any], layout: str) -> str | None:
    return (build["layouts"].get(layout) or {}).get("status")


# how many names a finding lists of each kind; ``data`` has them all
SHOWN_NAMES = 5


def changed_parameters(
    base: Phase2Result, head: Phase2Result, found: list[Diagnostic]
) -> list[Diagnostic]:
    """A parameter the base's build had and head's lacks, gains, or has in another shape,
    on a layout built at both (the first such layout): a checkpoint written for the base
    no longer loads as it did. PFX701 (a warning) at head's class."""
    out = list(found)
    for arch, then in base.builds.items():
        now = head.builds.get(arch)
        both = [
            n
            for n, lay in (now or {}).get("layouts", {}).items()
            if lay.get("status") == "built" and _status(then, n) == "built"
        ]
        if now is None or not both:
            continue
        layout = both[0]
        before, after = then["layouts"][layout]["params"], now["layouts"][layout]["params"]
        gone = sorted(set(before) - set(after))
        added = sorted(set(after) - set(before))
        reshaped = sorted(n for n in set(before) & set(after) if before[n] != after[n])
        if not (gone or added or reshaped):
            continue
        said = [
            f"{what} {_names(names)}"
            for what, names in (("gone", gone), ("new", added), ("reshaped", reshaped))
            if names
        ]
        pos = Position(int(now["line"]), 1)
        out.append(
            Diagnostic(
                CHECKPOINT_COVERAGE_CODE,
                f"`{arch}` ({layout}) has other parameters than at the base, with the same "
                f"config: {'; '.join(said)}: a checkpoint written for the base does not load "
                "into it as it did",
                Severity.WARNING,
                display_path(Path(now["file"])),
                pos,
                pos,
                phase="introspect",
                url=url_for(CHECKPOINT_COVERAGE_CODE),
                data={
                    "architecture": arch,
                    "group": "base-parameters",
                    "layout": layout,
                    "gone": gone,
                    "new": added,
                    "reshaped": {n: [before[n], after[n]] for n in reshaped},
                },
            )
        )
    return out


def _names(names: list[str]) -> str:
    shown = ", ".join(f"`{n}`" for n in names[:SHOWN_NAMES])
    more = len(names) - SHOWN_NAMES
    return shown + (f" and {more} more" if more > 0 else "")


Comparison = Callable[[Phase2Result, Phase2Result, list[Diagnostic]], list[Diagnostic]]
COMPARISONS: tuple[Comparison, ...] = (lost_layouts, changed_parameters)


def compare_builds(
    base: Phase2Result, head: Phase2Result, found: list[Diagnostic]
) -> list[Diagnostic]:
    """Head's phase-2 findings after every comparison with the base's builds."""
    for comparison in COMPARISONS:
        found = comparison(base, head, found)
    return found
