"""The same findings with vLLM installed and without it.

``prefixlint check`` runs where only prefixlint's own dependencies are (pre-commit's hook
environment, the GitHub Action): there it reads vLLM from the summary that ships with
prefixlint (``prefixlint/static/vllm_source.py``). This runs ``check`` twice on the same
files, a plugin fixture and copies of vLLM's model files made at test time: once in this
environment, and once in a Python started with ``-I -S`` whose path holds only prefixlint and
the distributions libcst, click and rich need (linked from this environment), and asserts
that vLLM is not importable there and that both give the same findings.
"""

from __future__ import annotations

import contextlib
import importlib.metadata as metadata
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from prefixlint.static.vllm_source import shipped_summaries
from tests.conftest import VLLM, requires_vllm

REPO = Path(__file__).resolve().parent.parent
TOY = REPO / "tests" / "fixtures" / "plugins" / "toy_dist"
# Model files with the patterns this is about: a MoE built by ``FusedMoEFactory``
# (reductions read from vLLM's code), leading-dot root prefixes (gemma3, gpt2), a draft
# declaring ``SupportsPP`` (deepseek_mtp), a doubled ``.layers`` (whisper).
VLLM_FILES = ("llama.py", "bailing_moe.py", "gemma3.py", "gpt2.py", "deepseek_mtp.py", "whisper.py")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*")


def _requirements(name: str) -> list[str]:
    out = []
    for req in metadata.distribution(name).requires or []:
        if "extra ==" in req:
            continue
        found = _NAME.match(req)
        if found:
            out.append(found.group(0))
    return out


def _top_level(name: str) -> list[Path]:
    """The importable top-level packages and modules a distribution installed."""
    dist = metadata.distribution(name)
    names: set[str] = set()
    with contextlib.suppress(OSError):
        names |= set((dist.read_text("top_level.txt") or "").split())
    for f in dist.files or []:
        head = f.parts[0]
        if head.endswith((".dist-info", ".data")) or head == "..":
            continue
        names.add(head.removesuffix(".py") if head.endswith(".py") else head)
    out = []
    for n in sorted(names):
        for candidate in (Path(dist.locate_file(n)), Path(dist.locate_file(f"{n}.py"))):
            if candidate.exists():
                out.append(candidate)
                break
    return out


def isolated_site(folder: Path) -> Path:
    """A folder holding links to libcst, click and rich and what they require."""
    folder.mkdir()
    wanted = ["libcst", "click", "rich"] + (["tomli"] if sys.version_info < (3, 11) else [])
    seen: set[str] = set()
    while wanted:
        name = wanted.pop()
        key = name.lower().replace("_", "-")
        if key in seen:
            continue
        seen.add(key)
        try:
            wanted += _requirements(name)
            paths = _top_level(name)
        except metadata.PackageNotFoundError:
            continue  # an optional requirement of another Python
        for path in paths:
            link = folder / path.name
            if not link.exists():
                link.symlink_to(path)
    return folder


_RUN = """
import importlib.util, sys
sys.path[:0] = [{site!r}, {repo!r}]
assert importlib.util.find_spec("vllm") is None, "vLLM is importable"
assert importlib.util.find_spec("torch") is None, "torch is importable"
from prefixlint.cli import main
sys.argv = ["prefixlint", *{args!r}]
main()
"""


def findings(output: str) -> list[tuple]:
    return sorted(
        (
            Path(d["filename"]).name,
            d["location"]["row"],
            d["location"]["column"],
            d["code"],
            d["severity"],
            d["message"],
        )
        for d in json.loads(output)
    )


def _check(argv: list[str], cwd: Path, isolated: Path | None) -> str:
    args = ["check", *argv, "--format", "json", "--no-cache", "--jobs", "1"]
    if isolated is None:
        command = [sys.executable, "-m", "prefixlint", *args]
        env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    else:
        code = _RUN.format(site=str(isolated), repo=str(REPO), args=args)
        command, env = [sys.executable, "-I", "-S", "-c", code], {"PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode in (0, 1), done.stderr[-3000:]
    return done.stdout


@requires_vllm
def test_check_gives_the_same_findings_without_vllm(tmp_path: Path) -> None:
    assert VLLM is not None
    installed = _installed_version(VLLM)
    shipped = {p.name.removeprefix("vllm-").removesuffix(".json.gz") for p in shipped_summaries()}
    if installed not in shipped:
        pytest.skip(f"no shipped summary of the installed vLLM {installed} ({sorted(shipped)})")
    plugin = tmp_path / "toy_dist"
    shutil.copytree(TOY, plugin)
    models = tmp_path / "vllm" / "model_executor" / "models"
    models.mkdir(parents=True)
    for folder in (tmp_path / "vllm", tmp_path / "vllm" / "model_executor", models):
        (folder / "__init__.py").write_text("")
    for name in VLLM_FILES:
        shutil.copy(VLLM / "model_executor" / "models" / name, models / name)
    argv = [str(plugin / "toy_plugin"), str(models)]
    site = isolated_site(tmp_path / "site")
    with_vllm = findings(_check(argv, tmp_path, None))
    without = findings(_check(argv, tmp_path, site))
    assert with_vllm == without
    # Not vacuous: the patterns this is about are found, in both.
    got = {(f[0], f[3], f[4]) for f in with_vllm}
    assert ("model.py", "PFX501", "error") in got  # SupportsPP without the method
    assert ("model.py", "PFX401", "error") in got  # all-reduce after FusedMoEFactory
    assert ("gemma3.py", "PFX302", "error") in got  # `.embed_tokens` at the root
    assert ("whisper.py", "PFX302", "error") in got  # `.layers` doubled


def _installed_version(package: Path) -> str | None:
    from prefixlint.static.vllm_source import InstalledVllm

    return InstalledVllm(package).version
