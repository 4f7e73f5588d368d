"""The one codes table: docs/rules.md is generated from it, and every URL a finding
carries resolves to a heading there."""

from __future__ import annotations

import re
from pathlib import Path

from prefixlint.codes import CODES, FIXABLE, PHASES, github_anchor, render_rules_markdown

RULES_MD = Path(__file__).parent.parent / "docs" / "rules.md"


def test_rules_md_is_generated_from_the_table() -> None:
    assert RULES_MD.read_text(encoding="utf-8") == render_rules_markdown(), (
        "docs/rules.md is stale: run `python -m prefixlint.codes > docs/rules.md`"
    )


def test_every_code_url_resolves_to_a_heading() -> None:
    headings = re.findall(r"^#{1,6} (.+)$", RULES_MD.read_text(encoding="utf-8"), re.M)
    anchors = {github_anchor(h) for h in headings}
    for entry in CODES.values():
        url, _, anchor = entry.url.partition("#")
        assert url.endswith("/docs/rules.md")
        assert anchor in anchors, f"{entry.code}: #{anchor} is not a heading of docs/rules.md"


def test_table_is_consistent() -> None:
    assert all(entry.phase in PHASES for entry in CODES.values())
    assert all(re.fullmatch(r"PFX\d{3}", code) for code in CODES)
    assert all(
        entry.name == entry.name.lower() and " " not in entry.name for entry in CODES.values()
    )
    assert len({e.name for e in CODES.values()}) == len(CODES)
    assert {"PFX301", "PFX302", "PFX405", "PFX406"} == FIXABLE
    for entry in CODES.values():
        assert entry.documentation(), f"{entry.code} has no documentation"


def test_github_anchor() -> None:
    assert github_anchor("PFX301 missing-prefix") == "pfx301-missing-prefix"
    assert github_anchor("What's new?") == "whats-new"


def test_readme_code_tables_agree_with_the_table() -> None:
    """README explains the phase-2 and smoke codes in its own tables (with more to say
    than the one-line summaries); each row's code, name and severities are the table's."""
    readme = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (PFX\d{3}) \| ([\w-]+) \|([^|\n]*)\|", readme, re.M)
    assert {code for code, _, _ in rows} >= {c for c in CODES if c[3] in "678"}
    for code, name, third in rows:
        assert name == CODES[code].name, f"README names {code} `{name}`"
        severities = re.findall(r"\b(error|warning|note)\b", third)
        if severities:  # the phase-2 table's severity column: the table's is among them
            assert CODES[code].severity.value in severities, f"README: {code} {severities}"
