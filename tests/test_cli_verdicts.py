"""Verdicts that say what happened: nothing checked is not "passed", a count matches
the list under it, a target that is not a model is a one-line error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from prefixlint.cli import main
from prefixlint.diagnostic import Diagnostic, Position, Severity
from tests.conftest import requires_vllm

CHECKOUT = Path(__file__).resolve().parents[1]


def test_nothing_to_check_is_not_passed(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "README.md").write_text("no Python here\n")
    result = CliRunner().invoke(main, ["check", "--no-cache", str(empty)])
    assert result.exit_code == 0, result.output  # as ruff: a warning, not a failure
    assert "passed" not in result.output.lower()
    assert "Nothing checked: no Python files found" in result.output
    assert "nothing was checked" in result.output  # the warning (stderr)
    strict = CliRunner().invoke(main, ["check", "--no-cache", "--strict", str(empty)])
    assert strict.exit_code == 2
    as_json = CliRunner().invoke(main, ["check", "--no-cache", "--format", "json", str(empty)])
    assert json.loads(as_json.stdout) == []  # the stdout report stays parseable


def test_smoke_counts_what_it_lists(capsys) -> None:
    from prefixlint.smoke import SmokeReport
    from prefixlint.smoke.cli import _table

    def diag(code: str, severity: Severity, row: int) -> Diagnostic:
        pos = Position(row, 1)
        return Diagnostic(code, f"{code} here", severity, "m.py", pos, pos, phase="introspect")

    report = SmokeReport("M")
    report.gate = [diag("PFX600", Severity.NOTE, 4)]
    _table(report)
    err = capsys.readouterr().err
    assert "finding" not in err  # a note is not a finding
    assert "phase 2: 1 not verified (PFX600)\n  m.py:4: PFX600 PFX600 here" in err
    report.gate += [diag("PFX601", Severity.WARNING, 9), diag("PFX603", Severity.WARNING, 12)]
    _table(report)
    lines = capsys.readouterr().err.splitlines()
    at = lines.index("phase 2: 2 finding(s)")
    assert lines[at + 1 : at + 3] == [
        "  m.py:9: PFX601 PFX601 here",
        "  m.py:12: PFX603 PFX603 here",
    ]


@requires_vllm
@pytest.mark.slow
def test_introspect_of_a_class_that_is_not_a_model_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "helpers.py").write_text("class NotAModel:\n    pass\n")
    done = subprocess.run(
        [sys.executable, "-m", "prefixlint", "introspect", "helpers.py:NotAModel"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(CHECKOUT)},
    )
    assert done.returncode == 2, done.stderr
    [line] = [x for x in done.stderr.splitlines() if x.startswith("Error:")]
    assert "NotAModel is not a model class" in line, done.stderr
    assert "model_cls" not in done.stderr and "Traceback" not in done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "prefixlint", "introspect", "helpers.py:Missing"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(CHECKOUT)},
    )
    assert done.returncode == 2 and "has no 'Missing'" in done.stderr, done.stderr


@requires_vllm
def test_zoo_progress_is_one_line_per_architecture_in_a_log(tmp_path: Path) -> None:
    """stderr that is not a terminal (a CI log, a pipe) gets one progress line per
    architecture, never carriage returns that make the whole run one long line."""
    env = {**os.environ, "PREFIXLINT_WARM_WORKER": "0"}
    args = ["zoo", "--no-dryrun", "--explore-budget", "0", "-o", str(tmp_path / "zoo.txt")]
    args += ["--only", "LlamaForCausalLM", "--only", "Qwen2ForCausalLM"]
    done = subprocess.run(
        [sys.executable, "-m", "prefixlint", *args, "--journal", str(tmp_path / "zoo.jsonl")],
        capture_output=True,  # bytes: text mode would turn the carriage returns into lines
        cwd=tmp_path,
        env=env,
        timeout=600,
    )
    err = done.stderr.decode()
    assert "\r" not in err, err
    lines = err.split("\n")
    assert any(line.startswith("[1/2] ") for line in lines), err
    assert any(line.startswith("[2/2] ") for line in lines), err


def test_introspect_writes_its_report_to_output(tmp_path: Path) -> None:
    """``introspect -o FILE``, as ``check`` and ``zoo`` take it: the report goes to FILE."""
    (tmp_path / "broken.py").write_text("class M(:\n")
    out = tmp_path / "report.json"
    old = Path.cwd()
    os.chdir(tmp_path)
    try:
        result = CliRunner().invoke(
            main, ["introspect", "broken.py", "--format", "json", "-o", str(out)]
        )
    finally:
        os.chdir(old)
    assert result.exit_code == 1, result.output
    assert [d["code"] for d in json.loads(out.read_text())] == ["PFX001"]
    bad = CliRunner().invoke(main, ["introspect", "broken.py", "-o", str(tmp_path)])
    assert bad.exit_code == 2 and "is a folder" in bad.output


def test_a_malformed_config_is_a_usage_error(tmp_path: Path) -> None:
    """Issue 40: ``--config`` that is not JSON is the user's input error: exit 2 with the
    parse error (it was a note suggesting `--config`, exit 0), before any build."""
    (tmp_path / "config.json").write_text('{"hidden_size": 64,, "num_hidden_layers": 2}')
    (tmp_path / "list.json").write_text("[1, 2]")
    for given, said in [
        (tmp_path / "config.json", "Expecting property name"),
        (tmp_path, "Expecting property name"),  # a folder holding it
        (tmp_path / "list.json", "not a JSON object"),
        (tmp_path / "missing.json", "missing.json"),
    ]:
        result = CliRunner().invoke(
            main, ["introspect", "LlamaForCausalLM", "--config", str(given), "--no-dryrun"]
        )
        assert result.exit_code == 2, (given, result.output)
        assert said in result.output and "Traceback" not in result.output, result.output
