"""Process environment for building vLLM models without a GPU or a network.

Must run before vLLM (and its ``envs`` module) is imported: ``prepare()`` is the first
thing every entry point of this package calls.
"""

from __future__ import annotations

import os

_DEFAULTS = {
    # Never reach the hub: configs come from disk or are synthesised.
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    # Skip probing TPU/CUDA/ROCm/XPU plugins: straight to vLLM's CpuPlatform. The CUDA
    # wheel honours it too, so the same path serves vllm 0.33 on a CPU machine.
    "VLLM_TARGET_DEVICE": "cpu",
    "VLLM_LOGGING_LEVEL": "ERROR",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def prepare() -> None:
    for key, value in _DEFAULTS.items():
        os.environ.setdefault(key, value)
