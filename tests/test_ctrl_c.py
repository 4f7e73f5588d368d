"""Ctrl-C ends a first run at any moment (issue 36): within 3 s, exit 2 ("interrupted"), no
verdict printed as if the run were complete, and nothing of its own left running: the
static phase's process pool, phase 2's client and the worker it forked or started. (The
warm process a first run started for the next call is not the run's: it stays, listed by
``prefixlint warm status``, and the test stops it.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from prefixlint.warm import client
from tests.conftest import requires_vllm

CHECKOUT = Path(__file__).resolve().parents[1]
TOY = """from vllm.model_executor.models.llama import LlamaForCausalLM


class ToyForCausalLM(LlamaForCausalLM):
    def __init__(self, *, vllm_config, prefix: str = ""):
        super().__init__(vllm_config=vllm_config, prefix=prefix)
"""
VERDICTS = ("Found ", "All checks passed")


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def _interrupt(
    cwd: Path,
    args: list[str],
    at: float,
    env: dict[str, str],
    module: str = "prefixlint",
    ready: Callable[[], bool] | None = None,
) -> dict:
    """Run ``python -m MODULE ARGS`` in its own process group (Ctrl-C on a terminal reaches the
    group), SIGINT it at ``at`` s (with ``ready``: as soon as it holds, ``at`` at most); how
    it ended."""
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        # a shell's background job ignores SIGINT, and its children inherit that
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    end = time.monotonic() + at
    while ready is not None and not ready() and proc.poll() is None and time.monotonic() < end:
        time.sleep(0.05)
    try:
        proc.wait(timeout=max(0.0, end - time.monotonic()) if ready is None else 0.01)
        pytest.fail(f"finished before the interrupt at {at} s: {proc.returncode}")
    except subprocess.TimeoutExpired:
        pass
    os.killpg(proc.pid, signal.SIGINT)
    sent = time.monotonic()
    try:
        proc.wait(timeout=30)
    finally:
        took = time.monotonic() - sent
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    out, err = proc.communicate(timeout=10)
    end = time.monotonic() + 3
    while _group_alive(proc.pid) and time.monotonic() < end:
        time.sleep(0.05)
    return {"code": proc.returncode, "took": took, "out": out, "err": err, "left": proc.pid}


def _assert_stopped(done: dict, at: float) -> None:
    assert done["code"] == 2, (at, done["err"][-2000:])
    assert done["took"] < 3, (at, done["took"])
    assert "interrupted" in done["err"], done["err"][-2000:]
    assert not any(v in done["out"] for v in VERDICTS), done["out"]
    assert not _group_alive(done["left"]), f"its process group outlived it (at {at} s)"


@requires_vllm
@pytest.mark.slow
def test_ctrl_c_two_seconds_into_a_first_static_check_of_vllm_stops_its_pool(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "PYTHONPATH": str(CHECKOUT), client.WARM_ENV: "1"}
    env[client.DIR_ENV] = str(tmp_path / "warm")
    done = _interrupt(tmp_path, ["check", "--installed-vllm"], 2.0, env)
    _assert_stopped(done, 2.0)
    assert not (tmp_path / "warm").exists()  # an interrupted run starts no warm process


@requires_vllm
@pytest.mark.slow
@pytest.mark.parametrize("at", [1.0, 5.0])
def test_ctrl_c_into_a_first_check_introspect_in_a_new_folder(tmp_path: Path, at: float) -> None:
    """At 1 s it is importing; at 5 s phase 2's zygote is importing torch and vLLM (or the
    build runs, on a fast machine)."""
    (tmp_path / "toy.py").write_text(TOY)
    warm = tmp_path / "warm"
    env = {**os.environ, "PYTHONPATH": str(CHECKOUT), client.WARM_ENV: "1"}
    env[client.DIR_ENV] = str(warm)
    args = ["check", "--introspect", "--tp", "1", "--pp", "2", "--no-dryrun", "toy.py"]
    try:
        done = _interrupt(tmp_path, args, at, env)
    finally:
        client.stop(warm)
    _assert_stopped(done, at)
