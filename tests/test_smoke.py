"""Phase 3 (``prefixlint smoke``): real vLLM runs on random weights.

The two engine runs (a clean Llama, and one model carrying a planted defect per check)
start vLLM on the CPU: together about 6 minutes on 2 cores. They run by default (CI runs
them); set PREFIXLINT_SKIP_SMOKE=1 to leave them out locally.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from prefixlint.smoke import (
    CHECKS,
    SmokeReport,
    _collect,
    _diagnostic,
    parse_checks,
    smoke,
)
from prefixlint.smoke.cli import smoke as smoke_command
from tests.conftest import VLLM

engine_run = pytest.mark.skipif(
    VLLM is None or bool(os.environ.get("PREFIXLINT_SKIP_SMOKE")),
    reason="needs vLLM; PREFIXLINT_SKIP_SMOKE is set",
)

# Planted defects, one per check, chosen by the config's `planted_defects`.
PLANTED = (Path(__file__).parent / "fixtures" / "smoke" / "planted_models.py").read_text()


def _planted(tmp_path: Path, defects: list[str]) -> tuple[Path, Path]:
    from transformers import LlamaConfig

    models = tmp_path / "planted_models.py"
    models.write_text(PLANTED)
    config = LlamaConfig(planted_defects=defects)
    config.architectures = ["PlantedLlama"]
    config_file = tmp_path / "config.json"
    config_file.write_text(config.to_json_string())
    return models, config_file


def _class_line(path: Path, name: str) -> int:
    return next(
        i for i, line in enumerate(path.read_text().splitlines(), 1) if f"class {name}(" in line
    )


# -- without an engine -----------------------------------------------------------------


def test_parse_checks():
    assert parse_checks(None) == list(CHECKS)
    assert parse_checks("801, batch-dependence,pfx806,801") == ["PFX801", "PFX802", "PFX806"]
    with pytest.raises(ValueError, match="unknown smoke check"):
        parse_checks("PFX899")


def test_finding_is_a_smoke_diagnostic():
    finding = {"prompt": "long", "position": 3, "expected": 7, "got": 9, "margin": 2.5}
    d = _diagnostic("PFX803", finding, "/x/model.py", 42, "PlantedLlama").to_json()
    assert d["code"] == "PFX803" and d["phase"] == "smoke" and d["severity"] == "error"
    assert d["location"] == {"row": 42, "column": 1}
    assert "token 3: unchunked 7, chunked 9" in d["message"]
    assert d["data"]["architecture"] == "PlantedLlama"


def test_unfinished_checks_are_errors(tmp_path: Path):
    results = tmp_path / "results.jsonl"
    events = [
        {"event": "target", "arch": "A", "file": "/m.py", "line": 5},
        {"event": "check", "code": "PFX801", "status": "pass", "seconds": 1.0},
        {"event": "check", "code": "PFX805", "status": "skip", "reason": "one core"},
    ]
    results.write_text("".join(json.dumps(e) + "\n" for e in events))
    report = SmokeReport("A")
    _collect(report, results, ["PFX801", "PFX805", "PFX806"], tmp_path / "log", True, 60, -9)
    assert [(c.code, c.status) for c in report.checks] == [
        ("PFX801", "pass"),
        ("PFX805", "skip"),
        ("PFX806", "error"),
    ]
    assert "within 60 s" in report.error and report.checks[2].reason == report.error


def _cli() -> click.Group:
    @click.group()
    def main() -> None:
        pass

    main.add_command(smoke_command)
    return main


def test_cli_rejects_unknown_check():
    result = CliRunner().invoke(_cli(), ["smoke", "LlamaForCausalLM", "--checks", "PFX999"])
    assert result.exit_code == 2 and "unknown smoke check" in result.output


# -- with engines ----------------------------------------------------------------------


@engine_run
@pytest.mark.slow
def test_phase2_errors_block_the_run(tmp_path: Path):
    models, _ = _planted(tmp_path, [])
    report = smoke(f"{models}:DuplicatePrefixLlama")
    assert report.blocked and "--force" in report.blocked
    assert {c.status for c in report.checks} == {"skip"} and not report.timings.get("total")


@engine_run
@pytest.mark.slow
def test_llama_passes(capsys, tmp_path: Path, monkeypatch):
    import tempfile

    from prefixlint.smoke.shm import SHM

    own_tmp = tmp_path / "tmp"  # what is left here was left by the run
    own_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(own_tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)
    shm_before = {p.name for p in SHM.iterdir()}
    sockets_before = set(Path("/tmp").glob("prefixlint-rpc-*"))
    started = time.perf_counter()
    report = smoke("LlamaForCausalLM", device="cpu")
    wall = time.perf_counter() - started
    # Nothing left behind: no temp folder (this one is too deep for vLLM's socket names,
    # which go to a short folder of their own), none of the segments its engines mapped.
    assert sorted(p.name for p in own_tmp.iterdir()) == []
    assert set(Path("/tmp").glob("prefixlint-rpc-*")) <= sockets_before
    left = {p.name for p in SHM.iterdir()} - shm_before
    assert not left & set(report.shared_memory), left
    assert set(report.released) <= set(report.shared_memory)
    with capsys.disabled():
        print(f"\nsmoke LlamaForCausalLM: {wall:.0f}s", report.timings)
        for c in report.checks:
            print(f"  {c.code} {c.status} {c.seconds} {c.reason}")
    assert not report.error and not report.diagnostics, report.diagnostics
    status = {c.code: c for c in report.checks}
    for code in ("PFX801", "PFX802", "PFX803", "PFX804"):
        assert status[code].status == "pass", status[code]
    for code in ("PFX805", "PFX806"):
        assert status[code].status == "pass" or (
            status[code].status == "skip" and status[code].reason
        ), status[code]
    if status["PFX805"].status == "pass":
        # The TP 2 engine's CPU communicator segments were seen, and none is left: whether
        # its ranks unlinked them on exit or the run released them depends on how fast the
        # engine stopped, so which of the two removed them is not asserted here (the release
        # itself is tested in test_left_behind.py).
        seen = [n for n in report.shared_memory if "cpushm" in n]
        assert seen, report
        assert not {p.name for p in SHM.iterdir()} & set(seen)
    assert report.diagnostics == []
    assert report.arch == "LlamaForCausalLM"


@engine_run
@pytest.mark.slow
def test_planted_defects_are_reported(tmp_path: Path, capsys):
    defects = ["scale", "leak", "positions", "tp", "compile"]
    models, config = _planted(tmp_path, defects)
    started = time.perf_counter()
    report = smoke(f"{models}:PlantedLlama", device="cpu", config=str(config))
    wall = time.perf_counter() - started
    with capsys.disabled():
        print(f"\nsmoke PlantedLlama: {wall:.0f}s", report.timings)
        for c in report.checks:
            print(f"  {c.code} {c.status} {c.seconds} {c.reason}")
    assert not report.error, report.error
    found = {d.code for d in report.diagnostics}
    status = {c.code: c.status for c in report.checks}
    expected = {"PFX801", "PFX802", "PFX803", "PFX804", "PFX806"}
    if status["PFX805"] != "skip":
        expected.add("PFX805")
    assert expected <= found, (found, status)
    line = _class_line(models, "PlantedLlama")
    for d in report.diagnostics:
        assert d.phase == "smoke" and Path(d.filename).name == "planted_models.py"
        assert d.location.row == line
        assert d.data["position"] >= 0 and d.data["expected"] != d.data["got"]


def test_verdict_never_says_passed_for_checks_that_did_not_run(capsys):
    """Every check errored (the run timed out): "Not verified", exit 2, never "passed"."""
    from prefixlint.smoke import CheckResult
    from prefixlint.smoke.cli import _verdict

    report = SmokeReport("A", error="the smoke run did not finish within 20 s")
    report.checks = [CheckResult(c, "error", report.error) for c in ("PFX801", "PFX802")]
    with pytest.raises(SystemExit) as done:
        _verdict(report, "text")
    out = capsys.readouterr().out
    assert done.value.code == 2
    assert "passed" not in out.lower() and "Not verified: PFX801, PFX802" in out
    report = SmokeReport("A")
    report.checks = [CheckResult("PFX801", "pass"), CheckResult("PFX805", "skip", "one core")]
    with pytest.raises(SystemExit) as done:
        _verdict(report, "text")
    out = capsys.readouterr().out
    assert done.value.code == 0
    assert "Passed: PFX801." in out and "Not verified: PFX805 (one core)." in out


def test_summary_table_names_every_code(capsys):
    """Issue 30 (low): a blocked run's table listed phase 2's codes with an empty name
    column (the names given were only the smoke checks')."""
    from prefixlint.codes import lookup
    from prefixlint.diagnostic import Diagnostic, Position, Severity
    from prefixlint.smoke.cli import _verdict

    report = SmokeReport("A", blocked="phase 2 reports errors (use --force)")
    at = Position(3, 1)
    report.gate = [
        Diagnostic("PFX601", "prefix differs", Severity.ERROR, "/m.py", at, at, phase="introspect")
    ]
    with pytest.raises(SystemExit) as done:
        _verdict(report, "text")
    out = capsys.readouterr().out
    assert done.value.code == 1
    name = lookup("PFX601").name
    assert name and f"1  PFX601  {name}" in out, out


def test_no_reference_for_a_plugin_config_is_said_in_one_line(tmp_path: Path):
    """A plugin's own config class has no transformers model to write the random-weight
    checkpoint: every check is skipped with a reason that names the class, not
    transformers' list of every config class it knows (cut off mid-word at 300)."""
    pytest.importorskip("torch")
    from transformers import AutoConfig, PretrainedConfig

    from prefixlint.smoke.child import Results, _checkpoint

    class SmokePluginConfig(PretrainedConfig):
        model_type = "prefixlint_smoke_plugin_cfg"

    AutoConfig.register(SmokePluginConfig.model_type, SmokePluginConfig, exist_ok=True)
    folder = tmp_path / "config"
    SmokePluginConfig(vocab_size=64).save_pretrained(folder)
    out = tmp_path / "results.jsonl"
    resolved = {"config_folder": folder, "arch": "SmokePluginForCausalLM"}
    job = {"target": "SmokePluginForCausalLM"}
    checks = {"PFX801", "PFX802"}
    assert _checkpoint(job, resolved, tmp_path / "work", Results(str(out)), checks) is None
    events = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(e["code"], e["status"]) for e in events] == [("PFX801", "skip"), ("PFX802", "skip")]
    reason = events[0]["reason"]
    assert "SmokePluginConfig" in reason and "prefixlint_smoke_plugin_cfg" in reason, reason
    assert "should be one of" not in reason, reason


