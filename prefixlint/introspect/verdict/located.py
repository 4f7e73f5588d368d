"""Notes located in the user's code: phase 2's "not verified" notes for a plugin class
that subclasses a vLLM model must not point into vLLM's own files (issue 30).

A note at a construction site of vLLM's file that no build ran is dropped when no line of
the function holding it ran in any build (code the plugin replaced, by overriding it or by
building its own classes instead); any other note located in vLLM's files moves to the
plugin class's line, saying where in vLLM's code it was. Targets that are vLLM's own
models keep theirs.
"""

from __future__ import annotations

import ast
import os
from typing import Any

from prefixlint.codes import NOT_VERIFIED_CODE
from prefixlint.introspect.coverage.sites import UNEXECUTED_SITE
from prefixlint.introspect.finding import Finding, class_site
from prefixlint.introspect.verdict.own import parsed, vllm_root


def in_user_code(findings: list[Finding], cls: type | None, builds: list[Any]) -> list[Finding]:
    """``findings`` with the notes located in vLLM's files dropped or moved (see above)."""
    root = vllm_root()
    file, line = class_site(cls)
    if cls is None or not root or not file or file.startswith(root):
        return findings
    ran: dict[str, set[int]] = {}
    for build in builds:
        for f, lines in build.recorder.lines.items():
            ran.setdefault(f, set()).update(lines)
    out = []
    for finding in findings:
        if finding.code != NOT_VERIFIED_CODE or not finding.file.startswith(root):
            out.append(finding)
            continue
        if finding.group == UNEXECUTED_SITE:
            start, end = _function_span(finding.file, finding.line)
            if start and not any(start <= n <= end for n in ran.get(finding.file, ())):
                continue  # code the plugin replaced: nothing of it ran
        where = f"{os.path.relpath(finding.file, os.path.dirname(root))}:{finding.line}"
        finding.message += f" (at {where}, vLLM's code that `{cls.__name__}` reaches)"
        finding.file, finding.line = file, line
        out.append(finding)
    return out


def _function_span(file: str, line: int) -> tuple[int, int]:
    """(first, last) line of the innermost ``def`` holding ``line``; (0, 0) for none."""
    tree = parsed(file)
    if tree is None:
        return 0, 0
    spans = [
        (node.lineno, node.end_lineno or node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.lineno <= line <= (node.end_lineno or node.lineno)
    ]
    return max(spans, default=(0, 0))
