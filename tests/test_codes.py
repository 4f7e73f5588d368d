"""The one codes table: docs/rules.md is generated from it, and every URL a finding
carries resolves to a heading there."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from prefixlint import codes
from prefixlint.codes import CODES, FIXABLE, PHASES, github_anchor, render_rules_markdown

RULES_MD = Path(__file__).parent.parent / "docs" / "rules.md"
PACKAGE = Path(codes.__file__).parent


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


def test_phase2_documentation_is_written_once() -> None:
    """A phase-2 code's documentation is its unit's docstring, read without importing the
    unit (no torch); codes.py holds no second text for it."""
    phase2 = [c for c in CODES.values() if c.check]
    assert phase2 and all(not c.doc for c in phase2)
    script = (
        "import sys; from prefixlint.codes import CODES; "
        "[c.documentation() for c in CODES.values() if c.check]; "
        "print(sorted(m for m in ('torch', 'vllm', 'libcst') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr
    for entry in phase2:
        doc = entry.documentation()
        assert doc.startswith("## What it does") and "## Why is this bad?" in doc, entry.code
        assert entry.explanation in " ".join(doc.split()), entry.code


def test_github_anchor() -> None:
    assert github_anchor("PFX301 missing-prefix") == "pfx301-missing-prefix"
    assert github_anchor("What's new?") == "whats-new"


def test_phase_docs_code_tables_agree_with_the_table() -> None:
    """docs/phase2.md and docs/smoke.md list the phase-2 and smoke codes in their own
    tables; each row's code, name and severities are the table's."""
    docs = RULES_MD.parent
    text = "".join((docs / f).read_text(encoding="utf-8") for f in ("phase2.md", "smoke.md"))
    rows = re.findall(r"^\| \[?(PFX\d{3})\]?\S* \| ([\w-]+) \|([^|\n]*)\|", text, re.M)
    assert {code for code, _, _ in rows} >= {c for c in CODES if c[3] in "678"}
    for code, name, third in rows:
        assert name == CODES[code].name, f"docs name {code} `{name}`"
        severities = re.findall(r"\b(error|warning|note)\b", third)
        if severities:  # the phase-2 table's severity column: the table's is among them
            assert CODES[code].severity.value in severities, f"docs: {code} {severities}"


# Calls whose first argument or ``code=`` is a finding's code (dataclasses' ``replace``
# of a Diagnostic, ``url_for`` of its code).
_CODE_CALLS = {"Finding", "Diagnostic", "at_line", "replace", "url_for"}


def literal_codes(source: str) -> list[tuple[int, str]]:
    """The literal codes ``source`` gives a Finding or Diagnostic, but the module's own:
    the ones it declares (a rule's or check's ``code = "PFX..."``, ``CODE = ...``)."""
    tree = ast.parse(source)
    own = {
        node.value.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and any(isinstance(t, ast.Name) and t.id in ("code", "CODE") for t in node.targets)
    }
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        if name not in _CODE_CALLS:
            continue
        for arg in [*node.args[:1], *(k.value for k in node.keywords if k.arg == "code")]:
            value = arg.value if isinstance(arg, ast.Constant) else None
            if isinstance(value, str) and re.fullmatch(r"PFX\d{3}", value) and value not in own:
                found.append((arg.lineno, arg.col_offset, value))
    return [(line, code) for line, _, code in sorted(found)]


def test_codes_are_named_from_the_table_only() -> None:
    """A module emits another unit's code through ``codes.py``'s constant, never a literal
    of its own: one place says which code a finding gets."""
    literal = [
        f"{path.relative_to(PACKAGE.parent)}:{line} {code}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != Path(codes.__file__)
        for line, code in literal_codes(path.read_text(encoding="utf-8"))
    ]
    assert not literal, "use the constant in prefixlint/codes.py: " + ", ".join(literal)


def test_literal_codes_are_found() -> None:
    source = (
        "class Rule:\n"
        '    code = "PFX301"\n'
        "    def report(self):\n"
        '        Finding("PFX301", "error")  # its own code\n'
        '        Finding("PFX600", "note"), Diagnostic(code="PFX604")\n'
        '        url_for("PFX000"), replace(d, code="PFX702"), Diagnostic.at_line("PFX001")\n'
        '        other("PFX601"), d.code == "PFX602", {"code": "PFX603"}\n'
    )
    assert literal_codes(source) == [
        (5, "PFX600"),
        (5, "PFX604"),
        (6, "PFX000"),
        (6, "PFX702"),
        (6, "PFX001"),
    ]


def test_named_codes_are_the_tables() -> None:
    """Each ``*_CODE`` constant of ``codes.py`` is a code of the table, named after it."""
    named = {k: v for k, v in vars(codes).items() if k.endswith("_CODE")}
    assert "INTERNAL_ERROR_CODE" in named and "NOT_VERIFIED_CODE" in named
    for constant, code in named.items():
        assert code in CODES, f"{constant} = {code!r} is not in CODES"
        assert constant == CODES[code].name.upper().replace("-", "_") + "_CODE", constant