def _smoke_resolve(target: str, site: Path, cwd: Path) -> dict:
    """The smoke child's target and config resolution, in a Python that finds the
    installed plugin (as a user's would), without starting an engine."""
    import subprocess
    import sys

    probe = (
        "import json, sys\n"
        "from prefixlint.smoke.child import resolve\n"
        "r = resolve({'target': sys.argv[1]})\n"
        "print(json.dumps({'arch': r['arch'], 'config_source': r.get('config_source', ''),"
        " 'class': r['cls'].__module__ + ':' + r['cls'].__name__}))\n"
    )
    path = os.pathsep.join([str(Path(__file__).resolve().parents[1]), str(site)])
    done = subprocess.run(
        [sys.executable, "-c", probe, target],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": path},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(VLLM is None, reason="needs vLLM")
@pytest.mark.slow
def test_smoke_resolves_a_plugin_as_phase_2_does(tmp_path: Path):
    """Issue 30: ``smoke ARCH`` by a plugin's registered name was "not an architecture of
    the installed vLLM registry" (the child never loaded vLLM's general plugins), and
    ``module:Class`` ran on a Llama-shaped config, not the plugin's own config class."""
    from tests.toy_plugin import ARCHITECTURE, PACKAGE, can_install, install

    if not can_install():
        pytest.skip("pip and setuptools are needed to install the test plugin")
    site = install(tmp_path / "site")
    for target in (ARCHITECTURE, f"{PACKAGE}.model:{ARCHITECTURE}"):
        resolved = _smoke_resolve(target, site, tmp_path)
        assert resolved["arch"] == ARCHITECTURE, resolved
        assert resolved["class"] == f"{PACKAGE}.model:{ARCHITECTURE}", resolved
        assert resolved["config_source"].startswith(f"synthesised ({PACKAGE}: "), resolved


def _qwen2_project(tmp_path: Path) -> Path:
    """The plugin package, and a pyproject that names its qwen2 config."""
    from transformers import Qwen2Config

    from tests.plugin_qwen import make_plugin

    models = make_plugin(tmp_path)
    Qwen2Config(num_hidden_layers=2).to_json_file(str(tmp_path / "qwen2.json"))
    (tmp_path / "pyproject.toml").write_text(
        '[tool.prefixlint.configs]\nMyQwen2ForCausalLM = "qwen2.json"\n'
    )
    return models


@engine_run
@pytest.mark.slow
def test_plugin_smoke_uses_the_pyproject_config_and_says_so(tmp_path: Path):
    """A Qwen2-derived plugin on a Llama-shaped checkpoint left the qkv bias unloaded
    (noise findings); with its config from [tool.prefixlint.configs] it matches."""
    import subprocess
    import sys

    models = _qwen2_project(tmp_path)
    args = [sys.executable, "-m", "prefixlint", "smoke", f"{models}:MyQwen2ForCausalLM"]
    args += ["--checks", "PFX801,PFX804", "--device", "cpu"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, env=env)
    assert "config: pyproject" in done.stderr and "qwen2.json" in done.stderr, done.stderr
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "Passed: PFX801, PFX804." in done.stdout
    # Without the table entry: the Llama-shaped fallback, said out loud, and refused.
    (tmp_path / "pyproject.toml").unlink()
    done = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, env=env)
    assert "llama-shaped" in done.stderr, done.stderr
    assert "qkv_proj.bias" in done.stdout and "not compared" in done.stdout, done.stdout
    assert done.returncode == 2 and "passed" not in done.stdout.lower()
