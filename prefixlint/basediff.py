"""Base against head for ``--diff-base`` and ``review``: which findings the change caused.

Each changed file that existed at the base is materialised there (``BaseTree``): its
package folder as it was at the base, with the ``__init__.py`` of the folders above, in a
temporary folder, so that relative imports and a registration resolve as they did. The
same checks run on both sides; a finding is the change's when it is new at head by
identity (``site_key``: its code, the qualified name of the class or function that holds
it and the statement's structured key, never its line or its words, since lines move and
messages name values). A finding of the change whose lines are off the diff gets the
nearest changed line of the same function or class (``anchor_line``), where a review
comment can sit.
"""

from __future__ import annotations

import ast
import io
import shutil
import subprocess
import tarfile
import tempfile
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

from prefixlint.diagnostic import Diagnostic, Severity
from prefixlint.diffbase import ChangedLines, DiffError

# ``data`` key of a finding of the change whose own lines are off the diff: the changed
# row where a review comment about it sits.
CHANGED_LINE = "changed_line"


@dataclass
class BaseTree:
    """The changed files as they were at the base, in ``folder`` (removed by ``close``)."""

    folder: Path
    files: dict[str, Path] = field(default_factory=dict)  # head repo path -> base copy
    keep: bool = False  # a folder of the results cache: kept for the next run

    def head_path(self, base_file: str | Path) -> str | None:
        """The head repo path of a base copy, or None."""
        target = Path(base_file).resolve()
        return next((h for h, c in self.files.items() if c.resolve() == target), None)

    def close(self) -> None:
        if not self.keep:
            shutil.rmtree(self.folder, ignore_errors=True)


def _git_bytes(args: list[str], cwd: Path) -> bytes:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True)
    if done.returncode != 0:
        raise DiffError(f"git {args[0]} failed: {done.stderr.decode('utf-8', 'replace').strip()}")
    return done.stdout


def base_paths(changes: ChangedLines) -> dict[str, str | None]:
    """Head repo path -> its path at the base (renames followed), or None for a file the
    change added. Files the change deleted are not listed: they give nothing."""
    raw = _git_bytes(["diff", "--name-status", "-M", "-z", changes.base, "--"], changes.root)
    fields = raw.decode("utf-8", "surrogateescape").split("\0")
    out: dict[str, str | None] = {}
    i = 0
    while i < len(fields) and fields[i]:
        status = fields[i]
        if status[0] in "RC":
            out[fields[i + 2]] = fields[i + 1]
            i += 3
            continue
        if status[0] == "A":
            out[fields[i + 1]] = None
        elif status[0] != "D":
            out[fields[i + 1]] = fields[i + 1]
        i += 2
    for path in changes.whole:
        out[path] = None  # untracked: wholly new
    return out


def materialise(
    changes: ChangedLines, head_paths: list[str], cache: Path | None = None
) -> BaseTree:
    """The base copies of ``head_paths`` (repo-relative) that existed at the base, each
    with its package folder and the ``__init__.py`` files above it, in one ``git archive``.
    ``cache``: the results cache folder: the copies go to ``base/<commit>`` there and stay
    (a base commit never changes), so a later run finds them, and the static phase's
    cached results for them (keyed by path); None: a temporary folder."""
    at_base = base_paths(changes)
    wanted = {h: at_base[h] for h in head_paths if at_base.get(h)}
    if cache is None:
        tree = BaseTree(Path(tempfile.mkdtemp(prefix="prefixlint-base-")))
    else:
        tree = BaseTree((cache / "base" / changes.base).resolve(), keep=True)
        ignore = cache / ".gitignore"  # as the results cache writes it: not a change
        if not ignore.exists():
            cache.mkdir(parents=True, exist_ok=True)
            ignore.write_text("# Automatically created by prefixlint.\n*\n")
    if not wanted:
        return tree
    copies = {h: tree.folder / old for h, old in wanted.items()}  # type: ignore[operator]
    if tree.keep and all(c.is_file() for c in copies.values()):
        tree.files = copies  # extracted by an earlier run, with their package folders
        return tree
    folders, inits = set(), set()
    for old in wanted.values():
        parent = PurePosixPath(old).parent  # type: ignore[arg-type]
        folders.add(parent.as_posix())
        for above in parent.parents:
            if above.as_posix() != ".":
                inits.add((above / "__init__.py").as_posix())
    listed = _git_bytes(
        ["ls-tree", "--name-only", "-z", changes.base, "--", *sorted(inits)], changes.root
    )
    names = [n for n in listed.decode("utf-8", "surrogateescape").split("\0") if n]
    # a folder's own files (its package), not its subpackages
    for folder in sorted(folders):
        spec = f"{changes.base}:{folder}" if folder != "." else changes.base
        raw = _git_bytes(["ls-tree", "--name-only", "-z", spec], changes.root)
        prefix = "" if folder == "." else folder + "/"
        names += [prefix + n for n in raw.decode("utf-8", "surrogateescape").split("\0") if n]
    files = sorted({n for n in names if n.endswith(".py")} | set(wanted.values()))  # type: ignore[arg-type]
    archive = _git_bytes(["archive", "--format=tar", changes.base, "--", *files], changes.root)
    # into a fresh folder, then moved in place: a run that reads the cache meanwhile
    # sees whole files or none
    tree.folder.parent.mkdir(parents=True, exist_ok=True)
    fresh = Path(tempfile.mkdtemp(prefix="prefixlint-base-", dir=tree.folder.parent))
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        if hasattr(tarfile, "data_filter"):  # Python 3.11.4+: no link or path outside
            tar.extractall(fresh, filter="data")
        else:  # git's own archive of the repository's files
            tar.extractall(fresh)
    _merge(fresh, tree.folder)
    tree.files = copies
    return tree


