"""The one finding type that every phase produces and every reporter consumes."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    # "Not verified": something prefixlint could not check (a build it could not make, a
    # tool it lacks). Shown in every format, never a finding against the user's model, and
    # it never fails a run (only ``--strict`` makes it count).
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
