"""``check --diff-base`` and ``review``: findings on changed lines only, in temp git repos;
posting the review to a local HTTP server that stands in for GitHub."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from prefixlint.cli import main
from prefixlint.diagnostic import Diagnostic, Edit, Fix, Position, Severity
from prefixlint.diffbase import ChangedLines, changed_lines, parse_diff
from prefixlint.review import build_review, pull_number

pytest_plugins = ["tests.github_api"]  # the `github` fixture

FIXTURES = Path(__file__).parent / "fixtures" / "diffbase"
CLEAN_MODEL = (FIXTURES / "clean_model.py").read_text()
# The one bug a change adds: line 13 names another attribute (PFX302).
BUGGY_MODEL = CLEAN_MODEL.replace('prefix=f"{prefix}.lm_head"', 'prefix=f"{prefix}.head"')
BUG_LINE = 13
# A finding that is already in the base commit (PFX301 at line 7): never reported.
LEGACY = (FIXTURES / "legacy.py").read_text()

GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args],
        cwd=repo,
        env={**os.environ, **GIT_ENV},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def invoke(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    old = Path.cwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(main, args, env=env, catch_exceptions=False)
    finally:
        os.chdir(old)
    return result.exit_code, result.output


def findings(args: list[str], cwd: Path) -> list[dict]:
    code, out = invoke(["check", "--no-cache", "-j", "1", "--format", "json", *args], cwd)
    assert code in (0, 1), out
    return json.loads(out)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository whose base commit (tagged ``base``) has a clean model file under
    ``pkg/models/`` and a legacy file with a finding already there."""
    root = tmp_path / "repo"
    models = root / "pkg" / "models"
    models.mkdir(parents=True)
    (models / "head.py").write_text(CLEAN_MODEL)
    (models / "legacy.py").write_text(LEGACY)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "base")
    git(root, "tag", "base")
    return root


def test_parse_diff_hunks_renames_new_and_deleted_files() -> None:
    text = textwrap.dedent(
        """\
        diff --git a/old.py b/new.py
        similarity index 90%
        rename from old.py
        rename to new.py
        --- a/old.py
        +++ b/new.py
        @@ -3 +3 @@
        -a
        +b
        @@ -10,0 +11,2 @@
        +c
        +d
        @@ -20,2 +21,0 @@
        -e
        -f
        diff --git a/added.py b/added.py
        new file mode 100644
        --- /dev/null
        +++ b/added.py
        @@ -0,0 +1,3 @@
        +x
        +y
        +z
        diff --git a/gone.py b/gone.py
        deleted file mode 100644
        --- a/gone.py
        +++ /dev/null
        @@ -1 +0,0 @@
        -x
        diff --git "a/sp ace\\303\\251.py" "b/sp ace\\303\\251.py"
        --- "a/sp ace\\303\\251.py"
        +++ "b/sp ace\\303\\251.py"
        @@ -1 +1 @@
        -x
        +y
        """
    )
    assert parse_diff(text) == {
        "new.py": {3, 11, 12},
        "added.py": {1, 2, 3},
        "sp aceé.py": {1},
    }


def test_diff_base_reports_exactly_the_new_finding(repo: Path) -> None:
    (repo / "pkg" / "models" / "head.py").write_text(BUGGY_MODEL)
    git(repo, "commit", "-q", "-am", "one bug")
    assert len(findings([], repo)) == 2  # the legacy finding and the new one
    new = findings(["--diff-base", "base"], repo)
    assert [(f["code"], f["filename"], f["location"]["row"]) for f in new] == [
        ("PFX302", "pkg/models/head.py", BUG_LINE)
    ]
    # The same from a subfolder: paths relative to the cwd, matched to repo paths.
    new = findings(["--diff-base", "base", "."], repo / "pkg")
    assert [(f["filename"], f["location"]["row"]) for f in new] == [("models/head.py", BUG_LINE)]
    # Exit codes follow what is left: nothing changed since HEAD, nothing to report.
    code, out = invoke(["check", "--no-cache", "--diff-base", "HEAD"], repo)
    assert code == 0 and "All checks passed" in out


