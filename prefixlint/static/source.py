"""Reading a file and building the concrete syntax tree the rules see.

A whole-file libcst parse is the expensive part of a lint run (about 4x ``ast``). Most of a
model file cannot matter to any rule: weight loading, processor classes, dataclasses. So the
file is first parsed with ``ast`` (for the index and for exact statement boundaries), and
libcst then parses a *sketch*: the relevant top-level classes and functions, verbatim, with
methods that cannot matter replaced by a one-line ``def name(self): ...`` stub (kept so that
rules still see which methods exist). A line map turns sketch lines back into file lines.
"""

from __future__ import annotations

import ast
import bisect
import io
import re
import sys
import tokenize
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import libcst as cst

from prefixlint.sourcelines import split_lines
from prefixlint.static.index import ModuleSummary, summarize
from prefixlint.static.model_classes import ARCHITECTURE_NAME

# Methods a rule always needs in full, whatever they contain.
# Other methods keep their signature, and their body only when a trigger word is in it.
ALWAYS_PARSED_METHODS: frozenset[str] = frozenset({"__init__", "register"})


class SourceError(Exception):
    """The file cannot be read, decoded or parsed; carries a 1-based position."""

    def __init__(
        self, message: str, row: int = 1, column: int = 1, newer_python: bool = False
    ) -> None:
        super().__init__(message)
        self.message = message
        self.row = max(row, 1)
        self.column = max(column, 1)
        # Valid for a newer Python than this one (libcst's grammar accepts it): a gap of
        # the running interpreter, not an error in the file.
        self.newer_python = newer_python


