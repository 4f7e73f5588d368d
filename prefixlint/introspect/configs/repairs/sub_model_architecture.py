"""A sub-config built as a model of its own names no architecture.

Failure: ``ValueError("No model architectures are specified")`` from vLLM 0.32's
``models/registry.py`` (``_normalize_arch``), raised inside
``init_vllm_registered_model(hf_config=self.text_config)``: a checkpoint's language
sub-config names its architecture, a default-constructed one often does not.

Change: the sub-config ``init_vllm_registered_model`` got takes vLLM's registered causal
LM of its model type (its own, else a base config class's: a family's text config).

Limits: only where vLLM registers a ``...ForCausalLM`` for the model type (transformers'
causal-LM mapping or vLLM's architecture table says which).
"""

from __future__ import annotations

import traceback

from prefixlint.introspect.configs.model_types import causal_lm_of
from prefixlint.introspect.configs.repairs.reading import Failure


def repair(failure: Failure) -> str | None:
    error = failure.error
    if "No model architectures are specified" not in str(error):
        return None
    for frame, _ in traceback.walk_tb(error.__traceback__):
        if frame.f_code.co_name != "init_vllm_registered_model":
            continue
        hf = frame.f_locals.get("hf_config")
        # its own model type, else a base config class's (a family's text config)
        types = [getattr(k, "model_type", None) for k in type(hf).__mro__]
        arch = next((a for a in map(causal_lm_of, types) if a), None)
        if hf is None or getattr(hf, "architectures", None) or arch is None:
            return None
        hf.architectures = [arch]
        return "architectures"
    return None
