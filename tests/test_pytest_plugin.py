"""``pytest --prefixlint-zoo`` (prefixlint/pytest_plugin.py) run by a real pytest: one test
per architecture, failing on phase-2 errors, skipped when phase 2 verified nothing."""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

import pytest

from tests.conftest import requires_vllm
from tests.plugin_qwen import make_plugin

pytest_plugins = ["pytester"]

FIXTURES = Path(__file__).parent / "fixtures"
PLUGIN = "prefixlint.pytest_plugin"


def plugin_args() -> list[str]:
    """``-p`` for the plugin, unless its pytest11 entry point already loads it (an install
    of this checkout): loading it twice is an error."""
    installed = importlib.metadata.entry_points(group="pytest11")
    return [] if any(ep.value == PLUGIN for ep in installed) else ["-p", PLUGIN]


def test_entry_point_is_declared() -> None:
    import tomllib

    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert pyproject["project"]["entry-points"]["pytest11"] == {"prefixlint": PLUGIN}


def test_default_grid_is_introspects() -> None:
    """Without --prefixlint-tp/-pp a test builds what `prefixlint introspect` builds (issue
    30: tp=1 only showed one finding where introspect showed all); given sizes win."""
    from types import SimpleNamespace

    from prefixlint.introspect import DEFAULT_PP, DEFAULT_TP
    from prefixlint.pytest_plugin import _sizes

    options = {"prefixlint_tp": None, "prefixlint_pp": None}
    config = SimpleNamespace(getoption=options.__getitem__)
    assert _sizes(config, "tp") == list(DEFAULT_TP) and _sizes(config, "pp") == list(DEFAULT_PP)
    options["prefixlint_tp"] = "1,2"
    assert _sizes(config, "tp") == [1, 2]


def test_inert_without_the_flag(pytester: pytest.Pytester) -> None:
    """Installed, the plugin adds nothing to a run that does not ask for it; its options
    are in --help."""
    pytester.makepyfile("def test_one():\n    assert True\n")
    result = pytester.runpytest(*plugin_args())
    result.assert_outcomes(passed=1)
    help_text = pytester.runpytest(*plugin_args(), "--help").stdout.str()
    for option in ("--prefixlint-zoo", "--prefixlint-tp", "--prefixlint-only"):
        assert option in help_text


def test_bad_sizes_are_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(*plugin_args(), "--prefixlint-zoo", "--prefixlint-tp", "0,x")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--prefixlint-tp: expected comma-separated positive*"])


@requires_vllm
@pytest.mark.slow
def test_one_test_per_architecture(pytester: pytest.Pytester) -> None:
    """A real registry architecture that builds cleanly passes; a plugin copy of qwen2.py
    with a planted prefix bug fails at the line that built the layer; a model whose module
    needs a missing package is skipped as not verified, with the reason."""
    models = make_plugin(
        pytester.path, lambda s: s.replace('prefix=f"{prefix}.mlp",', 'prefix=f"{prefix}.ffn",')
    )
    line = next(
        i for i, text in enumerate(models.read_text().splitlines(), 1) if "self.mlp = " in text
    )
    planted = f"{models}:MyQwen2ForCausalLM"
    missing = f"{FIXTURES / 'introspect' / 'unimportable.py'}:BrokenForCausalLM"
    result = pytester.runpytest_subprocess(
        *plugin_args(),
        "--prefixlint-zoo",
        "-rs",
        "--prefixlint-only",
        "Qwen2ForCausalLM",  # clean in phase 2 (Llama has a real finding: embed_tokens)
        "--prefixlint-only",
        f"{planted},{missing}",
    )
    result.assert_outcomes(passed=1, failed=1, skipped=1)
    out = result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            f"*phase 2 findings for {planted}:*",
            f"*models.py:{line}: PFX601 *ffn*",
            "*SKIPPED*BrokenForCausalLM not verified:*",
        ]
    )
    assert "a_package_that_is_not_installed" in out
    assert "collected 3 items" in out


@requires_vllm
@pytest.mark.slow
def test_collects_the_whole_registry_and_refuses_unknown_names(pytester: pytest.Pytester) -> None:
    listed = pytester.runpytest_subprocess(*plugin_args(), "--prefixlint-zoo", "--co", "-q")
    names = [n for n in listed.stdout.lines if n.startswith("prefixlint::")]
    assert "prefixlint::LlamaForCausalLM" in names and len(names) > 100
    # -m selects only these tests beside a project's own; -k one of them.
    pytester.makepyfile("def test_own():\n    pass\n")
    picked = pytester.runpytest_subprocess(
        *plugin_args(), "--prefixlint-zoo", "--co", "-q", "-m", "prefixlint", "-k", "Llama4"
    )
    picked_names = [n for n in picked.stdout.lines if "::" in n]
    assert "prefixlint::Llama4ForCausalLM" in picked_names
    assert all(n.startswith("prefixlint::") and "Llama4" in n for n in picked_names)
    unknown = pytester.runpytest_subprocess(
        *plugin_args(), "--prefixlint-zoo", "--prefixlint-only", "NoSuchForCausalLM"
    )
    assert unknown.ret == pytest.ExitCode.USAGE_ERROR
    unknown.stderr.fnmatch_lines(["*not an architecture of the installed vLLM*NoSuchForCausalLM*"])


@requires_vllm
@pytest.mark.slow
def test_an_installed_plugin_model_passes(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A correct out-of-tree model, installed as users install a plugin, is found by name
    through its ``vllm.general_plugins`` entry point and passes (not skipped)."""
    from tests.toy_plugin import ARCHITECTURE, can_install, install

    if not can_install():
        pytest.skip("pip and setuptools are needed to install the test plugin")
    site = install(pytester.path / "site")
    checkout = Path(__file__).resolve().parents[1]
    monkeypatch.setenv("PYTHONPATH", f"{checkout}{os.pathsep}{site}")
    result = pytester.runpytest_subprocess(
        *plugin_args(), "--prefixlint-zoo", "-rs", "--prefixlint-only", ARCHITECTURE
    )
    result.assert_outcomes(passed=1)