def decode(data: bytes) -> str:
    """Decode as Python does (BOM, PEP 263 cookie, else UTF-8), with a clear error."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as e:
        # No usable cookie and not UTF-8 in the first lines: say where UTF-8 fails.
        encoding = "utf-8"
        try:
            data.decode(encoding)
        except UnicodeDecodeError:
            pass  # reported with its position below
        else:
            raise SourceError(f"cannot decode file: {e.msg}") from None
    try:
        text = data.decode(encoding)
    except (UnicodeDecodeError, LookupError) as e:
        if isinstance(e, UnicodeDecodeError):
            row = data.count(b"\n", 0, e.start) + 1
            col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
            raise SourceError(
                f"file is not valid {encoding}: byte 0x{data[e.start]:02x} cannot be decoded",
                row,
                col,
            ) from None
        raise SourceError(f"unknown source encoding {encoding!r}") from None
    if text.startswith("\ufeff"):
        text = text[1:]
    return text


def parse_ast(text: str) -> ast.Module:
    try:
        return ast.parse(text)
    except SyntaxError as e:
        maybe_newer = _NEWER_SYNTAX.search(text) and "nested" not in (e.msg or "")
        newer = _newer_grammar(text) if maybe_newer else None
        if newer:
            raise SourceError(
                f"not checked: this file uses Python {newer} syntax (line {e.lineno}: "
                f"{e.msg}) and prefixlint runs on Python {sys.version_info[0]}."
                f"{sys.version_info[1]}; run prefixlint on Python {newer} or later",
                e.lineno or 1,
                e.offset or 1,
                newer_python=True,
            ) from None
        raise SourceError(f"syntax error: {e.msg}", e.lineno or 1, e.offset or 1) from None
    except (ValueError, MemoryError, RecursionError) as e:
        # null bytes, or nesting too deep for the parser
        raise SourceError(f"cannot parse file: {e}") from None


# What only newer grammars accept: ``type X = ...``, ``class Box[T]``/``def f[T]``, an
# f-string (PEP 701 nests quotes). Only then is libcst asked: its native parser can crash
# on input the stdlib rejects for depth.
_NEWER_SYNTAX = re.compile(r"^\s*type\s+\w+|^\s*(?:class|def)\s+\w+\[|\bf[\"']", re.M)


def _newer_grammar(text: str) -> str | None:
    """The Python version whose grammar accepts ``text`` when this interpreter's does not
    (``type X = ...``, ``class Box[T]``, PEP 701 f-strings need 3.12), else None."""
    import libcst as cst

    running = f"{sys.version_info[0]}.{sys.version_info[1]}"
    for version in ("3.12", "3.13", "3.14"):
        if version <= running:
            continue
        try:
            cst.parse_module(text, config=cst.PartialParserConfig(python_version=version))
        except Exception:
            continue
        return version
    return None


@dataclass
class LineMap:
    """Maps 1-based lines of the sketch to lines of the file."""

    sketch_starts: list[int]
    file_starts: list[int]

    def to_file(self, sketch_line: int) -> int:
        i = bisect.bisect_right(self.sketch_starts, sketch_line) - 1
        if i < 0:
            return sketch_line
        return self.file_starts[i] + (sketch_line - self.sketch_starts[i])


@dataclass
class Item:
    """One top-level class or function of the file, as the rules see it."""

    module: cst.Module
    line_map: LineMap
    first_line: int  # in the file
    last_line: int
    name: str


@dataclass
class ParsedFile:
    text: str
    lines: list[str]
    tree: ast.Module
    summary: ModuleSummary
    items: list[Item]


def _start(node: ast.stmt) -> int:
    decorators = getattr(node, "decorator_list", None) or []
    return min([node.lineno] + [d.lineno for d in decorators])


class _Sketch:
    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.out: list[str] = []
        self.sketch_starts: list[int] = []
        self.file_starts: list[int] = []

    def verbatim(self, first: int, last: int) -> None:
        self._chunk(first, self.lines[first - 1 : last])

    def _chunk(self, file_line: int, chunk: list[str]) -> None:
        if not chunk:
            return
        self.sketch_starts.append(len(self.out) + 1)
        self.file_starts.append(file_line)
        self.out.extend(chunk)

    def stub(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """The method's header (decorators and signature) verbatim, its body ``...``."""
        first = node.body[0]
        body_first = first.lineno
        header_first = _start(node)
        # The body may start on the signature's last line (``def f(\n  x): return x``):
        # the header cannot be cut at a line then, and the one-line stub is used.
        shares_line = self.lines[body_first - 1][: first.col_offset].strip()
        if body_first <= node.lineno or shares_line:
            line = self.lines[node.lineno - 1]
            indent = line[: len(line) - len(line.lstrip())]
            kw = "async def" if isinstance(node, ast.AsyncFunctionDef) else "def"
            self._chunk(node.lineno, [f"{indent}{kw} {node.name}(self): ..."])
            return
        body_line = self.lines[body_first - 1]
        indent = body_line[: len(body_line) - len(body_line.lstrip())]
        self._chunk(header_first, self.lines[header_first - 1 : body_first - 1])
        self._chunk(body_first, [f"{indent}..."])

    def text(self) -> str:
        return "\n".join(self.out) + "\n"


def _one_statement_per_line(stmts: list[ast.stmt]) -> bool:
    last_end = 0
    for s in stmts:
        if _start(s) <= last_end:
            return False
        last_end = s.end_lineno or s.lineno
    return True


def _pattern(words: Iterable[str]) -> re.Pattern[str]:
    ordered = sorted(set(words), key=len, reverse=True)
    # No word: a pattern that never matches.
    return re.compile("|".join(re.escape(w) for w in ordered) if ordered else r"(?!)")


