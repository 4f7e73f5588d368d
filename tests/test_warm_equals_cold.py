"""Warm equals cold, as data (issue 36): each way a build can fail gives the same findings
(code, file, line, severity) from a worker forked by the zygote as from a cold worker, at
the model's line. Before, ``os._exit`` in ``__init__`` was PFX604 at that line cold but
"the worker process died (exit code 0)" at the class line warm: the zygote had armed the
first caller's trace file, which every forked child then wrote to."""

from __future__ import annotations

from pathlib import Path

import pytest

from prefixlint.introspect.process import warm
from prefixlint.introspect.process.memory import LIMIT_ENV
from tests.conftest import requires_vllm
from tests.test_worker_lifetime import alive, wait_until

TEMPLATE = """import os
import signal
import sys
import time
{top}
from vllm.model_executor.models.llama import LlamaForCausalLM


class CrashForCausalLM(LlamaForCausalLM):
    def __init__(self, *, vllm_config, prefix: str = ""):
        {body}
        super().__init__(vllm_config=vllm_config, prefix=prefix)
"""
# name -> (a module-level line, the first line of __init__, the line the finding is at)
CASES = {
    "sys.exit": ("", "sys.exit(3)", "sys.exit(3)"),
    "os._exit": ("", "os._exit(0)", "os._exit(0)"),
    "signal": ("", "os.kill(os.getpid(), signal.SIGSEGV)", "os.kill("),
    "hang": ("", "time.sleep(10_000)", "time.sleep(10_000)"),
    "raise": ("", "raise RuntimeError('boom')", "raise RuntimeError"),
    "import error": ("import not_a_module_of_prefixlint", "pass", "import not_a_module"),
    "memory": (
        "",
        "kept = []\n        while True:\n            kept.append(bytearray(50_000_000))",
        "kept.append",
    ),
}


@pytest.fixture(scope="module")
def warm_worker(tmp_path_factory):
    from prefixlint.introspect.process.client import Worker

    folder = tmp_path_factory.mktemp("warm")
    worker = Worker(warm=folder)
    yield worker
    worker.close()
    zygotes = {int(p.read_text().split()[0]) for p in folder.glob("*.lock") if p.read_text()}
    warm.stop(folder)
    assert wait_until(lambda: not alive(zygotes), 10)


def _findings(worker, model: Path) -> tuple[list[tuple[str, str, int, str]], str | None]:
    from prefixlint.introspect import introspect

    report = introspect(
        f"{model}:CrashForCausalLM",
        tp=(1,),
        pp=(),
        dryrun=False,
        explore_budget=0,
        timeout=8,
        worker=worker,
    )
    found = sorted(
        (d.code, Path(d.filename).name, d.location.row, d.severity.value)
        for d in report.diagnostics
    )
    return found, report.error


@requires_vllm
@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_failing_build_gives_the_same_findings_warm_and_cold(
    case: str, worker, warm_worker, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv(LIMIT_ENV, "1600")  # the memory case's bound (a job reads it)
    top, body, at = CASES[case]
    model = tmp_path / f"crash_{case.replace(' ', '_').replace('.', '_')}.py"
    model.write_text(TEMPLATE.format(top=top, body=body))
    line = next(i for i, t in enumerate(model.read_text().splitlines(), 1) if at in t)
    cold = _findings(worker, model)
    forked = _findings(warm_worker, model)
    assert warm_worker.warm is not None, "the warm build fell back to a cold worker"
    assert forked == cold, case
    found, error = cold
    if case == "import error":  # the target cannot be loaded: the run's error names why
        assert not found and error and "not_a_module_of_prefixlint" in error, cold
        return
    # at the model's line: the one that failed (a loop: its test or its body)
    assert any(f == model.name and row in (line, line - 1) for _, f, row, _ in found), cold
