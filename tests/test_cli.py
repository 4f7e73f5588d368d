"""The command line: formats, exit codes, configuration, suppression, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from prefixlint.cli import main

FIXTURES = Path(__file__).parent / "fixtures"
# A head built without ``prefix`` while ``quant_config`` is passed: one PFX301 at line 10.
BAD_MODEL = (FIXTURES / "bad_model.py").read_text()


def run(args: list[str], cwd: Path) -> tuple[int, str]:
    old = Path.cwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(main, args, catch_exceptions=False)
    finally:
        os.chdir(old)
    return result.exit_code, result.output


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "model.py").write_text(BAD_MODEL)
    (tmp_path / "clean.py").write_text("x = 1\n")
    return tmp_path


def test_json_shape_and_exit_code(project: Path) -> None:
    code, out = run(["check", "--format", "json", "--no-cache", "."], project)
    assert code == 1
    findings = json.loads(out)
    assert len(findings) == 1
    f = findings[0]
    assert set(f) >= {
        "code",
        "message",
        "severity",
        "phase",
        "filename",
        "location",
        "end_location",
        "fix",
        "url",
    }
    assert (f["code"], f["severity"], f["phase"]) == ("PFX301", "error", "static")
    assert f["filename"] == "model.py"
    assert f["location"] == {"row": 10, "column": 24}
    assert f["end_location"]["row"] == 10


def test_text_format_has_frame_and_summary(project: Path) -> None:
    code, out = run(["check", "--no-cache", "model.py"], project)
    assert code == 1
    assert out.startswith("model.py:10:24: PFX301 ")
    assert "10 |         self.lm_head = ParallelLMHead(" in out
    assert "1  PFX301  missing-prefix" in out
    assert "\x1b[" not in out  # no colour when not a TTY


def test_clean_exit_zero(project: Path) -> None:
    code, out = run(["check", "--no-cache", "clean.py"], project)
    assert code == 0 and "All checks passed" in out


def test_select_ignore_and_fail_on(project: Path) -> None:
    assert run(["check", "--no-cache", "--ignore", "PFX3", "."], project)[0] == 0
    assert run(["check", "--no-cache", "--select", "PFX302", "."], project)[0] == 0
    assert run(["check", "--no-cache", "--select", "PFX30", "."], project)[0] == 1
    # A quantization config that may reach the layer (through `vllm_config`): a warning.
    warn = BAD_MODEL.replace(", quant_config=quant_config)", ", vllm_config=quant_config)")
    (project / "warn.py").write_text(warn)
    code, out = run(["check", "--no-cache", "--fail-on", "error", "warn.py"], project)
    assert code == 0 and "PFX301" in out  # a warning is reported but does not fail


def test_unknown_code_and_missing_path_exit_2(project: Path) -> None:
    assert run(["check", "--select", "PFX999", "."], project)[0] == 2
    code, out = run(["check", "does-not-exist.py"], project)
    assert code == 2 and "does not exist" in out


def test_noqa(project: Path) -> None:
    text = BAD_MODEL.replace(
        "quant_config=quant_config)", "quant_config=quant_config)  # noqa: PFX301"
    )
    (project / "model.py").write_text(text)
    assert run(["check", "--no-cache", "model.py"], project)[0] == 0
    (project / "model.py").write_text(text.replace("# noqa: PFX301", "# noqa: PFX302"))
    assert run(["check", "--no-cache", "model.py"], project)[0] == 1
    (project / "model.py").write_text(text.replace("# noqa: PFX301", "# noqa"))
    assert run(["check", "--no-cache", "model.py"], project)[0] == 0


def test_pyproject_config(project: Path) -> None:
    (project / "pyproject.toml").write_text('[tool.prefixlint]\nignore = ["PFX301"]\n')
    assert run(["check", "--no-cache", "."], project)[0] == 0
    (project / "pyproject.toml").write_text(
        '[tool.prefixlint]\nper-file-ignores = { "model.py" = ["PFX3"] }\n'
    )
    assert run(["check", "--no-cache", "."], project)[0] == 0
    (project / "pyproject.toml").write_text('[tool.prefixlint]\nexclude = ["model.py"]\n')
    assert run(["check", "--no-cache", "."], project)[0] == 0
    (project / "pyproject.toml").write_text('[tool.prefixlint]\nselect = "PFX301"\n')
    assert run(["check", "--no-cache", "."], project)[0] == 2
    (project / "pyproject.toml").write_text("[tool.prefixlint]\nbogus = 1\n")
    code, out = run(["check", "--no-cache", "."], project)
    assert code == 2 and "bogus" in out


def test_extend_prefix_layers(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        "from mylib import FancyLayer\n\nclass M:\n    def __init__(self, prefix=''):\n"
        "        self.x = FancyLayer(4)\n"
    )
    assert run(["check", "--no-cache", "."], tmp_path)[0] == 0
    (tmp_path / "pyproject.toml").write_text(
        '[tool.prefixlint]\nextend-prefix-layers = ["FancyLayer"]\n'
    )
    code, out = run(["check", "--no-cache", "."], tmp_path)
    assert code == 1 and "FancyLayer" in out


def test_cache_round_trip(project: Path) -> None:
    cache = project / "cache"
    first = run(["check", "--format", "json", "--cache-dir", str(cache), "."], project)
    assert list(cache.glob("results-*.json"))
    second = run(["check", "--format", "json", "--cache-dir", str(cache), "."], project)
    assert first == second
    # An edit invalidates the entry of that file.
    (project / "model.py").write_text(
        BAD_MODEL.replace("quant_config=quant_config)", "quant_config=quant_config, prefix=prefix)")
    )
    assert run(["check", "--cache-dir", str(cache), "."], project)[0] == 0


def test_rules_and_rule_commands() -> None:
    from prefixlint.rules import ALL_RULES

    code, out = run(["rules"], Path.cwd())
    assert code == 0
    for r in ALL_RULES:
        assert r.code in out and r.name in out
    code, out = run(["rule", "PFX302"], Path.cwd())
    assert code == 0 and "## Why is this bad?" in out and "Use instead" in out
    assert run(["rule", "missing-prefix"], Path.cwd())[0] == 0
    assert run(["rule", "PFX999"], Path.cwd())[0] == 2


def test_static_run_imports_neither_torch_nor_vllm(project: Path) -> None:
    script = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from prefixlint.cli import main\n"
        "r = CliRunner().invoke(main, ['check', '--no-cache', '--jobs', '1', '.'])\n"
        "assert r.exit_code == 1, r.output\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'vllm'))\n"
        "print('IMPORTED', bad)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=project, capture_output=True, text=True, check=True
    )
    assert "IMPORTED []" in out.stdout


def test_parallel_equals_serial(tmp_path: Path) -> None:
    for i in range(12):
        (tmp_path / f"m{i}.py").write_text(BAD_MODEL)
    serial = run(["check", "--format", "json", "--no-cache", "-j", "1", "."], tmp_path)
    parallel = run(["check", "--format", "json", "--no-cache", "-j", "2", "."], tmp_path)
    assert serial == parallel and len(json.loads(serial[1])) == 12


def test_fix_and_diff(project: Path) -> None:
    before = (project / "model.py").read_text()
    code, out = run(["check", "--diff", "--no-cache", "model.py"], project)
    assert code == 1 and "+            self.lm_head = ParallelLMHead(" not in out
    assert 'prefix=f"{prefix}.lm_head"' in out and "--- a/model.py" in out
    assert (project / "model.py").read_text() == before  # --diff writes nothing
    code, out = run(["check", "--fix", "--no-cache", "model.py"], project)
    assert code == 0 and "All checks passed" in out
    fixed = (project / "model.py").read_text()
    assert 'quant_config=quant_config, prefix=f"{prefix}.lm_head")' in fixed
    assert run(["check", "--diff", "--no-cache", "model.py"], project)[0] == 0  # idempotent


def test_output_that_cannot_be_written_is_a_usage_error(project: Path) -> None:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    for args in (
        ["init", "-q"],
        ["add", "."],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"],
    ):
        subprocess.run(["git", *args], cwd=project, check=True, env=env)
    for target in ("missing-dir/out.json", "."):
        for command in (["check"], ["review", "--diff-base", "HEAD"]):
            code, out = run([*command, "--no-cache", "-o", target], project)
            assert code == 2 and "Traceback" not in out, (command, target, out)
            assert "--output" in out, out


def test_named_pipe_in_a_folder_is_skipped_and_named_is_refused(project: Path) -> None:
    os.mkfifo(project / "pipe.py")
    done = subprocess.run(
        [sys.executable, "-m", "prefixlint", "check", "--no-cache", "."],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,  # it used to block forever in read_bytes
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    assert done.returncode == 1 and "model.py" in done.stdout, done.stdout + done.stderr
    code, out = run(["check", "--no-cache", "pipe.py"], project)
    assert code == 2 and "not a regular file" in out


def test_configs_table_errors(project: Path) -> None:
    pyproject = project / "pyproject.toml"
    pyproject.write_text('[tool.prefixlint.configs]\nMyForCausalLM = "configs/missing.json"\n')
    code, out = run(["check", "--no-cache", "."], project)
    assert code == 2 and "missing.json" in out and "does not exist" in out
    pyproject.write_text("[tool.prefixlint.configs]\nFoo = 3\n")
    code, out = run(["check", "--no-cache", "."], project)
    assert code == 2 and "Foo" in out


def test_pyproject_is_found_from_the_checked_files(project: Path, tmp_path_factory) -> None:
    """ruff's rule: the closest pyproject.toml above each file, wherever the cwd is."""
    (project / "pyproject.toml").write_text('[tool.prefixlint]\nignore = ["PFX3"]\n')
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    code, out = run(["check", "--no-cache", str(project)], elsewhere)
    assert code == 0, out
    # A nested project with its own configuration: its files follow it.
    nested = project / "sub"
    nested.mkdir()
    (nested / "pyproject.toml").write_text("[tool.prefixlint]\nselect = []\n")
    (nested / "model.py").write_text(BAD_MODEL)
    code, out = run(["check", "--no-cache", "--no-source", str(project)], elsewhere)
    assert code == 1 and "sub/model.py" in out and "\nmodel.py" not in "\n" + out, out


