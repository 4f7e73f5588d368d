"""The pre-commit hooks in .pre-commit-hooks.yaml, run by the real pre-commit.

pre-commit installs the hook the way a user's project gets it: it clones the repository at a
commit and builds a virtualenv with prefixlint (and libcst, click, rich) in it. The clone
only sees committed files (try-repo adds modified tracked files, not new ones), so the tests
first commit a snapshot of this checkout's working tree (tracked and untracked, not ignored
files) to a throw-away repository, and point pre-commit at that.

Timings on the development machine: the hook virtualenv build takes about 15 s (pip finds
the dependencies locally or on PyPI); each further run in a built environment about 2 s.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from prefixlint.static.fix import fix_source
from tests.conftest import VLLM

CHECKOUT = Path(__file__).resolve().parents[1]
PRE_COMMIT = shutil.which("pre-commit", path=str(Path(sys.executable).parent)) or shutil.which(
    "pre-commit"
)

pytestmark = [
    pytest.mark.skipif(
        PRE_COMMIT is None, reason="pre-commit is not installed (pip install .[dev])"
    ),
    pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed"),
    pytest.mark.skipif(VLLM is None, reason="vLLM is not installed (model files to check)"),
]

GIT = ["git", "-c", "user.name=prefixlint", "-c", "user.email=t@example.com"]


def git(cwd: Path, *args: str) -> str:
    return subprocess.run([*GIT, *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def test_manifest_declares_both_hooks() -> None:
    yaml = pytest.importorskip("yaml")
    hooks = {h["id"]: h for h in yaml.safe_load((CHECKOUT / ".pre-commit-hooks.yaml").read_text())}
    static, introspect = hooks["prefixlint"], hooks["prefixlint-introspect"]
    assert static["entry"] == "prefixlint check"
    assert static["language"] == "python" and static["types"] == ["python"]
    assert static["require_serial"] is False
    assert "stages" not in static  # runs on every commit
    assert introspect["entry"] == "prefixlint check --introspect --strict"
    assert introspect["language"] == "system"  # where vLLM is, not an isolated venv
    assert introspect["stages"] == ["manual"]  # opt in


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory) -> tuple[Path, str]:
    """This checkout's working tree, committed to a throw-away repository: (path, commit)."""
    files = git(CHECKOUT, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    repo = tmp_path_factory.mktemp("snapshot")
    for name in filter(None, files.split("\0")):
        source = CHECKOUT / name
        if source.is_file():  # a deleted, not yet committed file is still listed
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, repo / name)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "snapshot")
    return repo, git(repo, "rev-parse", "HEAD").strip()


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A user's repository with one clean and one broken vLLM model file."""
    assert VLLM is not None
    root = tmp_path_factory.mktemp("project")
    llama = (VLLM / "model_executor" / "models" / "llama.py").read_text()
    good = fix_source(llama, "llama.py").new_code  # llama.py's one known finding fixed
    (root / "good.py").write_text(good)
    (root / "bad.py").write_text(
        good.replace('prefix=f"{prefix}.o_proj"', 'prefix=f"{prefix}.out_proj"', 1)
    )
    git(root, "init", "-q")
    git(root, "add", "-A")
    return root


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    """PRE_COMMIT_HOME shared by the module's runs: the hook environment is built once."""
    return tmp_path_factory.mktemp("pre-commit-home")


