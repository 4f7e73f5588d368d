"""Warm equals cold, as data (issue 36): each way a build can fail (an import of a module
the model's own package lacks and a plugin whose register() raises among them) gives the
same findings (code, file, line, severity) and cause words from a worker forked by the
zygote as from a cold worker, at the model's line. Before, ``os._exit`` in ``__init__`` was
PFX604 at that line cold but "the worker process died (exit code 0)" at the class line
warm: the zygote had armed the first caller's trace file, which every forked child then wrote to."""

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
    # a module the model's own package lacks: the model's error, PFX604 at the import
    "own import": ("from .layerz_missing import Linear", "pass", "from .layerz_missing"),
    # a plugin whose register() raises (vLLM's start-up would end there)
    "register raises": ("", "pass", "raise RuntimeError('no registry')"),
    "memory": (
        "",
        "kept = []\n        while True:\n            kept.append(bytearray(50_000_000))",
        "kept.append",
    ),
}
CAUSES = ("crashed", "hung", "died", "exit code", "timed out", "memory", "raised")
# the cases whose model is a package's module: its __init__.py, and a pyproject beside it
PACKAGED = {
    "own import": "",
    "register raises": "def register():\n    raise RuntimeError('no registry')\n",
}
PYPROJECT = """[project]
name = "{name}"
version = "0.1.0"

[project.entry-points."vllm.general_plugins"]
{name} = "{name}:register"
"""


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


def _findings(
    worker, model: Path
) -> tuple[tuple[list[tuple[str, str, int, str]], str | None], list[str]]:
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
    words = sorted(w for d in report.diagnostics for w in CAUSES if w in d.message)
    return (found, report.error), words


@requires_vllm
@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_failing_build_gives_the_same_findings_warm_and_cold(
    case: str, worker, warm_worker, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv(LIMIT_ENV, "1600")  # the memory case's bound (a job reads it)
    top, body, at = CASES[case]
    name = f"crash_{case.replace(' ', '_').replace('.', '_')}"
    model = tmp_path / f"{name}.py"
    if case in PACKAGED:  # a package of its own (a name no other case's worker imported)
        model = tmp_path / name / "model.py"
        model.parent.mkdir()
        (model.parent / "__init__.py").write_text(PACKAGED[case].format(name=name))
        (tmp_path / "pyproject.toml").write_text(PYPROJECT.format(name=name))
    model.write_text(TEMPLATE.format(top=top, body=body))
    failing = model.parent / "__init__.py" if case == "register raises" else model
    line = next(i for i, t in enumerate(failing.read_text().splitlines(), 1) if at in t)
    cold, cold_words = _findings(worker, model)
    forked, forked_words = _findings(warm_worker, model)
    # people read the words: a segfault is "crashed" both ways, not "hung" one way
    assert forked_words == cold_words, case
    assert warm_worker.warm is not None, "the warm build fell back to a cold worker"
    assert forked == cold, case
    found, _ = cold
    if case == "register raises":
        # The same both ways. Known gap (issue 36): a file target is built whatever its
        # package's register() does, so neither way reports the raise (only a target named
        # by its architecture is told "a vLLM plugin failed to register").
        return
    if case == "import error":  # a top-level package not installed here: a gap, at the import
        assert found == [("PFX600", model.name, line, "note")], cold
        return
    # at the model's line: the one that failed (a loop: its test or its body)
    assert any(f == failing.name and row in (line, line - 1) for _, f, row, _ in found), cold
