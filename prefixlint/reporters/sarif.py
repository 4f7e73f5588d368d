"""SARIF 2.1.0: one run, the tool driver with every rule (static and introspect codes),
one result per finding with its location relative to the run's working directory.

GitHub code scanning (``github/codeql-action/upload-sarif``) reads this; so do VS Code's
SARIF viewer and ``sarif-tools``. Files under the working directory are given relative to
``%SRCROOT%`` (the working directory); files outside it as absolute ``file://`` URIs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import quote

from prefixlint import __version__
from prefixlint.codes import CODES, PROJECT_URL, Code
from prefixlint.diagnostic import Diagnostic, Fix, Severity

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
SRCROOT = "%SRCROOT%"


def _level(severity: str | Severity) -> str:
    return Severity(severity).sarif_level


def _rule(doc: Code) -> dict[str, Any]:
    markdown = doc.documentation() or doc.summary
    return {
        "id": doc.code,
        "name": doc.name,
        "shortDescription": {"text": doc.summary},
        "fullDescription": {"text": doc.explanation},
        "help": {"text": markdown, "markdown": markdown},
        "helpUri": doc.url,
        "defaultConfiguration": {
            "level": _level(doc.severity),
            "enabled": doc.default_enabled,
        },
        "properties": {"phase": doc.phase, "tags": [doc.phase]},
    }


def artifact_location(filename: str, root: Path) -> dict[str, Any]:
    """``filename`` (as a finding names it: relative to the cwd, or absolute) as a SARIF
    artifactLocation: relative to ``%SRCROOT%`` when under ``root``, else an absolute URI."""
    path = Path(filename)
    absolute = path if path.is_absolute() else root / path
    try:
        rel = Path(os.path.normpath(absolute)).relative_to(os.path.normpath(root))
    except ValueError:
        return {"uri": Path(os.path.normpath(absolute)).as_uri()}
    return {"uri": quote(rel.as_posix()), "uriBaseId": SRCROOT}


def _region(start_row: int, start_col: int, end_row: int, end_col: int) -> dict[str, int]:
    start_row, start_col = max(1, start_row), max(1, start_col)
    end_row = max(start_row, end_row)
    end_col = max(1, end_col)
    if end_row == start_row:
        end_col = max(start_col, end_col)
    return {
        "startLine": start_row,
        "startColumn": start_col,
        "endLine": end_row,
        "endColumn": end_col,
    }


def _fix(fix: Fix, location: dict[str, Any]) -> dict[str, Any]:
    return {
        "description": {"text": fix.message},
        "artifactChanges": [
            {
                "artifactLocation": location,
                "replacements": [
                    {
                        "deletedRegion": _region(
                            e.location.row,
                            e.location.column,
                            e.end_location.row,
                            e.end_location.column,
                        ),
                        "insertedContent": {"text": e.content},
                    }
                    for e in fix.edits
                ],
            }
        ],
    }


def to_sarif(diagnostics: list[Diagnostic], root: Path | None = None) -> dict[str, Any]:
    root = Path(os.path.abspath(root or Path.cwd()))
    docs = dict(CODES)
    for d in diagnostics:  # a code outside the catalog (PFX000, an internal error) too
        if d.code not in docs:
            docs[d.code] = Code(d.code, d.code.lower(), d.severity, d.phase, d.message)
    index = {code: i for i, code in enumerate(docs)}
    results = []
    for d in diagnostics:
        location = artifact_location(d.filename, root)
        result: dict[str, Any] = {
            "ruleId": d.code,
            "ruleIndex": index[d.code],
            "level": _level(d.severity),
            "message": {"text": d.message},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": location,
                        "region": _region(
                            d.location.row,
                            d.location.column,
                            d.end_location.row,
                            d.end_location.column,
                        ),
                    }
                }
            ],
            "properties": {"phase": d.phase},
        }
        if d.data:
            result["properties"]["data"] = d.data
        if d.fix is not None and d.fix.edits:
            result["fixes"] = [_fix(d.fix, location)]
        results.append(result)
    return {
        "$schema": SCHEMA_URI,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "prefixlint",
                        "version": __version__,
                        "semanticVersion": __version__,
                        "informationUri": PROJECT_URL,
                        "rules": [_rule(doc) for doc in docs.values()],
                    }
                },
                "originalUriBaseIds": {SRCROOT: {"uri": root.as_uri() + "/"}},
                "columnKind": "unicodeCodePoints",
                "results": results,
            }
        ],
    }


def report_sarif(diagnostics: list[Diagnostic], out: TextIO, options: dict) -> None:
    json.dump(to_sarif(diagnostics, options.get("root")), out, indent=2)
    out.write("\n")
