"""Linting one file: parse, run the selected rules in one traversal, place and filter findings."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import libcst as cst

from prefixlint.codes import SYNTAX_ERROR_CODE, url_for
from prefixlint.diagnostic import NOT_VERIFIED, Diagnostic, Edit, Fix, Position, Severity
from prefixlint.noqa import is_suppressed
from prefixlint.static.index import ModuleSummary, module_name_for
from prefixlint.static.prefix_sites import PrefixAnalysis
from prefixlint.static.resolve import Resolver
from prefixlint.static.rule import PREFIX_CALLS, FileContext, LintRule, Report, RuleHooks
from prefixlint.static.scope_units import Scopes
from prefixlint.static.source import Item, ParsedFile, SourceError, parse_file


def syntax_error(display: str, err: SourceError) -> Diagnostic:
    pos = Position(err.row, err.column)
    # Newer syntax than this interpreter's: "not verified", not an error in the file.
    newer = bool(getattr(err, "newer_python", False))
    return Diagnostic(
        code=SYNTAX_ERROR_CODE,
        message=err.message,
        severity=Severity.NOTE if newer else Severity.ERROR,
        filename=display,
        location=pos,
        end_location=pos,
        url=url_for(SYNTAX_ERROR_CODE),
        data={NOT_VERIFIED: True} if newer else {},
    )


_CALLED = re.compile(r"\b([A-Za-z_][\w.]*)\s*\(")


def prefix_callable_names(resolver: Resolver, summary: ModuleSummary, text: str) -> list[str]:
    """Names called in the file that denote prefix-taking callables (methods calling them
    are worth parsing). Only called names are resolved: resolving every import would read
    half of vLLM."""
    called = {m.group(1) for m in _CALLED.finditer(text)}
    out = []
    for name in called:
        head = name.split(".")[0]
        if head in ("self", "super", "print", "len", "range", "isinstance", "getattr"):
            continue
        if resolver.prefix_signature(summary, name) is not None:
            out.append(name.rsplit(".", 1)[-1])
    return out


class Linter:
    """Runs a fixed set of rules over files; one instance per process."""

    def __init__(
        self,
        rules: Sequence[type[LintRule]],
        resolver: Resolver,
        scopes: Scopes | None = None,
    ) -> None:
        self.rules = [r for r in rules if r.code != SYNTAX_ERROR_CODE]
        self.report_syntax_errors = len(self.rules) != len(rules)
        self.resolver = resolver
        # How vLLM builds each checked package's classes, read once per package.
        self.scopes = scopes if scopes is not None else Scopes(resolver)
        words = {w for rule in self.rules for w in rule.triggers}
        self.needs_prefix_calls = PREFIX_CALLS in words
        self.triggers = frozenset(words - {PREFIX_CALLS})
        self.statement_triggers = frozenset(w for r in self.rules for w in r.statement_triggers)

    def _triggers_for(self, summary: ModuleSummary, text: str) -> Iterable[str]:
        if not self.needs_prefix_calls:
            return self.triggers
        return self.triggers | set(prefix_callable_names(self.resolver, summary, text))

    def lint_path(self, path: Path, display: str | None = None) -> list[Diagnostic]:
        display = display or str(path)
        try:
            data = path.read_bytes()
        except OSError as e:
            return [syntax_error(display, SourceError(f"cannot read file: {e.strerror or e}"))]
        return self.lint_bytes(data, path, display)

    def lint_text(self, text: str, path: Path, display: str) -> list[Diagnostic]:
        """Lint source that is already decoded (``--fix`` re-lints what it edited)."""
        return self.lint_bytes(text, path, display)

    def lint_bytes(self, data: bytes | str, path: Path, display: str) -> list[Diagnostic]:
        try:
            module, is_package = module_name_for(path)
        except OSError:
            module, is_package = None, False
        try:
            parsed = parse_file(
                data,
                str(path),
                module,
                is_package,
                triggers_for=self._triggers_for,
                statement_triggers=self.statement_triggers,
            )
        except SourceError as e:
            return [syntax_error(display, e)] if self.report_syntax_errors else []
        self.resolver.loader.remember(parsed.summary)
        return self.lint_parsed(parsed, display)

    def lint_parsed(self, parsed: ParsedFile, display: str) -> list[Diagnostic]:
        scope = self.scopes.for_file(Path(parsed.summary.path))
        ctx = FileContext(display, parsed.summary, self.resolver, scope)
        ctx.source_text = parsed.text
        rules = [rule(ctx) for rule in self.rules]
        walk = PrefixAnalysis(ctx.prefix_signature, RuleHooks(rules))
        ctx.prefixes = walk
        try:
            for item in parsed.items:
                walk.run(item, item.module)
            for rule in rules:
                leave = getattr(rule, "leave_Module", None)
                if leave is not None:
                    leave()
        except RecursionError:
            return [syntax_error(display, SourceError("file is nested too deeply to analyse"))]
        reports = [r for rule in rules for r in rule.reports]
        if not reports:
            return []
        positions = Positions(parsed.text)
        out: list[Diagnostic] = []
        seen: set[tuple[str, int, int]] = set()
        for report in reports:
            diag = _diagnostic(report, positions, display)
            key = (diag.code, diag.location.row, diag.location.column)
            if key in seen or is_suppressed(diag, parsed.lines):
                continue
            seen.add(key)
            out.append(diag)
        out.sort(key=Diagnostic.sort_key)
        return out


def _diagnostic(report: Report, positions: Positions, display: str) -> Diagnostic:
    item = report.item
    assert isinstance(item, Item)
    start, end = positions.span(item, report.node)
    fix = None
    if report.fix is not None:
        edit = positions.edit(item, report.fix.node, report.fix.replacement)
        if edit is not None:
            fix = Fix(message=report.fix.title, edits=(edit,))
    return Diagnostic(
        code=report.rule.code,
        message=report.message,
        severity=report.severity,
        filename=display,
        location=start,
        end_location=end,
        fix=fix,
        url=url_for(report.rule.code),
        no_fix=report.no_fix,
        data={**report.data, NOT_VERIFIED: True} if report.not_verified else dict(report.data),
    )


class Positions:
    """Exact file positions of reported nodes, from libcst's position metadata.

    Metadata is computed per item (a top-level statement's sketch), and only for items
    that hold a report: resolving it regenerates the item's code, which costs about as
    much as parsing it. Sketch lines are verbatim file lines, so columns carry over and
    rows go through the item's line map.
    """

    def __init__(self, text: str) -> None:
        self.newline = "\r\n" if "\r\n" in text[: text.find("\n") + 1 or None] else "\n"
        self._metadata: dict[int, Mapping[cst.CSTNode, Any]] = {}
        self._code: dict[int, str] = {}  # each item's own code, generated once

    def span(self, item: Item, node: cst.CSTNode) -> tuple[Position, Position]:
        ranges = self._metadata.get(id(item))
        if ranges is None:
            # Imported here: only files with a finding need positions.
            from libcst.metadata import MetadataWrapper, PositionProvider

            wrapper = MetadataWrapper(item.module, unsafe_skip_copy=True)
            ranges = wrapper.resolve(PositionProvider)
            self._metadata[id(item)] = ranges
        found = ranges.get(node)
        if found is None:  # a node the rule built, not one of the file's: its statement
            first = Position(item.first_line, 1)
            return first, first
        to_file = item.line_map.to_file
        return (
            Position(to_file(found.start.line), found.start.column + 1),
            Position(to_file(found.end.line), found.end.column + 1),
        )

    def edit(self, item: Item, node: cst.CSTNode, replacement: cst.CSTNode) -> Edit | None:
        """The smallest edit of the file that turns ``node`` into ``replacement``.

        The item is regenerated with the replacement in place (a detached node would lose
        its block's indentation) and compared with the item's own code: what differs
        between their common head and tail is the edit.
        """
        old = self._code.get(id(item))
        if old is None:
            old = self._code[id(item)] = item.module.code
        new = item.module.deep_replace(node, replacement)
        assert isinstance(new, cst.Module)
        new_code = new.code
        if new_code == old:
            return None
        head = 0
        limit = min(len(old), len(new_code))
        while head < limit and old[head] == new_code[head]:
            head += 1
        tail = 0
        while tail < limit - head and old[-1 - tail] == new_code[-1 - tail]:
            tail += 1
        content = new_code[head : len(new_code) - tail]
        if self.newline != "\n":  # sketches use "\n"; the edit keeps the file's endings
            content = content.replace("\n", self.newline)
        return Edit(
            content,
            self._file_position(item, old, head),
            self._file_position(item, old, len(old) - tail),
        )

    @staticmethod
    def _file_position(item: Item, code: str, offset: int) -> Position:
        line = code.count("\n", 0, offset) + 1
        column = offset - (code.rfind("\n", 0, offset) + 1) + 1
        return Position(item.line_map.to_file(line), column)
