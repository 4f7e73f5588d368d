"""Nothing left behind, on every exit path: phase 2's temp folders (a worker killed on
its timeout too), an interrupted zoo (which keeps what it finished and resumes), smoke's
shared-memory segments; and an engine failure in the model's code is a finding."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from multiprocessing import shared_memory
from pathlib import Path

import pytest

from prefixlint.smoke.blame import blame, model_files, tracebacks
from prefixlint.smoke.shm import SHM, mapped_by_group, release
from tests.conftest import requires_vllm

CHECKOUT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"


def _env(tmp: Path) -> dict[str, str]:
    """A temp root of the test's own: what is left there was left by prefixlint."""
    tmp.mkdir(exist_ok=True)
    return {**os.environ, "PYTHONPATH": str(CHECKOUT), "NO_COLOR": "1", "TMPDIR": str(tmp)}


def _prefixlint(*args: str, cwd: Path, env: dict[str, str], timeout: float = 600):
    return subprocess.run(
        [sys.executable, "-m", "prefixlint", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@requires_vllm
@pytest.mark.slow
def test_phase_2_leaves_no_temp_folder_even_when_a_build_is_killed(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    env = _env(tmp)
    (tmp_path / "slow.py").write_text((FIXTURES / "introspect" / "hangs.py").read_text())
    done = _prefixlint(
        "check", "--no-cache", "--introspect", "--tp", "1", "--timeout", "30", "--format",
        "json", "slow.py", cwd=tmp_path, env=env,
    )  # fmt: skip
    assert [f["code"] for f in json.loads(done.stdout)] == ["PFX604"], done.stdout
    assert sorted(p.name for p in tmp.iterdir()) == []  # the killed worker's config folder too
    done = _prefixlint(
        "introspect", "LlamaForCausalLM", "--tp", "1,2", "--pp", "2", "--explore-budget", "1",
        cwd=tmp_path, env=env,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr
    assert sorted(p.name for p in tmp.iterdir()) == []


# Enough of them that the rest cannot finish between the first row and the interrupt (a
# build takes well under a second once the worker has imported vLLM).
ZOO = [
    "GPT2LMHeadModel",
    "LlamaForCausalLM",
    "OPTForCausalLM",
    "Qwen2ForCausalLM",
    "MistralForCausalLM",
    "Qwen3ForCausalLM",
    "GemmaForCausalLM",
    "Phi3ForCausalLM",
]


def _journal_rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line)["row"] for line in path.read_text().splitlines()[1:] if line]


@requires_vllm
@pytest.mark.slow
def test_an_interrupted_zoo_keeps_what_it_did_and_resumes(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    env = _env(tmp)
    args = [sys.executable, "-m", "prefixlint", "zoo", "--format", "json", "-o", "zoo.json"]
    args += ["--no-dryrun", "--explore-budget", "0", *(x for a in ZOO for x in ("--only", a))]
    journal = tmp_path / "zoo.jsonl"
    proc = subprocess.Popen(
        args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 600
    while not _journal_rows(journal) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err
    done = _journal_rows(journal)
    assert 1 <= len(done) < len(ZOO), err  # what finished before the interrupt, kept
    assert f"interrupted after {len(done)} of {len(ZOO)} architectures" in err
    assert f"--resume {journal.name}" in err
    report = json.loads((tmp_path / "zoo.json").read_text())
    assert report["summary"]["interrupted"] and report["summary"]["planned"] == len(ZOO)
    assert [a["arch"] for a in report["architectures"]] == [r["arch"] for r in done]
    assert sorted(p.name for p in tmp.iterdir()) == []  # the killed build's folders too
    assert all(r["status"] != "failed" for r in done)  # the interrupt is not a crash

    resumed = subprocess.run(
        [*args, "--resume", journal.name], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert resumed.returncode in (0, 1), resumed.stderr
    assert f"[{len(ZOO) - len(done)}/{len(ZOO) - len(done)}]" in resumed.stderr  # the rest only
    rows = _journal_rows(journal)
    assert sorted(r["arch"] for r in rows) == sorted(ZOO)
    assert rows[: len(done)] == done  # kept as they were
    report = json.loads((tmp_path / "zoo.json").read_text())
    assert not report["summary"]["interrupted"]
    assert sorted(a["arch"] for a in report["architectures"]) == sorted(ZOO)
    # Resuming with other options would mix results: refused.
    other = subprocess.run(
        [*args, "--tp", "2", "--resume", journal.name], cwd=tmp_path, env=env,
        capture_output=True, text=True,
    )  # fmt: skip
    assert other.returncode == 2 and "other options" in other.stderr, other.stderr


def test_shared_memory_mapped_by_the_run_is_found_and_released() -> None:
    segment = shared_memory.SharedMemory(create=True, size=4096)
    try:
        found = mapped_by_group(os.getpgrp())
        assert segment.name in found
        assert segment.name not in mapped_by_group(-1)  # no such group: nothing found
        assert release([segment.name]) == [segment.name]
        assert not (SHM / segment.name).exists()
        assert release([segment.name, "../etc", ""]) == []  # gone, or not a segment name
    finally:
        segment.close()
        with contextlib.suppress(FileNotFoundError):
            segment.unlink()


def _raise_in(model: Path) -> str:
    """A real traceback through ``model`` as vLLM's engine process logs it."""
    model.write_text("def load_weights(weights):\n    raise TypeError('bad tensor')\n")
    scope: dict = {}
    exec(compile(model.read_text(), str(model), "exec"), scope)
    try:
        scope["load_weights"]([])
    except TypeError:
        text = traceback.format_exc()
    prefix = "(Worker pid=7) ERROR 12-01 20:49:54 [multiproc_executor.py:953] "
    return "startup\n" + "".join(prefix + line + "\n" for line in text.splitlines())


def test_an_engine_traceback_is_blamed_on_the_models_innermost_frame(tmp_path: Path) -> None:
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    log = _raise_in(plugin / "layers.py")
    [(frames, exception)] = tracebacks(log)
    assert exception == "TypeError: bad tensor" and frames[-1][1:] == (2, "load_weights")
    found = blame([log], model_files(str(plugin / "model.py"), None))
    assert found is not None and (Path(found.file).name, found.line) == ("layers.py", 2)
    # A model inside vLLM: only its own file is the model's.
    vllm = tmp_path / "vllm"
    (vllm / "models").mkdir(parents=True)
    log = _raise_in(vllm / "models" / "utils.py")
    assert blame([log], model_files(str(vllm / "models" / "llama.py"), str(vllm))) is None


@requires_vllm
@pytest.mark.slow
def test_an_engine_failure_in_the_models_code_is_a_finding_at_its_line(tmp_path: Path) -> None:
    """The weight loader raises on real tensors: PFX604 at that line, the checks not run
    (skipped, with where), exit 1; not "not verified" with exit 2."""
    from prefixlint.smoke import smoke
    from prefixlint.smoke.cli import _verdict

    models = tmp_path / "planted_models.py"
    models.write_text((FIXTURES / "smoke" / "planted_models.py").read_text())
    line = next(
        i for i, text in enumerate(models.read_text().splitlines(), 1) if "# the defect" in text
    )
    report = smoke(f"{models}:LoaderTypeErrorLlama", device="cpu", checks=["PFX801", "PFX804"])
    assert not report.error, report.error
    [finding] = report.diagnostics
    assert (finding.code, Path(finding.filename).name, finding.location.row) == (
        "PFX604",
        "planted_models.py",
        line,
    )
    assert "TypeError: cannot stack" in finding.message and finding.phase == "smoke"
    assert [(c.status, f"planted_models.py:{line}" in c.reason) for c in report.checks] == [
        ("skip", True),
        ("skip", True),
    ]
    with pytest.raises(SystemExit) as verdict:
        _verdict(report, "json")
    assert verdict.value.code == 1