def sketch_items(
    tree: ast.Module,
    lines: list[str],
    triggers: Iterable[str] = (),
    statement_triggers: Iterable[str] = (),
) -> list[tuple[str, LineMap, int, int, str]]:
    """The sketch of each relevant top-level statement: (text, line map, first, last, name).

    ``triggers`` are the words that make a method worth parsing in full: the rules of the
    run declare them (``LintRule.triggers``); ``statement_triggers`` those that make a
    top-level statement that defines nothing worth parsing (``LintRule.statement_triggers``).
    """
    trigger = _pattern(triggers)
    statement = _pattern(statement_triggers)
    out: list[tuple[str, LineMap, int, int, str]] = []

    def matters(node: ast.stmt, pattern: re.Pattern[str] = trigger) -> bool:
        first, last = _start(node), node.end_lineno or node.lineno
        return pattern.search("\n".join(lines[first - 1 : last])) is not None

    def emit(sketch: _Sketch, first: int, last: int, name: str) -> None:
        out.append(
            (sketch.text(), LineMap(sketch.sketch_starts, sketch.file_starts), first, last, name)
        )

    for node in tree.body:
        first, last = _start(node), node.end_lineno or node.lineno
        sketch = _Sketch(lines)
        name = getattr(node, "name", "")
        if isinstance(node, ast.ClassDef):
            body = node.body
            header_end = _start(body[0]) - 1
            if header_end < node.lineno or not _one_statement_per_line(body):
                if matters(node):
                    sketch.verbatim(first, last)
                    emit(sketch, first, last, name)
                continue
            methods = [b for b in body if isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef))]
            if (
                not any(m.name in ("__init__", "forward") for m in methods)
                and not ARCHITECTURE_NAME.search(node.name)  # kept for interfaces
                and not matters(node)
            ):
                continue
            sketch.verbatim(first, header_end)
            for stmt in body:
                s_first, s_last = _start(stmt), stmt.end_lineno or stmt.lineno
                if (
                    isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and stmt.name not in ALWAYS_PARSED_METHODS
                    and not matters(stmt)
                ):
                    sketch.stub(stmt)
                else:
                    sketch.verbatim(s_first, s_last)
            emit(sketch, first, last, name)
        elif (
            isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.If, ast.Try))
            and node_is_def_container(node)
            and matters(node)
        ) or (isinstance(node, (ast.Expr, ast.If, ast.Try)) and matters(node, statement)):
            sketch.verbatim(first, last)
            emit(sketch, first, last, name)
    return out


def node_is_def_container(node: ast.stmt) -> bool:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return True
    return any(
        isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        for sub in ast.walk(node)
    )


def parse_file(
    data: bytes | str,
    path: str,
    module: str | None,
    is_package: bool,
    triggers_for: Callable[[ModuleSummary, str], Iterable[str]] | None = None,
    statement_triggers: Iterable[str] = (),
) -> ParsedFile:
    """Decode (unless ``data`` is text already), index and sketch one file. Raises
    SourceError for unusable input.

    ``triggers_for`` takes the module summary and the text and returns the words that make
    a method worth parsing (the rules' triggers and, for the prefix rules, the local names
    of prefix-taking callables).
    """
    text = data if isinstance(data, str) else decode(data)
    tree = parse_ast(text)
    summary = summarize(tree, path, module, is_package)
    lines = split_lines(text)
    specs = sketch_items(
        tree, lines, triggers_for(summary, text) if triggers_for else (), statement_triggers
    )
    items: list[Item] = []
    for sketch_text, line_map, first, last, name in specs:
        try:
            item_module = cst.parse_module(sketch_text)
        except cst.ParserSyntaxError:
            # A sketch parses whenever the file does; if not, take the statement verbatim.
            verbatim = "\n".join(lines[first - 1 : last]) + "\n"
            try:
                item_module = cst.parse_module(verbatim)
            except cst.ParserSyntaxError as e:
                raise SourceError(
                    f"syntax error: {e.message}", first + e.raw_line - 1, e.raw_column + 1
                ) from None
            line_map = LineMap([1], [first])
        except RecursionError:
            raise SourceError("file is nested too deeply to analyse", first) from None
        items.append(Item(item_module, line_map, first, last, name))
    return ParsedFile(text=text, lines=lines, tree=tree, summary=summary, items=items)
