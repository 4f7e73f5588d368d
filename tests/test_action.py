"""The GitHub Action (action.yml) run end to end as close to GitHub as a test can: its steps
run locally in a temp git repository with a pull request's base branch, the review posted
to a local stand-in for GitHub's API; the example workflow uses that action; the README's
main command exits 0/1 with its summary line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.github_action import evaluate, run_action, runner_env

yaml = pytest.importorskip("yaml")

pytest_plugins = ["tests.github_api"]  # the `github` fixture

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures" / "diffbase"
BIN = Path(sys.executable).parent  # the venv whose prefixlint the steps run
ACTION = yaml.safe_load((ROOT / "action.yml").read_text())
CLEAN_MODEL = (FIXTURES / "clean_model.py").read_text()
BUG_LINE = 13  # what the pull request breaks (PFX302); legacy.py has a PFX301 at line 7
BUGGY_MODEL = CLEAN_MODEL.replace('prefix=f"{prefix}.lm_head"', 'prefix=f"{prefix}.head"')
INSTALL = "Install prefixlint"  # pip-installs into the runner's Python: here, the venv has it


def git(repo: Path, *args: str) -> str:
    from tests.test_diffbase import git as run_git

    return run_git(repo, *args)


@pytest.fixture
def pull_request(tmp_path: Path) -> Path:
    """A checkout of a pull request's head: ``main`` (also ``origin/main``, as after
    ``fetch-depth: 0``) has a clean model and a legacy finding; the PR adds one bug."""
    repo = tmp_path / "repo"
    models = repo / "pkg" / "models"
    models.mkdir(parents=True)
    (models / "head.py").write_text(CLEAN_MODEL)
    (models / "legacy.py").write_text((FIXTURES / "legacy.py").read_text())
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "base")
    git(repo, "update-ref", "refs/remotes/origin/main", "main")
    git(repo, "checkout", "-q", "-b", "feature")
    (models / "head.py").write_text(BUGGY_MODEL)
    git(repo, "commit", "-q", "-am", "a bug")
    return repo


def _run(repo: Path, event: str, api_url: str, review: str) -> object:
    github = {
        "event_name": event,
        "base_ref": "main" if event == "pull_request" else "",
        "token": "t0ken",
        "repository": "octo/models",
        "event": {"pull_request": {"number": 7}} if event == "pull_request" else {},
    }
    env = runner_env(
        BIN,
        PYTHONPATH=str(ROOT),  # the checkout's prefixlint, whatever the venv has installed
        GITHUB_ACTION_PATH=str(ROOT),
        GITHUB_WORKSPACE=str(repo),
        GITHUB_EVENT_NAME=event,
        GITHUB_REPOSITORY="octo/models",
        GITHUB_REF="refs/pull/7/merge" if event == "pull_request" else "refs/heads/main",
        GITHUB_API_URL=api_url,
    )
    with_ = {"paths": "pkg", "review": review}
    return run_action(ACTION, with_, github, env, repo, skip=frozenset({INSTALL}))


def test_install_step_installs_this_checkout() -> None:
    """The one step not run here: with no `version` it installs the action's own checkout,
    which is a project that provides the `prefixlint` command."""
    import tomllib

    [step] = [s for s in ACTION["runs"]["steps"] if s.get("name") == INSTALL]
    assert '"${REQUIREMENT:-$GITHUB_ACTION_PATH}"' in step["run"]
    assert step["env"]["REQUIREMENT"] == "${{ inputs.version }}"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["prefixlint"] == "prefixlint.cli:main"


def test_action_on_a_pull_request(pull_request: Path, github) -> None:
    """Only the PR's bug: in the SARIF it uploads, in the annotations, in the review it
    posts; the last step fails the job."""
    handler, url = github
    handler.answer = {"id": 1, "html_url": "https://example.invalid/pull/7#review-1"}
    run = _run(pull_request, "pull_request", url, review="true")
    check = run.step("Check")
    assert check.ran and check.returncode == 0, check.stderr
    assert f"file=pkg/models/head.py,line={BUG_LINE}" in check.stdout
    assert "legacy.py" not in check.stdout  # --diff-base origin/main
    upload = run.step("Upload SARIF")
    assert upload.uses.startswith("github/codeql-action/upload-sarif@")
    sarif = json.loads((pull_request / upload.with_["sarif_file"]).read_text())
    results = sarif["runs"][0]["results"]
    assert [
        (r["ruleId"], r["locations"][0]["physicalLocation"]["region"]["startLine"]) for r in results
    ] == [("PFX302", BUG_LINE)]
    review = run.step("Review")
    assert review.ran and review.returncode == 0, review.stdout + review.stderr
    [request] = handler.received
    assert request["path"] == "/repos/octo/models/pulls/7/reviews"
    assert request["headers"]["authorization"] == "Bearer t0ken"
    comments = request["body"]["comments"]
    assert [(c["path"], c["line"]) for c in comments] == [("pkg/models/head.py", BUG_LINE)]
    verdict = run.step("Verdict")
    assert verdict.ran and verdict.returncode == 1 and run.failed


def test_action_on_a_push(pull_request: Path, github) -> None:
    """No pull request: every finding (the legacy one too), no diff base, no review."""
    handler, url = github
    run = _run(pull_request, "push", url, review="true")
    check = run.step("Check")
    assert check.returncode == 0, check.stderr
    assert "file=pkg/models/legacy.py,line=7" in check.stdout
    sarif = json.loads((pull_request / "prefixlint.sarif").read_text())
    assert {r["ruleId"] for r in sarif["runs"][0]["results"]} == {"PFX301", "PFX302"}
    assert not run.step("Review").ran and handler.received == []
    assert run.step("Verdict").returncode == 1


def test_action_passes_a_clean_pull_request(pull_request: Path, github) -> None:
    _, url = github
    (pull_request / "pkg" / "models" / "head.py").write_text(CLEAN_MODEL)
    git(pull_request, "commit", "-q", "-am", "fixed")
    run = _run(pull_request, "pull_request", url, review="false")
    assert run.step("Check").returncode == 0
    assert not run.step("Review").ran
    assert run.step("Verdict").returncode == 0 and not run.failed


def test_expressions_evaluate_as_on_github() -> None:
    ctx = {"inputs": {"diff-base": ""}, "github": {"event_name": "push", "base_ref": ""}}
    fns = {"format": lambda t, *a: t.format(*a)}
    expr = (
        "inputs.diff-base || (github.event_name == 'pull_request' && "
        "format('origin/{0}', github.base_ref)) || ''"
    )
    assert evaluate(expr, ctx, fns) == ""
    ctx["github"] = {"event_name": "pull_request", "base_ref": "main"}
    assert evaluate(expr, ctx, fns) == "origin/main"
    ctx["inputs"]["diff-base"] = "v1"
    assert evaluate(expr, ctx, fns) == "v1"
    assert evaluate("github.missing.deep == null", ctx, fns) is True


def test_example_workflow_uses_this_action() -> None:
    """The example installs nothing itself: it calls this repository's action, pinned to a
    commit, with inputs the action declares and the permissions its steps need."""
    workflow = yaml.safe_load((ROOT / "examples" / "github-workflow.yml").read_text())
    steps = workflow["jobs"]["prefixlint"]["steps"]
    [step] = [s for s in steps if str(s.get("uses", "")).startswith("prefixlint/prefixlint@")]
    assert set(step["with"]) <= set(ACTION["inputs"])
    checkout = steps[0]
    assert checkout["uses"].startswith("actions/checkout@") and checkout["with"]["fetch-depth"] == 0
    permissions = workflow["jobs"]["prefixlint"]["permissions"]
    assert permissions["security-events"] == "write" and permissions["pull-requests"] == "write"
    text = (ROOT / "examples" / "github-workflow.yml").read_text()
    assert "pip install" not in text


@pytest.mark.slow
def test_readme_main_command_lints_the_installed_vllm(tmp_path: Path) -> None:
    """The README's main job, less its set-up (which CI runs): the `prefixlint check` part
    of the command, as written there, exits 0 or 1 and ends with its summary line."""
    pytest.importorskip("vllm")
    readme = (ROOT / "README.md").read_text()
    [command] = re.findall(r"&& \.venv/bin/(prefixlint check [^\n]*)", readme)
    assert "--installed-vllm" in command
    done = subprocess.run(
        [str(BIN / "prefixlint"), *command.split()[1:], "--cache-dir", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
        env=runner_env(BIN, PYTHONPATH=str(ROOT)),
    )
    assert done.returncode in (0, 1), done.stderr
    last = done.stdout.strip().splitlines()[-1]
    summary = (
        r"Found \d+ findings? \(\d+ errors?, \d+ warnings?\) "
        r"in \d+ files? \(\d+ files checked\)\."
    )
    assert re.fullmatch(summary, last) or last.startswith("All checks passed"), last
    assert "Traceback" not in done.stderr
