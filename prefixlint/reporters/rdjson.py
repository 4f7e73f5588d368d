"""reviewdog's Diagnostic Format (rdjson): one ``DiagnosticResult`` JSON object.

Positions are 1-based; reviewdog counts columns in UTF-8 bytes and treats range ends as
exclusive (as prefixlint's end positions are). A finding with a fix carries its edits as
``suggestions``. Feed it to ``reviewdog -f=rdjson``.
"""

from __future__ import annotations

import json
from typing import Any, TextIO

from prefixlint.codes import PROJECT_URL, lookup
from prefixlint.diagnostic import Diagnostic, Position, default_view
from prefixlint.sourcelines import SourceLines


class _Columns:
    """Character columns to UTF-8 byte columns, reading each file once."""

    def __init__(self) -> None:
        self.sources = SourceLines()

    def byte_column(self, path: str, pos: Position) -> int:
        line = self.sources.line(path, pos.row)
        column = max(1, pos.column)
        if line is None:
            return column
        return len(line[: column - 1].encode("utf-8")) + 1 + max(0, column - 1 - len(line))

    def position(self, path: str, pos: Position) -> dict[str, int]:
        return {"line": max(1, pos.row), "column": self.byte_column(path, pos)}


def _range(cols: _Columns, path: str, start: Position, end: Position) -> dict[str, Any]:
    return {"start": cols.position(path, start), "end": cols.position(path, end)}


def to_rdjson(diagnostics: list[Diagnostic]) -> dict[str, Any]:
    cols = _Columns()
    out = []
    for d in diagnostics:
        doc = lookup(d.code)
        item: dict[str, Any] = {
            "message": d.message,
            "location": {
                "path": d.filename,
                "range": _range(cols, d.filename, d.location, d.end_location),
            },
            "severity": d.severity.rdjson_severity,
            "code": {"value": d.code, "url": d.url or (doc.url if doc else PROJECT_URL)},
        }
        if d.fix is not None and d.fix.edits:
            item["suggestions"] = [
                {
                    "range": _range(cols, d.filename, e.location, e.end_location),
                    "text": e.content,
                }
                for e in d.fix.edits
            ]
        out.append(item)
    return {
        "source": {"name": "prefixlint", "url": PROJECT_URL},
        "severity": "ERROR",
        "diagnostics": out,
    }


def report_rdjson(diagnostics: list[Diagnostic], out: TextIO, options: dict) -> None:
    # reviewdog turns these into review comments: no divergence notes unless asked for.
    shown = default_view(diagnostics, bool(options.get("show_notes")))
    json.dump(to_rdjson(shown), out, indent=2)
    out.write("\n")