def _merge(fresh: Path, folder: Path) -> None:
    """Move the files of ``fresh`` into ``folder`` (those it lacks), then remove ``fresh``."""
    if not folder.exists():
        fresh.rename(folder)
        return
    for path in sorted(fresh.rglob("*")):
        target = folder / path.relative_to(fresh)
        if path.is_dir():
            target.mkdir(exist_ok=True)
        elif not target.exists():
            path.replace(target)
    shutil.rmtree(fresh, ignore_errors=True)


# -- identity ---------------------------------------------------------------------------


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Subscript):
        return f"{_dotted(node.value)}[]"
    if isinstance(node, ast.Call):
        return f"{_dotted(node.func)}()"
    return type(node).__name__


def _anchor(stmt: ast.stmt) -> str:
    """A statement's structured key: what it assigns, calls, defines or returns."""
    if isinstance(stmt, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
        return f"def {stmt.name}"
    if isinstance(stmt, ast.Assign):
        return "=" + ",".join(_dotted(t) for t in stmt.targets)
    if isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
        return "=" + _dotted(stmt.target)
    if isinstance(stmt, ast.Expr):
        return "call " + _dotted(stmt.value)
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        return "for " + _dotted(stmt.target) + " in " + _dotted(stmt.iter)
    return type(stmt).__name__.lower()


class SiteIndex:
    """One file's statements, for ``site_key`` and ``anchor_line`` (parsed once)."""

    def __init__(self, text: str) -> None:
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            tree = ast.Module(body=[], type_ignores=[])
        self.scopes: list[tuple[int, int, str]] = []  # function and class spans, qualname
        # (first row, last row (a compound statement: its header), scope, key, node)
        self.stmts: list[tuple[int, int, str, str, ast.stmt]] = []
        self._walk(tree.body, "")

    def _walk(self, body: list[ast.stmt], scope: str) -> None:
        seen: Counter[str] = Counter()
        for stmt in body:
            first = min([stmt.lineno, *(d.lineno for d in getattr(stmt, "decorator_list", []))])
            anchor = _anchor(stmt)
            seen[anchor] += 1
            key = f"{anchor}#{seen[anchor]}"  # the n-th alike statement of its scope
            inner = getattr(stmt, "body", None)
            if isinstance(stmt, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{scope}.{stmt.name}" if scope else stmt.name
                header = max(stmt.lineno, stmt.body[0].lineno - 1)
                self.scopes.append((first, stmt.end_lineno or first, name))
                self.stmts.append((first, header, scope, key, stmt))
                self._walk(stmt.body, name)
                continue
            if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                header = max(stmt.lineno, inner[0].lineno - 1)
                self.stmts.append((first, header, scope, key, stmt))
                for part in ("body", "orelse", "finalbody"):
                    self._walk(getattr(stmt, part, []) or [], scope)
                for handler in getattr(stmt, "handlers", []) or []:
                    self._walk(handler.body, scope)
                continue
            self.stmts.append((first, stmt.end_lineno or first, scope, key, stmt))

    def scope_at(self, row: int) -> str:
        holding = [s for s in self.scopes if s[0] <= row <= s[1]]
        return max(holding, key=lambda s: s[0])[2] if holding else ""

    def key_at(self, row: int) -> tuple[str, str]:
        """(qualname of the holding scope, the statement's key and the keyword argument
        that holds ``row``, if one)."""
        holding = [s for s in self.stmts if s[0] <= row <= s[1]]
        if not holding:
            return self.scope_at(row), f"row-outside-statements:{row > 0}"
        first, _, scope, key, stmt = min(holding, key=lambda s: (s[1] - s[0], -s[0]))
        if row == first:  # the statement's own line: the statement is the site
            return scope, key
        for node in ast.walk(stmt):
            if isinstance(node, ast.keyword) and node.lineno <= row <= (node.end_lineno or 0):
                return scope, f"{key} {node.arg}="
        return scope, key


def site_key(d: Diagnostic, path: str, index: SiteIndex) -> tuple[str, ...]:
    """A finding's identity across base and head: code, file, scope and statement key, and
    the structured facts of its ``data`` that name what it is about (never a line)."""
    from prefixlint.check_introspect import public_name

    scope, key = index.key_at(d.location.row)
    # public names: a base copy may be built as an out-of-tree class (``X__prefixlint``)
    # where head's file is the registry's own
    about = tuple(
        f"{k}={public_name(str(d.data[k]))}"
        for k in ("architecture", "group", "tp", "pp")
        if isinstance(d.data.get(k), (str, int))
    )
    return (d.code, path, scope, key, *about)


def anchor_line(changes: ChangedLines, path: str, index: SiteIndex, row: int) -> int | None:
    """The changed row nearest ``row`` inside the innermost function or class that holds
    ``row`` and has a changed row (a deletion counts at the row above it); None when no
    scope of ``row`` (the module included) was changed."""
    rows = changes.changed_rows(path)
    if rows is None:
        return row  # a new file: every row is on the diff
    candidates = set(rows) | {max(r, 1) for r in changes.deleted_after.get(path, ())}
    spans = sorted((s for s in index.scopes if s[0] <= row <= s[1]), key=lambda s: s[1] - s[0])
    for first, last, _ in spans:
        inside = [r for r in candidates if first <= r <= last]
        if inside:
            return min(inside, key=lambda r: (abs(r - row), r))
    return None


@dataclass
class Verdict:
    """Findings of the change (kept), and how many of head's were there at the base."""

    kept: list[Diagnostic]
    not_caused: int = 0


def judge(
    head: list[Diagnostic],
    base: list[Diagnostic],
    changes: ChangedLines,
    tree: BaseTree,
    cwd: Path | None = None,
) -> Verdict:
    """Head's findings the change caused. A file with a base copy: new by ``site_key``
    (as many of one key as head has more than base), wherever they sit, with
    ``CHANGED_LINE`` when off the diff. A file without one (added): ``changes.keeps``."""
    indexes: dict[str, SiteIndex] = {}

    def index_of(file: str) -> SiteIndex:
        if file not in indexes:
            try:
                indexes[file] = SiteIndex(Path(file).read_text("utf-8", "replace"))
            except OSError:
                indexes[file] = SiteIndex("")
        return indexes[file]

    before: Counter[tuple[str, ...]] = Counter()
    for d in base:
        path = tree.head_path(d.filename)
        if path is not None and path in tree.files:
            before[site_key(d, path, index_of(d.filename))] += 1
    out, not_caused = [], 0
    # Those on changed lines first: of two alike findings, the one the diff touches is new.
    ordered = sorted(head, key=lambda d: not changes.touches(d, cwd))
    for d in ordered:
        path = changes.repo_path(d.filename, cwd)
        if path is None or path not in tree.files:
            if changes.keeps(d, cwd):
                out.append(d)
            continue
        index = index_of(str(Path(cwd or Path.cwd()) / d.filename))
        key = site_key(d, path, index)
        if before[key] > 0:
            before[key] -= 1
            not_caused += d.severity is not Severity.NOTE  # findings, not notes
            continue
        if not changes.touches(d, cwd):
            line = anchor_line(changes, path, index, d.location.row)
            if line is not None:
                d = replace(d, data={**d.data, CHANGED_LINE: line})
        out.append(d)
    return Verdict(sorted(out, key=Diagnostic.sort_key), not_caused)
