"""A warm run and a one-file run pay only for what they use (issue 27): vLLM's registry
facts are read once per release and cached by content, each path is resolved once, and
``check`` loads neither phase 2 nor the scope code it does not need."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from prefixlint import paths
from prefixlint.static import vllm_source
from prefixlint.static.vllm_source import InstalledVllm, use_fact_cache

REGISTRY = """\
_TEXT_GENERATION_MODELS = {
    "ToyForCausalLM": ("toy", "ToyForCausalLM"),
}
"""


def fake_vllm(root: Path) -> Path:
    """A vLLM package with a registry of one architecture, defined in ``models/toy.py``."""
    package = root / "vllm"
    models = package / "model_executor" / "models"
    models.mkdir(parents=True)
    for folder in (package, package / "model_executor", models):
        (folder / "__init__.py").write_text("")
    (package / "_version.py").write_text('__version__ = "9.9.9"\n')
    (models / "registry.py").write_text(REGISTRY)
    (models / "toy.py").write_text("class ToyForCausalLM:\n    pass\n")
    return package


@pytest.fixture
def facts(tmp_path: Path):
    """A fact cache folder for this test; the process's memo of the registry forgotten."""
    cache = tmp_path / "cache"
    use_fact_cache(cache)
    vllm_source._installed_registry.cache_clear()
    yield cache
    use_fact_cache(None)
    vllm_source._installed_registry.cache_clear()


MEMOS = (
    "_installed_registry",
    "_installed_definitions",
    "_installed_modules",
    "_read",
    "_parse",
    "_class_lines",
    "_module_file",
)


def _fresh_registry(package: Path) -> list[tuple]:
    # As a new process would: none of this process's memos of vLLM's files.
    for memo in MEMOS:
        getattr(getattr(vllm_source, memo), "cache_clear", lambda: None)()  # none if patched
    return [e.definitions for e in InstalledVllm(package).registry()]


def _no_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(path: Path) -> None:
        raise AssertionError(f"parsed {path}: the cached facts should have answered")

    monkeypatch.setattr(vllm_source, "_parse", refuse)


