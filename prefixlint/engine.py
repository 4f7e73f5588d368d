"""Linting one file: parse, run the selected rules in one traversal, place and filter findings."""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from pathlib import Path

import libcst as cst

from prefixlint.catalog import Resolver
from prefixlint.diagnostic import Diagnostic, Edit, Fix, Position, Severity
from prefixlint.index import ModuleSummary, module_name_for
from prefixlint.rules.base import DOCS_URL, FileContext, LintRule, Report, RuleHooks
from prefixlint.rules.prefixes import PrefixAnalysis
from prefixlint.source import Item, ParsedFile, SourceError, parse_file

SYNTAX_ERROR = "PFX001"
_LINE_END = re.compile(r"\r\n|\r|\n")

_NOQA = re.compile(
    r"#\s*noqa(?::[\s]?(?P<codes>[A-Z]+[0-9]+(?:[,\s]+[A-Z]+[0-9]+)*))?", re.IGNORECASE
)


def noqa_codes(line: str) -> frozenset[str] | None:
    """Codes silenced on a line: None when none, an empty set for a bare ``# noqa``."""
    if "noqa" not in line.lower():
        return None
    m = _NOQA.search(line)
    if m is None:
        return None
    codes = m.group("codes")
    if not codes:
        return frozenset()
    return frozenset(c.upper() for c in re.split(r"[,\s]+", codes.strip()) if c)


def is_suppressed(diagnostic: Diagnostic, lines: Sequence[str]) -> bool:
    row = diagnostic.location.row
    if not 1 <= row <= len(lines):
        return False
    codes = noqa_codes(lines[row - 1])
    if codes is None:
        return False
    return not codes or diagnostic.code in codes


def syntax_error(display: str, err: SourceError) -> Diagnostic:
    pos = Position(err.row, err.column)
    return Diagnostic(
        code=SYNTAX_ERROR,
        message=err.message,
        severity=Severity.ERROR,
        filename=display,
        location=pos,
        end_location=pos,
        url=DOCS_URL.format(code=SYNTAX_ERROR.lower()),
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
        architectures: frozenset[str] = frozenset(),
    ) -> None:
        self.rules = [r for r in rules if r.code != SYNTAX_ERROR]
        self.report_syntax_errors = len(self.rules) != len(rules)
        self.resolver = resolver
        self.architectures = architectures

    def lint_path(self, path: Path, display: str | None = None) -> list[Diagnostic]:
        display = display or str(path)
        try:
            data = path.read_bytes()
        except OSError as e:
            return [syntax_error(display, SourceError(f"cannot read file: {e.strerror or e}"))]
        return self.lint_bytes(data, path, display)

    def lint_bytes(
        self, data: bytes, path: Path, display: str, full: bool = False
    ) -> list[Diagnostic]:
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
                extra_triggers_for=lambda s, text: prefix_callable_names(self.resolver, s, text),
                full=full,
            )
        except SourceError as e:
            return [syntax_error(display, e)] if self.report_syntax_errors else []
        self.resolver.loader.remember(parsed.summary)
        return self.lint_parsed(parsed, display)

    def lint_parsed(self, parsed: ParsedFile, display: str) -> list[Diagnostic]:
        ctx = FileContext(display, parsed.summary, self.resolver, self.architectures)
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
        locator = Locator(parsed.text)
        out: list[Diagnostic] = []
        seen: set[tuple[str, int, int]] = set()
        for report in reports:
            diag = self._diagnostic(report, locator, display)
            key = (diag.code, diag.location.row, diag.location.column)
            if key in seen or is_suppressed(diag, parsed.lines):
                continue
            seen.add(key)
            out.append(diag)
        out.sort(key=Diagnostic.sort_key)
        return out

    def _diagnostic(self, report: Report, locator: Locator, display: str) -> Diagnostic:
        start, end = locator.locate(report)
        fix = None
        if report.replacement is not None:
            item = report.item
            assert isinstance(item, Item)
            content = item.module.code_for_node(report.replacement)
            fix = Fix(message=f"Replace with `{content}`", edits=(Edit(content, start, end),))
        return Diagnostic(
            code=report.rule.code,
            message=report.message,
            severity=report.severity,
            filename=display,
            location=start,
            end_location=end,
            fix=fix,
            url=DOCS_URL.format(code=report.rule.code.lower()),
        )


class Locator:
    """File positions of reported nodes, found without libcst's PositionProvider.

    The provider re-generates the code of a whole module to count characters, which costs
    more than parsing it. A node's own code is exact source text, so it is searched for in
    the file, narrowing from its enclosing function and statement down to the node.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.offsets = [0]
        for m in _LINE_END.finditer(text):
            self.offsets.append(m.end())

    def position(self, offset: int) -> Position:
        row = bisect.bisect_right(self.offsets, offset)
        return Position(row, offset - self.offsets[row - 1] + 1)

    def _line_offset(self, row: int) -> int:
        return self.offsets[min(max(row, 1), len(self.offsets)) - 1]

    def locate(self, report: Report) -> tuple[Position, Position]:
        item = report.item
        assert isinstance(item, Item)
        start = self._line_offset(item.first_line)
        end = (
            self._line_offset(item.last_line + 1)
            if item.last_line < len(self.offsets)
            else len(self.text)
        )
        # Compound statements are re-indented by code generation; simple ones are verbatim.
        anchors = [
            a
            for a in report.anchors
            if isinstance(a, (cst.FunctionDef, cst.ClassDef, cst.SimpleStatementLine))
        ]
        for node in (*anchors, report.node):
            found = self._find(item, node, start, end, last=node is report.node)
            if found is None:
                break
            start, end = found
        return self.position(start), self.position(max(start, end))

    def _find(
        self, item: Item, node: cst.CSTNode, start: int, end: int, last: bool
    ) -> tuple[int, int] | None:
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            kw = "class" if isinstance(node, cst.ClassDef) else "def"
            m = re.compile(rf"\b{kw}\s+{re.escape(node.name.value)}\b").search(
                self.text, start, end
            )
            if m is None:
                return None
            # The whole definition when it is verbatim in the file, else just its header.
            body_code = item.module.code_for_node(
                node.with_changes(leading_lines=(), decorators=())
            )
            if self.text.startswith(body_code, m.start()):
                return m.start() + len(kw) + 1 + (
                    m.end() - m.start() - len(kw) - 1 - len(node.name.value)
                ), m.start() + len(body_code)
            # A sketched definition (stubbed methods): narrow to its name, keep the region.
            return m.end() - len(node.name.value), (m.end() if last else end)
        if hasattr(node, "leading_lines"):
            node = node.with_changes(leading_lines=())
        # Continuation lines are re-indented by code generation: search the first line.
        code = item.module.code_for_node(node).strip()
        first = code.split("\n", 1)[0].rstrip()
        if not first:
            return None
        idx = self.text.find(first, start, end)
        if idx < 0:
            return None
        if "\n" not in code:
            return idx, idx + len(code)
        # The end: as many lines further down, at the length of the code's last line.
        row = bisect.bisect_right(self.offsets, idx) + code.count("\n")
        last = code.rsplit("\n", 1)[1]
        line_start = self._line_offset(row)
        line = self.text[line_start : self._line_offset(row + 1)]
        stop = line.find(last.strip())
        stop_at = line_start + (stop + len(last.strip()) if stop >= 0 else len(line.rstrip()))
        return idx, min(max(stop_at, idx), end if last else stop_at)
