"""Helpers for running rules on source snippets (the VALID/INVALID examples, fixtures)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from prefixlint.diagnostic import Diagnostic
from prefixlint.static.engine import Linter
from prefixlint.static.resolve import ModuleLoader, Resolver
from prefixlint.static.rule import LintRule


@lru_cache(maxsize=1)
def _resolver() -> Resolver:
    return Resolver(ModuleLoader())


def lint_source(
    code: str,
    rules: Sequence[type[LintRule]],
    filename: str = "example.py",
) -> list[Diagnostic]:
    """Lint ``code`` as if it were a file named ``filename`` outside any package (so no
    package scope: classes are judged by their shape)."""
    linter = Linter(rules, _resolver())
    return linter.lint_bytes(code.encode("utf-8"), Path(filename), filename)
