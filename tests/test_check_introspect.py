"""``check --introspect``: which classes phase 2 builds, honest verdicts when it cannot,
phase-2 codes selectable, ignorable and ``noqa``-able, findings where a person clicks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from prefixlint.check_introspect import architectures_in, registered_classes
from prefixlint.static.vllm_source import registry_architectures
from tests.conftest import VLLM, requires_vllm
from tests.plugin_qwen import make_plugin

CHECKOUT = Path(__file__).resolve().parents[1]


def prefixlint(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "prefixlint", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**__import__("os").environ, "PYTHONPATH": str(CHECKOUT), "NO_COLOR": "1"},
    )


@requires_vllm
def test_only_architectures_are_built(tmp_path: Path) -> None:
    """The inner ``MyQwenModel`` takes vllm_config too; it is built by its architecture,
    never as one (that gave five false PFX601)."""
    models = make_plugin(tmp_path)
    found = architectures_in(models, registry_architectures(VLLM))
    assert [(c.name, c.registered_as) for c in found] == [
        ("MyQwen2ForCausalLM", "MyQwen2ForCausalLM")
    ]
    llama = VLLM / "model_executor" / "models" / "llama.py"
    assert [c.name for c in architectures_in(llama, registry_architectures(VLLM))].count(
        "LlamaForCausalLM"
    ) == 1
    assert registered_classes('ModelRegistry.register_model("A", "pkg.mod:AForX")') == {
        "AForX": "A"
    }


@requires_vllm
@pytest.mark.slow
def test_plugin_phase2_findings_ignore_and_noqa(tmp_path: Path) -> None:
    models = make_plugin(
        tmp_path,
        lambda s: s.replace('prefix=f"{prefix}.mlp",', 'prefix=f"{prefix}.ffn",  # noqa: PFX302'),
    )
    line = next(
        i for i, text in enumerate(models.read_text().splitlines(), 1) if "self.mlp = " in text
    )
    args = ("check", "--no-cache", "--introspect", "--tp", "1", "--pp", "2", "--format", "json")

    def findings_of(done) -> list:
        return [f for f in json.loads(done.stdout) if f["severity"] != "note"]

    # One noqa per site across phases (issue 40): the noqa comment for PFX302 on the call's
    # `prefix=` line silences phase 2's PFX601 of that statement, reported at its first line.
    done = prefixlint(*args, "myplugin", cwd=tmp_path)
    assert done.returncode == 0 and findings_of(done) == [], done.stdout
    models.write_text(models.read_text().replace("  # noqa: PFX302", ""))
    args = (*args, "--select", "PFX6")  # phase 2's finding alone
    done = prefixlint(*args, "myplugin", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    found = json.loads(done.stdout)
    findings = {(f["code"], f["location"]["row"]) for f in found if f["severity"] != "note"}
    assert findings == {("PFX601", line)}
    # At the statement that built the module, not column 1.
    assert found[0]["location"]["column"] == 9
    assert "building MyQwen2ForCausalLM" in done.stderr  # progress on stderr
    assert "MyQwenModel" not in done.stderr.split("building")[1].split("\n")[0]

    # --ignore takes phase-2 codes; so does a noqa comment on the reported line.
    done = prefixlint(*args, "--ignore", "PFX601", "myplugin", cwd=tmp_path)
    assert done.returncode == 0 and findings_of(done) == [], done.stderr
    lines = models.read_text().splitlines()
    lines[line - 1] += "  # noqa: PFX601"
    models.write_text("\n".join(lines) + "\n")
    done = prefixlint(*args, "myplugin", cwd=tmp_path)
    assert done.returncode == 0 and findings_of(done) == [], done.stdout


FIXTURES = Path(__file__).parent / "fixtures" / "introspect"
# Imports a package no environment has: phase 2 cannot load it (class at line 6).
UNIMPORTABLE = (FIXTURES / "unimportable.py").read_text()

# Sleeps in its constructor: a build that hangs.
HANGS = (FIXTURES / "hangs.py").read_text()


@requires_vllm
@pytest.mark.slow
def test_what_phase2_cannot_load_is_not_verified_and_never_passed(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text(UNIMPORTABLE)
    done = prefixlint("check", "--no-cache", "--introspect", "--tp", "1", "broken.py", cwd=tmp_path)
    assert "passed" not in done.stdout, done.stdout
    assert (
        "broken.py:6:1: PFX600" in done.stdout and "a_package_that_is_not_installed" in done.stdout
    )
    assert "Not verified: 1" in done.stdout
    assert done.returncode == 0  # a gap of the tool's, not a finding...
    done = prefixlint(
        "check", "--no-cache", "--introspect", "--tp", "1", "--strict", "broken.py", cwd=tmp_path
    )
    assert done.returncode == 1  # ...unless --strict


@requires_vllm
@pytest.mark.slow
def test_a_hung_build_is_reported_at_its_line_within_timeout(tmp_path: Path) -> None:
    """At the model's line it hangs on (the worker's stacks, asked for at the timeout),
    not at 1:1 nor only at the class."""
    (tmp_path / "slow.py").write_text(HANGS)
    args = ("check", "--no-cache", "--introspect", "--tp", "1", "--timeout", "45")
    done = prefixlint(*args, "--format", "json", "slow.py", cwd=tmp_path, timeout=300)
    found = json.loads(done.stdout)
    sleeps = HANGS.splitlines().index("        time.sleep(10_000)") + 1
    assert [(f["code"], f["location"]["row"]) for f in found] == [("PFX604", sleeps)], found
    assert "45 s" in found[0]["message"]


def test_options_that_would_do_nothing_are_refused(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from prefixlint.cli import main

    (tmp_path / "m.py").write_text("x = 1\n")
    for args in (["--tp", "3"], ["--pp", "2"], ["--timeout", "5"]):
        result = CliRunner().invoke(main, ["check", "--no-cache", str(tmp_path), *args])
        assert result.exit_code == 2, (args, result.output)
        assert "Traceback" not in result.output


@requires_vllm
@pytest.mark.slow
def test_one_finding_per_site_across_phases(tmp_path: Path) -> None:
    """A plugin that declares SupportsPP but drops `make_empty_intermediate_tensors`:
    phase 1's PFX501 and phase 2's PFX606 are one finding, the static one, with phase 2's
    evidence."""
    import re

    def drop_method(source: str) -> str:
        out, n = re.subn(
            r"\n\s+self\.make_empty_intermediate_tensors = \(\n\s+"
            r"self\.model\.make_empty_intermediate_tensors\n\s+\)",
            "",
            source,
        )
        assert n == 1
        return out

    models = make_plugin(tmp_path, drop_method)
    line = next(
        i
        for i, text in enumerate(models.read_text().splitlines(), 1)
        if text.startswith("class MyQwen2ForCausalLM(")
    )
    args = ("check", "--no-cache", "--introspect", "--tp", "1", "--pp", "2", "--no-dryrun")
    done = prefixlint(*args, "--format", "json", "--explore-budget", "0", "myplugin", cwd=tmp_path)
    found = [f for f in json.loads(done.stdout) if f["severity"] != "note"]
    at_class = [f for f in found if f["location"]["row"] == line]
    assert [(f["code"], f["phase"]) for f in at_class] == [("PFX501", "static")], found
    [pp] = at_class
    assert [e["code"] for e in pp["data"]["runtime"]] == ["PFX606"]
    assert "phase 2 confirms it: PFX606" in pp["message"]


@requires_vllm
def test_a_malformed_shipped_config_is_a_finding_at_it(tmp_path: Path) -> None:
    """Issue 40: the plugin ships a ``config.json`` that is not JSON: a finding at that
    file's line, exit 1 (it was silently replaced by a guessed config: "All checks
    passed")."""
    models = make_plugin(tmp_path)
    shipped = models.parent / "config.json"
    shipped.write_text('{\n  "architectures": ["MyQwen2ForCausalLM"],\n  "hidden_size": 64,,\n}\n')
    args = ("check", "--no-cache", "--introspect", "--tp", "1", "--pp", "1", "--no-dryrun")
    done = prefixlint(*args, "--format", "json", "myplugin", cwd=tmp_path)
    assert done.returncode == 1, (done.stdout, done.stderr)
    errors = [f for f in json.loads(done.stdout) if f["severity"] == "error"]
    assert [(Path(f["filename"]).name, f["location"]["row"]) for f in errors] == [
        ("config.json", 3)
    ], errors
    assert "not valid JSON" in errors[0]["message"]
