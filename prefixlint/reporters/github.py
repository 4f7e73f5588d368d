"""GitHub Actions workflow commands: one ``::error``/``::warning`` annotation per finding.

``::error file=PATH,line=R,col=C,endLine=R2,endColumn=C2,title=CODE::message``, escaped as
GitHub's toolkit does (``@actions/core``'s ``escapeData``/``escapeProperty``): ``%``,
``\\r`` and ``\\n`` everywhere, and ``:`` and ``,`` in properties too.
"""

from __future__ import annotations

from typing import TextIO

from prefixlint.diagnostic import Diagnostic, default_view


def escape_data(value: str) -> str:
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(value: str) -> str:
    return escape_data(value).replace(":", "%3A").replace(",", "%2C")


def annotation(d: Diagnostic) -> str:
    command = d.severity.github_command
    props = {
        "file": d.filename,
        "line": str(max(1, d.location.row)),
        "col": str(max(1, d.location.column)),
        "endLine": str(max(1, d.end_location.row)),
        "endColumn": str(max(1, d.end_location.column)),
        "title": d.code,
    }
    rendered = ",".join(f"{k}={escape_property(v)}" for k, v in props.items())
    return f"::{command} {rendered}::{escape_data(d.message)}"


def report_github(diagnostics: list[Diagnostic], out: TextIO, options: dict) -> None:
    # Annotations show on the pull request as review comments do: no divergence notes.
    for d in default_view(diagnostics, bool(options.get("show_notes"))):
        out.write(annotation(d) + "\n")
