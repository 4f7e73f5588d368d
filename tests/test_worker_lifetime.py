"""A worker's lifetime and memory (issue 30), with real processes: a command that ends,
however it ends (Ctrl-C, SIGTERM, SIGKILL), ends its workers and leaves none of their temp
files; a build past the memory bound is stopped at its line; the zoo reports each
worker's peak memory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import requires_vllm

CHECKOUT = Path(__file__).resolve().parents[1]
PREFIXLINT = (sys.executable, "-m", "prefixlint")
INTROSPECT = ("--tp", "1", "--pp", "1", "--timeout", "600", "--explore-budget", "0", "--no-dryrun")

HANGS = """
import os
import time
from pathlib import Path

from vllm.model_executor.models.llama import LlamaForCausalLM


class SlowForCausalLM(LlamaForCausalLM):
    def __init__(self, *, vllm_config, prefix: str = ""):
        Path(os.environ["PREFIXLINT_TEST_BUILDING"]).touch()  # the test may signal now
        time.sleep(10_000)
        super().__init__(vllm_config=vllm_config, prefix=prefix)
"""


def _env(tmp_path: Path) -> dict[str, str]:
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    return {
        **os.environ,
        "PYTHONPATH": str(CHECKOUT),
        "NO_COLOR": "1",
        "TMPDIR": str(tmp),  # what is left there was left by prefixlint
        "PREFIXLINT_TEST_BUILDING": str(tmp_path / "building"),
    }


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process, None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[1])


def descendants(root: int) -> set[int]:
    parents = {int(p.name): _stat(int(p.name)) for p in Path("/proc").iterdir() if p.name.isdigit()}
    out: set[int] = set()
    todo = [root]
    while todo:
        pid = todo.pop()
        kids = [c for c, s in parents.items() if s is not None and s[1] == pid and c not in out]
        out.update(kids)
        todo.extend(kids)
    return out


def alive(pids: set[int]) -> set[int]:
    return {p for p in pids if (s := _stat(p)) is not None and s[0] != "Z"}


def wait_until(predicate, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def assert_nothing_left(pids: set[int], tmp: Path) -> None:
    assert wait_until(lambda: not alive(pids), 5.0), f"still running: {alive(pids)}"
    assert wait_until(lambda: not any(tmp.iterdir()), 5.0), sorted(p.name for p in tmp.iterdir())


@requires_vllm
@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes in /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_a_command_that_ends_leaves_no_worker(tmp_path: Path, sig: signal.Signals) -> None:
    (tmp_path / "slow.py").write_text(HANGS)
    env = _env(tmp_path)
    proc = subprocess.Popen(
        [*PREFIXLINT, "introspect", "slow.py", *INTROSPECT],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert wait_until(lambda: (tmp_path / "building").exists(), 300), "never built"
        pids = descendants(proc.pid)
        assert pids  # the worker (and its watchdog)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == (-signal.SIGKILL if sig == signal.SIGKILL else 2), err
    assert_nothing_left(pids, tmp_path / "tmp")


@requires_vllm
@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes in /proc")
def test_a_zoo_stopped_by_sigterm_writes_its_report_and_ends_its_workers(tmp_path: Path) -> None:
    """A cancelled CI job: SIGTERM, then Ctrl-C while it shuts down; the report of what
    finished is written all the same."""
    env = _env(tmp_path)
    archs = ["GPT2LMHeadModel", "LlamaForCausalLM", "OPTForCausalLM", "Qwen2ForCausalLM"]
    args = [*PREFIXLINT, "zoo", "--format", "json", "-o", "zoo.json"]
    args += ["--no-dryrun", "--explore-budget", "0", *(x for a in archs for x in ("--only", a))]
    journal = tmp_path / "zoo.jsonl"
    proc = subprocess.Popen(
        args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert wait_until(
            lambda: journal.exists() and len(journal.read_text().splitlines()) > 1, 300
        )
        pids = descendants(proc.pid)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 2, err
    rows = [json.loads(line)["row"] for line in _lines(journal)[1:]]
    report = json.loads((tmp_path / "zoo.json").read_text())
    assert report["summary"]["interrupted"] and report["summary"]["planned"] == len(archs)
    assert [a["arch"] for a in report["architectures"]] == [r["arch"] for r in rows]
    assert 1 <= len(rows) < len(archs)
    assert_nothing_left(pids, tmp_path / "tmp")


HOG = """
import time

from vllm.model_executor.models.llama import LlamaForCausalLM


class HogForCausalLM(LlamaForCausalLM):
    def __init__(self, *, vllm_config, prefix: str = ""):
        kept = []
        for _ in range(200):
            kept.append(b"x" * (50 * 2**20))  # resident: 50 MB more each time
            time.sleep(0.02)
        super().__init__(vllm_config=vllm_config, prefix=prefix)
"""


@requires_vllm
@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads /proc/self/statm")
def test_a_build_past_the_memory_bound_is_stopped_at_its_line(tmp_path, monkeypatch) -> None:
    from prefixlint.introspect import introspect
    from prefixlint.introspect.process.memory import LIMIT_ENV

    monkeypatch.setenv(LIMIT_ENV, "1600")
    model = tmp_path / "hog.py"
    model.write_text(HOG)
    # the loop that grows: the stack is read while it appends or while it sleeps
    loop = {i for i, t in enumerate(HOG.splitlines(), 1) if "kept.append" in t or "sleep" in t}
    report = introspect(
        f"{model}:HogForCausalLM", tp=(1,), pp=(), dryrun=False, explore_budget=0, timeout=300
    )
    [found] = report.diagnostics
    # a tool limit, not the model's defect: "not verified", at the line it was at
    assert found.code == "PFX600" and found.severity.value == "note", found.message
    assert "worker memory over its bound of 1600 MB" in found.message
    assert Path(found.filename).name == "hog.py" and found.location.row in loop, found


@requires_vllm
@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc/PID/status")
def test_the_zoo_reports_each_workers_peak_memory() -> None:
    from prefixlint.introspect.zoo.run import run_zoo

    summary = run_zoo(
        only=["GPT2LMHeadModel", "OPTForCausalLM"], progress=False, dryrun=False, explore_budget=0
    )
    assert [r.status for r in summary.rows] == ["built", "built"]
    [peak] = json.loads(summary.to_json_text())["summary"]["worker_peak_rss_mb"]  # one worker
    assert 100 < peak < 4096, peak