def test_diff_base_sees_unstaged_staged_and_untracked_changes(repo: Path) -> None:
    (repo / "pkg" / "models" / "head.py").write_text(BUGGY_MODEL)  # unstaged
    (repo / "pkg" / "models" / "new.py").write_text(LEGACY)  # untracked: wholly new
    (repo / "pkg" / "models" / "staged.py").write_text(LEGACY)
    git(repo, "add", "pkg/models/staged.py")
    (repo / ".gitignore").write_text("ignored.py\n")
    (repo / "pkg" / "models" / "ignored.py").write_text(LEGACY)  # ignored: not part of it
    new = findings(["--diff-base", "base"], repo)
    assert sorted((f["filename"], f["location"]["row"]) for f in new) == [
        ("pkg/models/head.py", BUG_LINE),
        ("pkg/models/new.py", 7),
        ("pkg/models/staged.py", 7),
    ]


def test_diff_base_follows_a_renamed_file(repo: Path) -> None:
    models = repo / "pkg" / "models"
    git(repo, "mv", "pkg/models/head.py", "pkg/models/renamed.py")
    git(repo, "mv", "pkg/models/legacy.py", "pkg/models/legacy_renamed.py")
    (models / "renamed.py").write_text(BUGGY_MODEL)
    git(repo, "commit", "-q", "-m", "rename, and one bug")
    diff = git(repo, "diff", "--find-renames", "--stat", "base")
    assert "=>" in diff  # git does see renames, not a delete and an add
    changes = changed_lines("base", repo)
    assert changes.lines["pkg/models/renamed.py"] == {BUG_LINE}
    assert changes.lines.get("pkg/models/legacy_renamed.py", set()) == set()
    new = findings(["--diff-base", "base"], repo)
    assert [(f["filename"], f["location"]["row"]) for f in new] == [
        ("pkg/models/renamed.py", BUG_LINE)
    ]


def test_diff_base_that_is_not_an_ancestor(repo: Path) -> None:
    """main moved on after the branch forked (it fixed the legacy finding): the branch is
    compared with the fork point, so neither main's fix nor its absence shows up."""
    git(repo, "checkout", "-q", "-b", "feature")
    (repo / "pkg" / "models" / "head.py").write_text(BUGGY_MODEL)
    git(repo, "commit", "-q", "-am", "one bug")
    git(repo, "checkout", "-q", "main")
    legacy = repo / "pkg" / "models" / "legacy.py"
    legacy.write_text(LEGACY.replace("quant_config=quant_config)", "prefix=f'{prefix}.lm_head')"))
    git(repo, "commit", "-q", "-am", "main fixes legacy")
    git(repo, "checkout", "-q", "feature")
    ancestor = subprocess.run(
        ["git", "merge-base", "--is-ancestor", "main", "HEAD"], cwd=repo, check=False
    )
    assert ancestor.returncode == 1  # main is not an ancestor of the branch
    new = findings(["--diff-base", "main"], repo)
    assert [(f["filename"], f["location"]["row"]) for f in new] == [
        ("pkg/models/head.py", BUG_LINE)
    ]


def test_diff_base_errors_exit_2(repo: Path, tmp_path: Path) -> None:
    code, out = invoke(["check", "--diff-base", "no-such-rev"], repo)
    assert code == 2 and "no-such-rev" in out and "Traceback" not in out
    outside = tmp_path / "not-a-repo"
    outside.mkdir()
    code, out = invoke(["check", "--diff-base", "HEAD"], outside)
    assert code == 2 and "git" in out
    code, out = invoke(["review"], repo)
    assert code == 2 and "--diff-base" in out


def test_review_has_exactly_one_comment_at_the_new_line(repo: Path) -> None:
    (repo / "pkg" / "models" / "head.py").write_text(BUGGY_MODEL)
    git(repo, "commit", "-q", "-am", "one bug")
    code, out = invoke(["review", "--no-cache", "--diff-base", "base"], repo / "pkg")
    assert code == 1, out  # the change adds an error (--fail-on error)
    payload = json.loads(out)
    assert payload["commit_id"] == git(repo, "rev-parse", "HEAD")
    assert payload["event"] == "COMMENT"
    assert "1 finding" in payload["body"] and "PFX302" in payload["body"]
    [comment] = payload["comments"]
    assert comment["path"] == "pkg/models/head.py"  # repo-relative, though cwd is pkg/
    assert (comment["line"], comment["side"]) == (BUG_LINE, "RIGHT")
    assert comment["body"].startswith("**PFX302** ")
    assert "`named_modules()` reports the attribute path" in comment["body"]  # the why
    # The finding's fix, as a GitHub suggestion of the whole line.
    fixed_line = BUGGY_MODEL.splitlines()[BUG_LINE - 1].replace(".head", ".lm_head")
    assert f"```suggestion\n{fixed_line}\n```" in comment["body"]


