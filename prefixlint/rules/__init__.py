"""The static rules, one per file named after its code and name (as ruff and Fixit lay
them out). Codes are a public contract: never renumber, only deprecate; each rule's code,
name, severity and summary come from ``prefixlint.codes``."""

from __future__ import annotations

import importlib
import pkgutil

from prefixlint.static.rule import LintRule


def _discover() -> list[type[LintRule]]:
    found: list[type[LintRule]] = []
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("pfx"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        found += [
            obj
            for obj in vars(module).values()
            if isinstance(obj, type)
            and issubclass(obj, LintRule)
            and obj is not LintRule
            and obj.__module__ == module.__name__
        ]
    return sorted(found, key=lambda r: r.code)


ALL_RULES: list[type[LintRule]] = _discover()
RULES_BY_CODE: dict[str, type[LintRule]] = {r.code: r for r in ALL_RULES}
