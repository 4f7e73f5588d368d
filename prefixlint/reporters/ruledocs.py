"""Every rule's catalog entry, for the formats that describe rules (SARIF, review comments).

Static rules come from ``RULE_TABLE`` with their documentation from the rule classes'
docstrings (the text of ``prefixlint rule CODE``); later phases' codes from
``ruletable.phase_rules()``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

PROJECT_URL = "https://github.com/prefixlint/prefixlint"
DOCS_URL = PROJECT_URL + "/blob/main/docs/rules.md#{code}"


@dataclass(frozen=True)
class RuleDoc:
    code: str
    name: str
    severity: str  # "error" | "warning"
    enabled: bool
    phase: str  # "static" | "introspect"
    summary: str
    markdown: str  # the full documentation

    @property
    def url(self) -> str:
        return DOCS_URL.format(code=self.code.lower())

    @property
    def explanation(self) -> str:
        """The rule's short explanation: its "Why is this bad?" paragraph, else the summary."""
        found = re.search(r"## Why is this bad\?\s*\n(.*?)(?:\n\s*\n|\n##|\Z)", self.markdown, re.S)
        if found:
            return " ".join(found.group(1).split())
        if self.phase == "introspect" and self.markdown:
            return " ".join(self.markdown.split())
        return self.summary.rstrip(".") + "."


def _static_docs() -> dict[str, str]:
    try:
        from prefixlint.rules import RULES_BY_CODE
    except Exception:  # the catalog still works from the table alone
        return {}
    return {code: rule.documentation() for code, rule in RULES_BY_CODE.items()}


@functools.lru_cache(maxsize=1)
def catalog() -> dict[str, RuleDoc]:
    """code -> RuleDoc, static rules first, then the introspect codes, each in code order."""
    from prefixlint.ruletable import RULE_TABLE, phase_rules

    docs = _static_docs()
    out: dict[str, RuleDoc] = {}
    for code, (name, severity, enabled, summary) in RULE_TABLE.items():
        out[code] = RuleDoc(code, name, severity, enabled, "static", summary, docs.get(code, ""))
    for code, (name, severity, summary, doc, phase) in phase_rules().items():
        out[code] = RuleDoc(code, name, severity, True, phase, summary, doc)
    return out


def lookup(code: str) -> RuleDoc | None:
    return catalog().get(code)