def test_review_suggestion_for_a_single_line_fix(repo: Path) -> None:
    head = repo / "pkg" / "models" / "head.py"
    head.write_text(BUGGY_MODEL)
    line = BUGGY_MODEL.splitlines()[BUG_LINE - 1]
    start = line.index('f"{prefix}.head"')
    edit = Edit(
        'f"{prefix}.lm_head"',
        Position(BUG_LINE, start + 1),
        Position(BUG_LINE, start + 1 + len('f"{prefix}.head"')),
    )
    changes = changed_lines("base", repo)
    fixed = Diagnostic(
        "PFX302",
        "prefix names `head`",
        Severity.ERROR,
        str(head),
        Position(BUG_LINE - 1, 24),
        Position(BUG_LINE + 1, 14),
        fix=Fix("Replace", (edit,)),
    )
    payload = build_review([fixed], changes)
    [comment] = payload["comments"]
    assert comment["line"] == BUG_LINE  # the fix's line, not the call's first line
    expected = CLEAN_MODEL.splitlines()[BUG_LINE - 1]
    assert comment["body"].endswith(f"```suggestion\n{expected}\n```")
    # A fix over several lines is no suggestion block.
    multi = Fix("Replace", (Edit("x", Position(BUG_LINE, 1), Position(BUG_LINE + 1, 2)),))
    payload = build_review(
        [Diagnostic(**{**fixed.__dict__, "fix": multi})],  # type: ignore[arg-type]
        changes,
    )
    assert "```suggestion" not in payload["comments"][0]["body"]


def test_review_without_findings(repo: Path) -> None:
    code, out = invoke(["review", "--no-cache", "--diff-base", "HEAD"], repo)
    payload = json.loads(out)
    assert code == 0 and payload["comments"] == [] and "no finding" in payload["body"]


def test_review_post_sends_the_review(repo: Path, github) -> None:
    handler, url = github
    handler.answer = {"id": 1, "html_url": "https://example.invalid/pull/7#review-1"}
    (repo / "pkg" / "models" / "head.py").write_text(BUGGY_MODEL)
    git(repo, "commit", "-q", "-am", "one bug")
    env = {
        "GITHUB_TOKEN": "t0ken",
        "GITHUB_REPOSITORY": "octo/models",
        "GITHUB_REF": "refs/pull/7/merge",
    }
    args = ["review", "--no-cache", "--diff-base", "base", "--post", "--api-url", url]
    code, out = invoke(args, repo, env)
    assert code == 1, out  # posted, and the change adds an error
    [request] = handler.received
    assert request["method"] == "POST"
    assert request["path"] == "/repos/octo/models/pulls/7/reviews"
    assert request["headers"]["authorization"] == "Bearer t0ken"
    assert request["headers"]["accept"] == "application/vnd.github+json"
    assert request["headers"]["content-type"] == "application/json"
    body = request["body"]
    assert body == json.loads(out[: out.rindex("}") + 1])  # what was printed was sent
    assert body["commit_id"] == git(repo, "rev-parse", "HEAD") and body["event"] == "COMMENT"
    assert [(c["path"], c["line"]) for c in body["comments"]] == [("pkg/models/head.py", 13)]
    assert "posted 1 comment(s) to https://example.invalid/pull/7#review-1" in out