def pre_commit(cwd: Path, home: Path, *args: str) -> tuple[int, str, float]:
    env = dict(os.environ, PRE_COMMIT_HOME=str(home), NO_COLOR="1")
    env.pop("PRE_COMMIT_COLOR", None)
    start = time.monotonic()
    proc = subprocess.run(
        [str(PRE_COMMIT), *args, "--color", "never"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start


def test_try_repo_flags_the_broken_file(snapshot, project, home) -> None:
    """``pre-commit try-repo`` builds the hook from the repository, as a user trying it."""
    repo, _ = snapshot
    rc, out, seconds = pre_commit(
        project, home, "try-repo", str(repo), "prefixlint", "--files", "bad.py"
    )
    assert rc == 1, out
    assert "PFX302" in out and "bad.py:" in out, out
    assert seconds < 180, f"try-repo took {seconds:.0f}s"


def test_hook_passes_clean_file_and_fails_broken_one(snapshot, project, home) -> None:
    """The hook as a project configures it (``repo`` + ``rev``): exit 0, then exit 1."""
    repo, rev = snapshot
    config = project / "pre-commit-config.yaml"
    hooks = [{"id": "prefixlint"}]
    config.write_text(json.dumps({"repos": [{"repo": str(repo), "rev": rev, "hooks": hooks}]}))
    args = ("run", "--config", str(config), "prefixlint", "--files")
    rc, out, _ = pre_commit(project, home, *args, "good.py")
    assert rc == 0, out
    assert "prefixlint" in out and "Passed" in out, out
    rc, out, second = pre_commit(project, home, *args, "bad.py")
    assert rc == 1, out
    assert "PFX302" in out and "bad.py:" in out and "good.py" not in out, out
    assert second < 60, f"a run in the built environment took {second:.0f}s"


def _introspect_hook(
    repo: Path, project: Path, home: Path, tmp_path: Path, file: str
) -> tuple[int, str]:
    """The manual `prefixlint-introspect` hook of ``repo`` on ``file`` of ``project`` (made a
    git repository here), with a `prefixlint` on PATH that runs this checkout on the Python
    that has vLLM (the `language: system` hook runs the environment's)."""
    git(project, "init", "-q")
    git(project, "add", "-A")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    launcher = bin_dir / "prefixlint"
    launcher.write_text(
        f'#!/bin/sh\nPYTHONPATH={CHECKOUT} exec {sys.executable} -m prefixlint "$@"\n'
    )
    launcher.chmod(0o755)
    saved = os.environ["PATH"]
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{saved}"
    try:
        rc, out, _ = pre_commit(
            project,
            home,
            "try-repo",
            str(repo),
            "prefixlint-introspect",
            "--hook-stage",
            "manual",
            "--files",
            file,
        )
    finally:
        os.environ["PATH"] = saved
    return rc, out


def test_introspect_hook_runs_phase2_where_vllm_is(snapshot, home, tmp_path) -> None:
    """The `language: system` hook runs the environment's `prefixlint` (here: this checkout
    on the Python that has vLLM) and builds the model: a phase-2 finding fails it (the head
    given its parent's prefix, which only phase 2 sees; a `# noqa` of the static code now
    silences phase 2's finding of the same site too, issue 40)."""
    from tests.plugin_qwen import make_plugin

    repo, _ = snapshot
    project = tmp_path / "plugin-project"
    head = 'prefix=maybe_prefix(prefix, "lm_head")'
    make_plugin(project, lambda s: s.replace(head, "prefix=prefix"))
    rc, out = _introspect_hook(repo, project, home, tmp_path, "myplugin/models.py")
    assert rc == 1, out
    assert "PFX601" in out and "`lm_head`" in out and "phase 2" in out, out


def test_introspect_hook_passes_a_correct_plugin_package(snapshot, home, tmp_path) -> None:
    """A plugin's own repository (the test plugin package, its entry point in its
    ``pyproject.toml``, not installed): the strict hook builds its model as vLLM would load
    it (registration, its own config class) and passes."""
    from tests.toy_plugin import SOURCE

    repo, _ = snapshot
    project = tmp_path / "toy-plugin"
    shutil.copytree(SOURCE, project)
    rc, out = _introspect_hook(repo, project, home, tmp_path, "prefixlint_toy/model.py")
    assert rc == 0, out
    assert "Passed" in out and "Failed" not in out, out


def test_introspect_without_vllm_fails_with_a_message(snapshot, project, home) -> None:
    """In the static hook's own virtualenv (no torch, no vLLM), `check --introspect` used to
    print "All checks passed"; it must fail and say why."""
    repo, rev = snapshot
    config = project / "pre-commit-config.yaml"
    hooks = [{"id": "prefixlint"}]
    config.write_text(json.dumps({"repos": [{"repo": str(repo), "rev": rev, "hooks": hooks}]}))
    rc, out, _ = pre_commit(project, home, "run", "--config", str(config), "--files", "good.py")
    assert rc == 0, out
    # The hook's virtualenv in the pre-commit store: prefixlint and its deps, no vLLM.
    found = sorted(home.glob("repo*/py_env-*/bin/prefixlint"))
    assert found, list(home.iterdir())
    done = subprocess.run(
        [str(found[0]), "check", "--introspect", "good.py"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "passed" not in done.stdout.lower()
    assert "needs torch and vllm" in done.stderr and "nothing was built" in done.stderr
