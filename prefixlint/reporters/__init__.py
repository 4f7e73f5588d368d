"""Reporters: each turns a list of Diagnostic into one output format."""

from __future__ import annotations

from collections.abc import Callable
from typing import TextIO

from prefixlint.diagnostic import Diagnostic
from prefixlint.reporters.github import report_github
from prefixlint.reporters.json import report_json
from prefixlint.reporters.rdjson import report_rdjson
from prefixlint.reporters.sarif import report_sarif
from prefixlint.reporters.text import report_text

Reporter = Callable[[list[Diagnostic], TextIO, dict], None]

REPORTERS: dict[str, Reporter] = {
    "text": report_text,
    "json": report_json,
    "sarif": report_sarif,
    "github": report_github,
    "rdjson": report_rdjson,
}

# Formats that carry findings only (no run summary): what zoo offers beside text/json.
