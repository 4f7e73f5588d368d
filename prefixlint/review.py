"""``prefixlint review``: a GitHub pull-request review with one comment per new finding.

The body is the JSON of GitHub's "create a review for a pull request" endpoint
(``POST /repos/{owner}/{repo}/pulls/{pull_number}/reviews``). Each comment sits on a line
the change added or modified (so GitHub accepts it on the pull request's diff) and, when
the finding has a single-line fix, carries a ``suggestion`` block that applies it.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from prefixlint.basediff import CHANGED_LINE
from prefixlint.codes import lookup
from prefixlint.diagnostic import Diagnostic, Edit, Severity, default_view
from prefixlint.diffbase import ChangedLines
from prefixlint.sourcelines import SourceLines

DEFAULT_API_URL = "https://api.github.com"
OFF_DIFF_HEADING = (
    "Run-time findings in the changed files, at lines this change does not touch (a build "
    "reports at the construction site, which an edit elsewhere in the file can break):"
)
# With the base compared (``basediff``): every finding listed is the change's.
CAUSED_HEADING = (
    "Findings this change causes at lines it does not touch (new against the base, with "
    "the same checks; a comment on the nearest changed line of the same function or class "
    "points here when there is one):"
)


class ReviewError(Exception):
    """A review that cannot be posted: missing settings, or GitHub refused it."""


def _suggestion(d: Diagnostic, sources: SourceLines) -> tuple[int, int, str] | None:
    """(first row, last row, the replacement of those whole lines) for a finding's fix:
    a GitHub suggestion replaces whole lines, so the edits are applied to the lines they
    touch."""
    if d.fix is None or not d.fix.edits:
        return None
    first = min(e.location.row for e in d.fix.edits)
    last = max(e.end_location.row for e in d.fix.edits)
    lines = sources.lines(d.filename)
    if lines is None or not 1 <= first <= last <= len(lines):
        return None
    block = "\n".join(lines[first - 1 : last])
    starts = [0]
    for line in lines[first - 1 : last]:
        starts.append(starts[-1] + len(line) + 1)

    def offset(row: int, column: int) -> int:
        return starts[row - first] + column - 1

    # Right to left, so earlier offsets stay valid.
    for e in sorted(d.fix.edits, key=lambda e: (e.location.row, e.location.column), reverse=True):
        start, end = offset(e.location.row, e.location.column), offset(*_end(e))
        if not 0 <= start <= end <= len(block):
            return None
        content = e.content.replace("\r\n", "\n").replace("\r", "\n")
        block = block[:start] + content + block[end:]
    return first, last, block


def _end(e: Edit) -> tuple[int, int]:
    return e.end_location.row, e.end_location.column


def comment_body(d: Diagnostic, suggestion: str | None = None) -> str:
    doc = lookup(d.code)
    parts = [f"**{d.code}** {d.message}"]
    if doc is not None:
        parts.append(f"{doc.explanation} ([{doc.name}]({d.url or doc.url}))")
    if suggestion is not None:
        parts.append(f"```suggestion\n{suggestion}\n```")
    return "\n\n".join(parts)


def build_review(
    diagnostics: list[Diagnostic], changes: ChangedLines, cwd: Path | None = None
) -> dict[str, Any]:
    """The review payload: a comment for each finding with a changed line in its span
    (its first changed line); a run-time finding (phase 2, smoke; not a note) of a changed
    file whose span holds no changed line is listed in the review's body, as GitHub takes
    comments on the diff's lines only. Other findings are left out."""
    sources = SourceLines()
    comments = []
    kept: list[Diagnostic] = []
    off_diff: list[tuple[str, Diagnostic]] = []
    unposted = 0  # "not verified" notes: what prefixlint could not check, not the change's
    for d in default_view(diagnostics):  # a divergence note costs a reviewer's minute
        path = changes.repo_path(d.filename, cwd)
        if path is None:
            continue
        if d.severity is Severity.NOTE:
            unposted += changes.file_changed(path)
            continue
        line = changes.first_changed(path, d.location.row, d.end_location.row)
        if line is None:
            compared = changes.not_caused is not None  # every finding left is the change's
            runtime = d.phase != "static"
            if compared or (runtime and changes.file_changed(path)):
                off_diff.append((path, d))
            if compared and d.data.get(CHANGED_LINE) is not None:
                where = f"`{path}:{d.location.row}`"
                body = comment_body(d) + f"\n\nAt {where}, a line this change does not touch."
                anchor = {"path": path, "side": "RIGHT", "line": d.data[CHANGED_LINE]}
                comments.append(anchor | {"body": body})
            continue
        suggestion = _suggestion(d, sources)
        text = None
        comment: dict[str, Any] = {"path": path, "side": "RIGHT"}
        if suggestion is not None and _all_changed(changes, path, suggestion[0], suggestion[1]):
            first, line, text = suggestion
            if first != line:  # a multi-line suggestion replaces the whole range
                comment |= {"start_line": first, "start_side": "RIGHT"}
        kept.append(d)
        comments.append(comment | {"line": line, "body": comment_body(d, text)})
    body = summary(kept + [d for _, d in off_diff], changes)
    if off_diff:
        heading = OFF_DIFF_HEADING if changes.not_caused is None else CAUSED_HEADING
        body += "\n\n" + _off_diff_list(off_diff, heading)
    if changes.not_caused:
        n = changes.not_caused
        body += (
            f"\n\n{n} finding{'s' if n != 1 else ''} the change did not cause (already at "
            f"the base {changes.base[:12]}) left out."
        )
    if unposted:
        body += (
            f'\n\n{unposted} "not verified" note{"s" if unposted != 1 else ""} on the files '
            "changed (what prefixlint could not check) not posted: JSON and SARIF have them."
        )
    return {
        "commit_id": changes.head,
        "event": "COMMENT",
        "body": body,
        "comments": comments,
    }


