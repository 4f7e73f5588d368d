"""JSON: one array of findings, in ruff's JSON shape (a public contract)."""

from __future__ import annotations

import json
from typing import TextIO

from prefixlint.diagnostic import Diagnostic


def report_json(diagnostics: list[Diagnostic], out: TextIO, options: dict) -> None:
    json.dump([d.to_json() for d in diagnostics], out, indent=2)
    out.write("\n")