def test_registry_facts_are_read_once_per_release(
    tmp_path: Path, facts: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = fake_vllm(tmp_path)
    first = _fresh_registry(package)
    assert first == [(("vllm.model_executor.models.toy", "ToyForCausalLM"),)]
    assert list(facts.glob("vllm-facts-*.json"))
    with monkeypatch.context() as m:
        _no_parse(m)
        assert _fresh_registry(package) == first
        # A new mtime with the same content is the same file: still no parse.
        toy = package / "model_executor" / "models" / "toy.py"
        os.utime(toy, ns=(1, 1))
        assert _fresh_registry(package) == first


def test_a_changed_vllm_file_is_read_again(tmp_path: Path, facts: Path) -> None:
    package = fake_vllm(tmp_path)
    _fresh_registry(package)
    models = package / "model_executor" / "models"
    # The class moves into a per-platform module that toy.py re-exports.
    (models / "toy_impl.py").write_text("class ToyForCausalLM:\n    pass\n")
    (models / "toy.py").write_text("from .toy_impl import ToyForCausalLM\n")
    assert _fresh_registry(package) == [
        (("vllm.model_executor.models.toy_impl", "ToyForCausalLM"),)
    ]


def test_without_a_cache_folder_nothing_is_written(tmp_path: Path) -> None:
    package = fake_vllm(tmp_path)
    vllm_source._installed_registry.cache_clear()
    assert InstalledVllm(package).registry()
    vllm_source._installed_registry.cache_clear()
    assert not list(tmp_path.rglob("vllm-facts-*"))


def test_a_corrupt_fact_cache_is_made_again(tmp_path: Path, facts: Path) -> None:
    package = fake_vllm(tmp_path)
    first = _fresh_registry(package)
    for bad in (
        '{"registry": {"value": 3, "deps": 7}}',
        '{"registry": {"value": [5], "deps": {}}}',
        '{"registry": {"value": [[[1, 2, 3, 4, []]]], "deps": {}}}',
        '{"registry": {"value": [["abcde"]], "deps": {}}}',
        "[]",
        "{",
    ):
        for f in facts.glob("vllm-facts-*.json"):
            f.write_text(bad)
        assert _fresh_registry(package) == first


def test_definitions_are_cached_and_see_a_new_module(
    tmp_path: Path, facts: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = fake_vllm(tmp_path)
    layers = package / "model_executor" / "layers"
    layers.mkdir()
    (layers / "__init__.py").write_text("")
    (layers / "linear.py").write_text("class RowParallelLinear:\n    pass\n")
    package_name = "vllm.model_executor.layers"

    def defining(name: str) -> list[str]:
        _fresh_registry(package)
        return InstalledVllm(package).defining(package_name, name)

    assert defining("RowParallelLinear") == ["vllm.model_executor.layers.linear"]
    with monkeypatch.context() as m:

        def refuse(path: Path) -> bytes:
            raise AssertionError(f"read {path}: the cached facts should have answered")

        m.setattr(vllm_source, "_read", refuse)
        assert defining("RowParallelLinear") == ["vllm.model_executor.layers.linear"]
    # A module added to a sub-package: the folder's listing changed.
    (layers / "fused").mkdir()
    (layers / "fused" / "__init__.py").write_text("")
    (layers / "fused" / "moe.py").write_text("class FusedMoE:\n    pass\n")
    assert defining("FusedMoE") == ["vllm.model_executor.layers.fused.moe"]


def test_each_path_is_resolved_once_per_run(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "a.py").write_text("x = 1\n")
    (tmp_path / "link").symlink_to(tmp_path / "real")  # a linked folder
    (tmp_path / "real" / "b.py").symlink_to(tmp_path / "real" / "a.py")  # a linked file
    (tmp_path / "real" / "gone.py").symlink_to(tmp_path / "nowhere.py")  # dangling
    names = [
        "link/a.py",
        "link/b.py",
        "link/gone.py",
        "link/../real/a.py",  # ``..`` after a link: the link's target's parent
        "real/./missing.py",
        "link",
        ".",
    ]
    monkeypatch.chdir(tmp_path)
    paths.forget_resolved()
    first = [paths.resolved(n) for n in names]
    assert first == [Path(n).resolve() for n in names]
    assert paths.display_path("link/a.py") == "real/a.py"

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("resolved a second time")

    with monkeypatch.context() as m:
        m.setattr(Path, "resolve", refuse)
        m.setattr(os.path, "islink", refuse)
        assert [paths.resolved(n) for n in names] == first
    # Another current folder: a relative path names another file.
    monkeypatch.chdir(tmp_path / "real")
    assert paths.resolved("a.py") == tmp_path.resolve() / "real" / "a.py"
    paths.forget_resolved()


def test_check_imports_neither_phase_2_nor_unused_scope_code(tmp_path: Path) -> None:
    """A one-file ``check`` with a cached result loads no phase-2 code (the client, the
    warm worker, sockets)."""
    (tmp_path / "model.py").write_text("x = 1\n")
    (tmp_path / "pyproject.toml").write_text(
        '[tool.prefixlint.checkpoints]\nLlamaForCausalLM = "meta/llama"\n'
    )
    script = (
        "import sys\n"
        "from prefixlint.cli import main\n"
        "try:\n"
        "    main(['check', '--cache-dir', 'c', 'model.py'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('LOADED', sorted(m for m in sys.modules if m.startswith('prefixlint.introspect')"
        " or m == 'socket'))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    for _ in range(2):  # the second run answers from the results cache
        out = subprocess.run(
            [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, env=env
        )
        assert "LOADED []" in out.stdout, out.stdout + out.stderr