def test_summary_wording(project: Path) -> None:
    code, out = run(["check", "--no-cache", "--no-source", "."], project)
    assert code == 1 and "in 1 file (2 files checked)" in out, out
    code, out = run(["check", "--no-cache", "clean.py"], project)
    assert code == 0 and "All checks passed (1 file)." in out, out


def test_fix_with_diff_is_rufs_diff(project: Path) -> None:
    """``--fix --diff`` together, as ruff takes them: the diff, nothing written."""
    before = (project / "model.py").read_text()
    code, out = run(["check", "--fix", "--diff", "--no-cache", "model.py"], project)
    assert code == 1 and 'prefix=f"{prefix}.lm_head"' in out and "--- a/model.py" in out, out
    assert (project / "model.py").read_text() == before


def test_introspect_judges_a_file_before_any_build(project: Path, monkeypatch) -> None:
    """A missing file or a file that does not parse gets check's verdict at once: the
    worker (torch and vLLM imported) never starts."""
    import prefixlint.introspect as phase2

    def no_build(*args, **kwargs):
        raise AssertionError("the worker was started")

    monkeypatch.setattr(phase2, "introspect", no_build)
    (project / "broken.py").write_text("x = 1\nclass M(nn.Module:\n    pass\n")
    for target in ("missing.py", "missing.py:Model"):
        code, out = run(["introspect", target], project)
        assert code == 2 and "path does not exist" in out and "Traceback" not in out, out
    for command in (["introspect", "broken.py:M"], ["check", "--no-cache", "broken.py"]):
        code, out = run([*command, "--format", "json"], project)
        found = json.loads(out)
        assert code == 1 and [(f["code"], f["location"]["row"]) for f in found] == [
            ("PFX001", 2)
        ], (command, out)