def test_review_post_errors_are_clear_and_exit_2(repo: Path, github, tmp_path: Path) -> None:
    handler, url = github
    (repo / "pkg" / "models" / "head.py").write_text(BUGGY_MODEL)
    base = ["review", "--no-cache", "--diff-base", "base", "--post", "--api-url", url]
    env = {"GITHUB_TOKEN": "t", "GITHUB_REPOSITORY": "octo/models", "GITHUB_REF": ""}
    # The PR number from the event payload; GitHub refuses the review.
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 12}}))
    handler.status = 422
    handler.answer = {"message": "Unprocessable Entity", "errors": ["Line could not be resolved"]}
    code, out = invoke(base, repo, {**env, "GITHUB_EVENT_PATH": str(event)})
    assert code == 2 and "Traceback" not in out
    assert "GitHub answered 422" in out and "Line could not be resolved" in out
    assert handler.received[-1]["path"] == "/repos/octo/models/pulls/12/reviews"
    # No token; no PR number; a bad repository name; a server that is not there.
    code, out = invoke(base, repo, {**env, "GITHUB_TOKEN": "", "GITHUB_EVENT_PATH": ""})
    assert code == 2 and "GITHUB_TOKEN is not set" in out
    code, out = invoke(base, repo, {**env, "GITHUB_EVENT_PATH": ""})
    assert code == 2 and "no pull request number" in out
    code, out = invoke([*base, "--pr", "3"], repo, {**env, "GITHUB_REPOSITORY": "nope"})
    assert code == 2 and "GITHUB_REPOSITORY" in out
    with_dead = [*base[:-1], "http://127.0.0.1:9", "--pr", "3"]
    code, out = invoke(with_dead, repo, env)
    assert code == 2 and "cannot reach http://127.0.0.1:9" in out and "Traceback" not in out
    assert len(handler.received) == 1  # only the one refused review reached the server


def test_pull_number_sources(tmp_path: Path) -> None:
    assert pull_number(5, {}) == 5
    assert pull_number(None, {"GITHUB_REF": "refs/pull/42/merge"}) == 42
    event = tmp_path / "e.json"
    event.write_text(json.dumps({"number": 9}))
    assert pull_number(None, {"GITHUB_REF": "refs/heads/x", "GITHUB_EVENT_PATH": str(event)}) == 9


def test_changed_lines_paths(tmp_path: Path) -> None:
    changes = ChangedLines(root=tmp_path.resolve(), base="b", head="h", lines={"a/m.py": {3}})
    assert changes.repo_path("m.py", tmp_path / "a") == "a/m.py"
    assert changes.repo_path(str(tmp_path / "a" / "m.py")) == "a/m.py"
    assert changes.repo_path("/elsewhere/m.py") is None
    assert changes.first_changed("a/m.py", 1, 5) == 3
    assert changes.first_changed("a/m.py", 4, 5) is None
    assert changes.first_changed("other.py", 1, 9) is None


# A call whose ``prefix=`` argument has a line of its own (line 12).
MULTILINE = (FIXTURES / "mlp.py").read_text()


def test_a_deleted_argument_reports_the_call_it_was_deleted_from(repo: Path) -> None:
    """Deleting the ``prefix=`` line adds no line (hunk ``@@ -12 +11,0 @@``); the PFX301 on
    the call that spans the deletion is still new, in check and in review."""
    models = repo / "pkg" / "models"
    (models / "mlp.py").write_text(MULTILINE)
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "mlp")
    git(repo, "tag", "with-mlp")
    (models / "mlp.py").write_text(
        MULTILINE.replace('            prefix=f"{prefix}.down_proj",\n', "")
    )
    diff = git(repo, "diff", "-U0", "with-mlp")
    assert "@@ -12 +11,0 @@" in diff
    new = findings(["--diff-base", "with-mlp"], repo)
    # The base has neither: the unused `prefix` parameter (PFX102, on the unchanged
    # signature) is the change's too, and points at the changed line of its function.
    assert [(f["code"], f["filename"], f["location"]["row"]) for f in new] == [
        ("PFX102", "pkg/models/mlp.py", 6),
        ("PFX301", "pkg/models/mlp.py", 8),
    ]
    assert new[0]["data"] == {"changed_line": 11} and "data" not in new[1]
    code, out = invoke(["review", "--no-cache", "--diff-base", "with-mlp"], repo)
    assert code == 1, out
    comments = json.loads(out)["comments"]
    # The row above the deletion: inside the call, and shown by GitHub as diff context.
    assert [(c["path"], c["line"]) for c in comments] == [("pkg/models/mlp.py", 11)] * 2
    assert [("At `pkg/models/mlp.py:6`" in c["body"]) for c in comments] == [True, False]
    # A deletion next to a one-line finding does not make that finding new.
    changes = changed_lines("with-mlp", repo)
    assert changes.deleted_after == {"pkg/models/mlp.py": {11}}
    one_line = Diagnostic(
        "PFX302", "m", Severity.ERROR, "pkg/models/mlp.py", Position(11, 1), Position(11, 5)
    )
    assert not changes.touches(one_line, repo)
