"""The one finding type that every phase produces and every reporter consumes."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


class Severity(str, Enum):
    # Something breaks for a user (the message says what).
    ERROR = "error"
    # A maintainer would fix it; nothing breaks today.
    WARNING = "warning"
    # Two kinds, never a failure of the run: a "not verified" note (something prefixlint
    # could not check: a build it could not make, a rule that could not decide; shown in
    # every format, and ``--strict`` makes it count), and a divergence no consumer reads
    # today or one documented as deliberate (listed by JSON/SARIF and with
    # ``--show-notes``, left out of default text output and review comments).
    NOTE = "note"

    @property
    def rank(self) -> int:
        return {Severity.ERROR: 2, Severity.WARNING: 1, Severity.NOTE: 0}[self]

    @property
    def sarif_level(self) -> str:
        return self.value  # SARIF's levels are "error", "warning" and "note"

    @property
    def github_command(self) -> str:
        return "notice" if self is Severity.NOTE else self.value

    @property
    def rdjson_severity(self) -> str:
        return "INFO" if self is Severity.NOTE else self.value.upper()


# Codes whose notes are "not verified" notes; a note of another code is one when its
# ``data`` says so (``NOT_VERIFIED: True``), and one of these is not when it says
# ``NOT_VERIFIED: False``: nothing exists to check against (the comparison of a model
# transformers has no class for), so `--strict` and the pytest plugin do not count it.
NOT_VERIFIED_CODES = frozenset({"PFX600"})
NOT_VERIFIED = "not_verified"


@dataclass(frozen=True, order=True)
class Position:
    """1-based row, 1-based column (ruff's JSON convention)."""

    row: int
    column: int


@dataclass(frozen=True)
class Edit:
    """Replace the source between two positions with ``content``."""

    content: str
    location: Position
    end_location: Position


@dataclass(frozen=True)
class Fix:
    message: str
    edits: tuple[Edit, ...]
    applicability: str = "safe"


@dataclass(frozen=True)
class Diagnostic:
    code: str
    message: str
    severity: Severity
    filename: str
    location: Position
    end_location: Position
    phase: str = "static"
    fix: Fix | None = None
    url: str | None = None
    # Extra, phase-specific facts (tp size, architecture, ...); kept out of equality.
    data: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    # Why a fixable finding carries no fix (``--fix`` says so); not part of the JSON.
    no_fix: str | None = field(default=None, compare=False, hash=False)

    @classmethod
    def at_line(
        cls,
        code: str,
        message: str,
        filename: str,
        row: int = 1,
        column: int = 1,
        severity: Severity = Severity.ERROR,
        **extra: Any,
    ) -> Diagnostic:
        """A finding about a whole file or one point of it (no span)."""
        pos = Position(row, column)
        return cls(code, message, severity, filename, pos, pos, **extra)

    @property
    def is_not_verified(self) -> bool:
        """A note that says something was not checked (never a finding)."""
        flag = self.data.get(NOT_VERIFIED)
        return self.severity is Severity.NOTE and (
            flag is True or (self.code in NOT_VERIFIED_CODES and flag is not False)
        )

    @property
    def shown_by_default(self) -> bool:
        """Errors, warnings and "not verified" notes; a divergence note is listed only on
        request (``--show-notes``) and by the machine-readable formats."""
        return self.severity is not Severity.NOTE or self.is_not_verified

    def sort_key(self) -> tuple[str, int, int, str]:
        return (self.filename, self.location.row, self.location.column, self.code)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "code": self.code,
            "message": self.message,
            "severity": self.severity.value,
            "phase": self.phase,
            "filename": self.filename,
            "location": asdict(self.location),
            "end_location": asdict(self.end_location),
            "fix": None,
            "url": self.url,
        }
        if self.fix is not None:
            out["fix"] = {
                "message": self.fix.message,
                "applicability": self.fix.applicability,
                "edits": [
                    {
                        "content": e.content,
                        "location": asdict(e.location),
                        "end_location": asdict(e.end_location),
                    }
                    for e in self.fix.edits
                ],
            }
        if self.data:
            out["data"] = self.data
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Diagnostic:
        fix = None
        if obj.get("fix"):
            f = obj["fix"]
            fix = Fix(
                message=f["message"],
                applicability=f.get("applicability", "safe"),
                edits=tuple(
                    Edit(e["content"], Position(**e["location"]), Position(**e["end_location"]))
                    for e in f["edits"]
                ),
            )
        return cls(
            code=obj["code"],
            message=obj["message"],
            severity=Severity(obj["severity"]),
            filename=obj["filename"],
            location=Position(**obj["location"]),
            end_location=Position(**obj["end_location"]),
            phase=obj.get("phase", "static"),
            fix=fix,
            url=obj.get("url"),
            data=obj.get("data", {}),
        )


def default_view(diagnostics: list[Diagnostic], show_notes: bool = False) -> list[Diagnostic]:
    """What the human-facing outputs (text, GitHub annotations, reviewdog, review
    comments) list: every finding, and divergence notes only with ``show_notes``."""
    if show_notes:
        return list(diagnostics)
    return [d for d in diagnostics if d.shown_by_default]
