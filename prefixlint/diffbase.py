"""``--diff-base REV``: the lines added or changed since REV, and findings filtered to them.

The base is the merge base of REV and HEAD (so a branch that diverged from REV compares
with the fork point, not with REV's later commits). The diff runs against the working
tree (committed, staged and unstaged changes alike, as the working tree is what is
linted), with renames followed; untracked files that git does not ignore count as wholly
added. Paths in findings are relative to the cwd (or absolute) and are matched to the
repository-relative paths of the diff, wherever in the repository the cwd is. A static
finding is kept when one of its lines changed; a run-time one (phase 2, smoke) when its
file changed (``ChangedLines.keeps``).
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from prefixlint.diagnostic import Diagnostic

_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")
_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


class DiffError(Exception):
    """git is missing, the folder is not a repository, or REV does not resolve."""


@dataclass
class ChangedLines:
    root: Path  # the repository's top level (resolved)
    base: str  # the merge-base commit
    head: str  # HEAD's commit
    lines: dict[str, set[int]] = field(default_factory=dict)  # repo-relative path -> rows
    whole: set[str] = field(default_factory=set)  # untracked files: every line is new
    # repo-relative path -> new-side rows after which old lines were deleted (0: before
    # the first row). A deletion inside a finding's span changes that finding.
    deleted_after: dict[str, set[int]] = field(default_factory=dict)
    # After the comparison with the base (``basediff.judge``): how many of head's findings
    # were already there (None: no comparison ran, lines only).
    not_caused: int | None = None

    def repo_path(self, filename: str, cwd: Path | None = None) -> str | None:
        """A finding's filename as a repository-relative POSIX path, or None if outside."""
        path = Path(filename)
        if not path.is_absolute():
            path = (cwd or Path.cwd()) / path
        try:
            rel = Path(os.path.realpath(path)).relative_to(self.root)
        except ValueError:
            return None
        return rel.as_posix()

    def changed_rows(self, path: str) -> set[int] | None:
        """The changed rows of a repo-relative path; None means every row (a new file)."""
        if path in self.whole:
            return None
        return self.lines.get(path, set())

    def first_changed(self, path: str, start: int, end: int) -> int | None:
        """The first changed row in ``start..end``, or None. A deletion between two rows
        of the span counts: the row above it is returned (GitHub shows it as context)."""
        rows = self.changed_rows(path)
        for row in range(start, max(start, end) + 1):
            if rows is None or row in rows:
                return row
        deleted = [r for r in self.deleted_after.get(path, ()) if start <= r < end]
        return min(deleted) if deleted else None

    def touches(self, d: Diagnostic, cwd: Path | None = None) -> bool:
        path = self.repo_path(d.filename, cwd)
        if path is None:
            return False
        return self.first_changed(path, d.location.row, d.end_location.row) is not None

    def file_changed(self, path: str) -> bool:
        """Whether the diff adds, edits or deletes anything in a repo-relative path."""
        return path in self.whole or bool(self.lines.get(path) or self.deleted_after.get(path))

    def keeps(self, d: Diagnostic, cwd: Path | None = None) -> bool:
        """``--diff-base``: a static finding is kept when one of its lines changed; a
        run-time finding (phase 2, smoke) when its file changed. A build reports at the
        construction site, and an edit elsewhere in the file (an index, a parent's prefix,
        a config read) can break what is built there."""
        if d.phase == "static":
            return self.touches(d, cwd)
        path = self.repo_path(d.filename, cwd)
        return path is not None and self.file_changed(path)

    def filter(self, diagnostics: list[Diagnostic], cwd: Path | None = None) -> list[Diagnostic]:
        return [d for d in diagnostics if self.keeps(d, cwd)]


def _git(args: list[str], cwd: Path) -> str:
    try:
        done = subprocess.run(
            ["git", "-c", "core.quotePath=false", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="surrogateescape",
        )
    except FileNotFoundError:
        raise DiffError("git is not installed (needed by --diff-base)") from None
    if done.returncode != 0:
        message = done.stderr.strip().splitlines()
        raise DiffError(f"git {args[0]} failed: {message[-1] if message else done.returncode}")
    return done.stdout


def _unquote(path: str) -> str:
    """A path as git prints it: C-quoted (``"b/t\\303\\251st.py"``) when it has to be."""
    if not (path.startswith('"') and path.endswith('"')):
        return path
    body, out, i = path[1:-1], bytearray(), 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt in "01234567" and i + 3 < len(body):
                out.append(int(body[i + 1 : i + 4], 8))
                i += 4
                continue
            out.extend(_ESCAPES.get(nxt, nxt).encode())
            i += 2
            continue
        out.extend(ch.encode("utf-8", "surrogateescape"))
        i += 1
    return out.decode("utf-8", "replace")


def parse_diff(text: str) -> dict[str, set[int]]:
    """Added rows per new-side path of a ``git diff -U0`` (``+++ b/path`` and hunks)."""
    return parse_diff_full(text)[0]


def parse_diff_full(text: str) -> tuple[dict[str, set[int]], dict[str, set[int]]]:
    """(added rows, rows after which lines were deleted) per new-side path of a
    ``git diff -U0``. A pure deletion hunk ``@@ -284 +288,0 @@`` adds no row: it sits
    between new rows 288 and 289."""
    lines: dict[str, set[int]] = {}
    deleted: dict[str, set[int]] = {}
    current: str | None = None
    for line in text.splitlines():
        if line.startswith("+++ "):
            target = _unquote(line[4:].rstrip("\t"))
            if target == "/dev/null":
                current = None  # a deleted file: nothing on the new side
            else:
                current = target[2:] if target.startswith("b/") else target
                lines.setdefault(current, set())
            continue
        if current is None:
            continue
        hunk = _HUNK.match(line)
        if hunk:
            start = int(hunk.group(1))
            count = int(hunk.group(2)) if hunk.group(2) is not None else 1
            if count == 0:
                deleted.setdefault(current, set()).add(start)
            lines[current].update(range(start, start + count))
    return lines, deleted


def changed_lines(rev: str, cwd: Path | None = None) -> ChangedLines:
    cwd = cwd or Path.cwd()
    root = Path(os.path.realpath(_git(["rev-parse", "--show-toplevel"], cwd).strip()))
    head = _git(["rev-parse", "--verify", "HEAD^{commit}"], root).strip()
    try:
        _git(["rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], root)
    except DiffError:
        raise DiffError(f"--diff-base: {rev!r} is not a commit of this repository") from None
    try:
        base = _git(["merge-base", rev, "HEAD"], root).strip()
    except DiffError:
        raise DiffError(f"--diff-base: {rev!r} and HEAD have no common ancestor") from None
    diff = _git(
        [
            "diff",
            "-U0",
            "--find-renames",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            "--src-prefix=a/",
            "--dst-prefix=b/",
            base,
            "--",
        ],
        root,
    )
    untracked = _git(["ls-files", "--others", "--exclude-standard", "-z"], root)
    added, deleted = parse_diff_full(diff)
    return ChangedLines(
        root=root,
        base=base,
        head=head,
        lines=added,
        whole={p for p in untracked.split("\0") if p},
        deleted_after=deleted,
    )