def test_introspect_takes_no_cache_and_no_source(project: Path, monkeypatch) -> None:
    """``--no-cache`` gives the worker an empty vLLM cache folder (vLLM's model-info
    cache), removed afterwards; ``--no-source`` drops the source frame, as in ``check``."""
    import prefixlint.introspect as phase2
    from prefixlint.diagnostic import Diagnostic

    seen: list[str | None] = []

    def fake(target: str, **kwargs) -> phase2.IntrospectReport:
        seen.append(os.environ.get("VLLM_CACHE_ROOT"))
        found = Diagnostic.at_line("PFX601", "duplicate", str(project / "model.py"), 10)
        return phase2.IntrospectReport(target, diagnostics=[found])

    monkeypatch.setattr(phase2, "introspect", fake)
    monkeypatch.delenv("VLLM_CACHE_ROOT", raising=False)
    code, out = run(["introspect", "--no-cache", "--no-source", "model.py:Model"], project)
    assert code == 1 and "PFX601" in out and "|" not in out, out
    assert seen[0] and not Path(seen[0]).exists() and "VLLM_CACHE_ROOT" not in os.environ
    code, out = run(["introspect", "model.py:Model"], project)
    assert code == 1 and "|" in out and seen[1] is None, out


def test_the_results_cache_is_keyed_by_prefixlint_own_source(tmp_path: Path) -> None:
    """An edited or upgraded prefixlint (same version number) never serves old results."""
    from prefixlint.static.cache import source_stamp

    (tmp_path / "pkg").mkdir()
    rule = tmp_path / "pkg" / "rule.py"
    rule.write_text("SEVERITY = 'error'\n")
    before = source_stamp(tmp_path)
    assert source_stamp(tmp_path) == before
    rule.write_text("SEVERITY = 'warning, now'\n")
    assert source_stamp(tmp_path) != before