def _off_diff_list(found: list[tuple[str, Diagnostic]], heading: str) -> str:
    rows = "\n".join(
        f"- `{path}:{d.location.row}` **{d.code}** {' '.join(d.message.split())}"
        for path, d in found
    )
    return f"{heading}\n{rows}"


def worth_posting(payload: dict[str, Any]) -> bool:
    """A review with a comment, or with run-time findings listed in its body."""
    body = str(payload.get("body", ""))
    listed = any(heading in body for heading in (OFF_DIFF_HEADING, CAUSED_HEADING))
    return bool(payload.get("comments")) or listed


def _all_changed(changes: ChangedLines, path: str, first: int, last: int) -> bool:
    """GitHub takes a suggestion only on lines of the pull request's diff (None: a new
    file, every line)."""
    rows = changes.changed_rows(path)
    return rows is None or all(r in rows for r in range(first, last + 1))


def summary(diagnostics: list[Diagnostic], changes: ChangedLines) -> str:
    base = changes.base[:12]
    compared = changes.not_caused is not None
    if not diagnostics:
        if compared:
            return f"prefixlint: the change causes no finding (compared with the base {base})."
        return f"prefixlint: no findings on the lines changed since {base}."
    # Phase 2 and smoke report a changed file's findings wherever they are in it.
    where = (
        "caused by the change"
        if compared
        else "in the files changed"
        if any(d.phase != "static" for d in diagnostics)
        else "on the lines changed"
    )
    errors = sum(d.severity is Severity.ERROR for d in diagnostics)
    warnings = sum(d.severity is Severity.WARNING for d in diagnostics)
    counts = Counter(d.code for d in diagnostics)
    rows = "\n".join(
        f"| {code} | {(lookup(code).name if lookup(code) else '')} | {n} |"
        for code, n in sorted(counts.items())
    )
    n = len(diagnostics)
    return (
        f"prefixlint: {n} finding{'s' if n != 1 else ''} {where} since "
        f"{base} ({errors} error{'s' if errors != 1 else ''}, "
        f"{warnings} warning{'s' if warnings != 1 else ''}).\n\n"
        f"| code | rule | findings |\n|---|---|---|\n{rows}"
    )


def pull_number(explicit: int | None, env: dict[str, str] | None = None) -> int:
    """--pr, else ``GITHUB_REF`` (refs/pull/N/merge), else the event payload's number."""
    if explicit is not None:
        return explicit
    env = dict(os.environ) if env is None else env
    ref = env.get("GITHUB_REF", "")
    found = re.fullmatch(r"refs/pull/(\d+)/(?:merge|head)", ref)
    if found:
        return int(found.group(1))
    event_path = env.get("GITHUB_EVENT_PATH")
    if event_path:
        try:
            event = json.loads(Path(event_path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ReviewError(f"cannot read the event payload {event_path}: {e}") from None
        number = (event.get("pull_request") or {}).get("number") or event.get("number")
        if isinstance(number, int):
            return number
    raise ReviewError(
        "no pull request number: pass --pr N, or run on a pull_request event "
        "(GITHUB_REF=refs/pull/N/merge or GITHUB_EVENT_PATH)"
    )


def post_review(
    payload: dict[str, Any],
    pr: int | None = None,
    api_url: str = DEFAULT_API_URL,
    env: dict[str, str] | None = None,
    timeout: float = 30.0,
) -> dict[str, Any]:
    """POST the review; returns GitHub's answer. Raises ReviewError with a clear message."""
    env = dict(os.environ) if env is None else env
    token = env.get("GITHUB_TOKEN")
    if not token:
        raise ReviewError("GITHUB_TOKEN is not set")
    repo = env.get("GITHUB_REPOSITORY", "")
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", repo):
        raise ReviewError(f"GITHUB_REPOSITORY must be owner/name, got {repo!r}")
    number = pull_number(pr, env)
    url = f"{api_url.rstrip('/')}/repos/{repo}/pulls/{number}/reviews"
    request = urllib.request.Request(
        url,
        data=json.dumps(payload).encode("utf-8"),
        method="POST",
        headers={
            "Authorization": f"Bearer {token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
            "Content-Type": "application/json",
            "User-Agent": "prefixlint",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read()
    except urllib.error.HTTPError as e:
        detail = ""
        try:
            answer = json.loads(e.read().decode("utf-8", "replace"))
            detail = answer.get("message", "")
            errors = answer.get("errors")
            if errors:
                detail += f" {json.dumps(errors)}"
        except (ValueError, AttributeError, OSError):
            pass
        where = f"GitHub answered {e.code} {e.reason} for POST {url}"
        raise ReviewError(where + (f": {detail}" if detail else "")) from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise ReviewError(f"cannot reach {api_url}: {reason}") from None
    try:
        return json.loads(raw.decode("utf-8")) if raw else {}
    except ValueError:
        return {}
