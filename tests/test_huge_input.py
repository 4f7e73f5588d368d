"""Huge input: a file over ``max-file-size`` is a "not checked" note, never a minute of
parsing and a gigabyte of memory; a slow file is named on stderr while it runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from prefixlint.cli import main
from prefixlint.static import runner
from tests.conftest import VLLM, requires_vllm

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parents[1]


def generated(size: int) -> str:
    """A generated module of at least ``size`` bytes: the bad model's class, numbered."""
    model = (FIXTURES / "bad_model.py").read_text()
    parts, total, i = [], 0, 0
    while total < size:
        part = model.replace("class Head(", f"class Head{i}(")
        parts.append(part)
        total += len(part)
        i += 1
    return "\n".join(parts)


def check(folder: Path, *args: str):
    old = Path.cwd()
    os.chdir(folder)
    try:
        return CliRunner().invoke(main, ["check", "--no-cache", "--format", "json", *args])
    finally:
        os.chdir(old)


def test_file_over_the_default_limit_is_a_note_not_a_parse(tmp_path: Path) -> None:
    (tmp_path / "huge.py").write_text(generated(5_000_000))
    (tmp_path / "model.py").write_text(generated(1))
    result = check(tmp_path, ".")
    found = json.loads(result.stdout)
    huge = [f for f in found if f["filename"] == "huge.py"]
    assert len(huge) == 1, huge[:3]
    note = huge[0]
    assert note["code"] == "PFX001" and note["severity"] == "note"
    assert "not checked: file is 5.0" in note["message"]
    assert "over the limit of 1 MB" in note["message"]
    assert "max-file-size" in note["message"]
    # The other file is still checked, and only its finding fails the run.
    assert [f["code"] for f in found if f["filename"] == "model.py"] == ["PFX301"]
    assert result.exit_code == 1


def test_a_note_alone_does_not_fail_the_run_unless_strict(tmp_path: Path) -> None:
    (tmp_path / "huge.py").write_text("x = 1\n" * 200_000)  # 1.2 MB of data
    assert check(tmp_path, ".").exit_code == 0
    assert check(tmp_path, "--strict", ".").exit_code == 1
    text = CliRunner().invoke(main, ["check", "--no-cache", str(tmp_path)]).output
    assert "passed" not in text.lower() and "Not verified: 1" in text


def test_max_file_size_in_pyproject(tmp_path: Path) -> None:
    """The limit is the pyproject's: a small one refuses a small file, a larger one checks
    it as usual (findings, no note)."""
    (tmp_path / "model.py").write_text(generated(3_000))
    (tmp_path / "pyproject.toml").write_text("[tool.prefixlint]\nmax-file-size = 0.001\n")
    found = json.loads(check(tmp_path, ".").stdout)
    assert [(f["code"], f["severity"]) for f in found] == [("PFX001", "note")]
    assert "over the limit of 0.001 MB" in found[0]["message"]
    assert str(tmp_path / "pyproject.toml") in found[0]["message"]

    (tmp_path / "pyproject.toml").write_text("[tool.prefixlint]\nmax-file-size = 0.01\n")
    found = json.loads(check(tmp_path, ".").stdout)
    assert found and {f["code"] for f in found} == {"PFX301"}


@pytest.mark.parametrize("value", ['"big"', "0", "-1", "true"])
def test_bad_max_file_size_is_a_usage_error(tmp_path: Path, value: str) -> None:
    (tmp_path / "model.py").write_text("x = 1\n")
    (tmp_path / "pyproject.toml").write_text(f"[tool.prefixlint]\nmax-file-size = {value}\n")
    result = check(tmp_path, ".")
    assert result.exit_code == 2
    assert "max-file-size must be a positive number of MB" in result.output


def test_slow_file_is_named_on_stderr(tmp_path: Path, monkeypatch) -> None:
    """Below the threshold nothing is said; above it, the file, its size and its time."""
    (tmp_path / "model.py").write_text(generated(3_000))
    quiet = check(tmp_path, ".")
    assert "slow" not in quiet.stderr and "took" not in quiet.stderr
    monkeypatch.setattr(runner, "SLOW_FILE_SECONDS", 0.0)
    loud = check(tmp_path, ".")
    assert "prefixlint: model.py (0.00 MB) took" in loud.stderr
    assert json.loads(loud.stdout)  # stdout stays the JSON it was


@pytest.mark.slow
@requires_vllm
def test_really_slow_file_is_named_while_it_runs(tmp_path: Path) -> None:
    """A real slow file (2.5 MB: 120 copies of the installed llama.py, its classes numbered,
    under a raised limit): its name is on stderr while it is checked and when it is done;
    stdout stays JSON."""
    import re

    assert VLLM is not None
    llama = (VLLM / "model_executor" / "models" / "llama.py").read_text()
    names = re.findall(r"^class (\w+)", llama, re.M)
    pattern = re.compile(rf"\b({'|'.join(names)})\b")
    copies = [pattern.sub(lambda m, i=i: f"{m[1]}{i}", llama) for i in range(120)]
    (tmp_path / "big.py").write_text("\n".join(copies))
    (tmp_path / "pyproject.toml").write_text("[tool.prefixlint]\nmax-file-size = 3\n")
    done = subprocess.run(
        [sys.executable, "-m", "prefixlint", "check", "--no-cache", "--format", "json", "."],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=600,
    )
    assert done.returncode in (0, 1), done.stderr
    json.loads(done.stdout)
    size = (tmp_path / "big.py").stat().st_size / 1_000_000
    assert f"prefixlint: big.py ({size:.2f} MB)" in done.stderr
    assert "is slow: still checking it after 5 s" in done.stderr
    assert "took" in done.stderr
