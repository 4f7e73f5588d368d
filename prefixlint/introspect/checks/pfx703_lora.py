"""PFX703: the LoRA dry-run: an adapter module vLLM's LoRA loader refuses or drops."""

from __future__ import annotations

from typing import ClassVar

from prefixlint.introspect.checks.base import Case, Check

_PACKED = '        "qkv_proj": ["q_proj", "k_proj", "v_proj"],'


class LoraTargets(Check):
    """## What it does
    For a model that declares `SupportsLoRA`, matches a LoRA adapter (`--lora`, or a
    synthetic one training every linear layer of the streamed checkpoint) on the tp=1
    meta build as vLLM's LoRA loader and manager match it, with vLLM's own functions
    (`get_supported_lora_modules`, `process_packed_modules_mapping`,
    `parse_fine_tuned_lora_name`, `is_supported_lora_module`, `can_replace_layer`). In
    `dryrun/lora.py`, reported at the line of the model that built the layer, renamed the
    checkpoint layer, or declares the class.

    ## Why is this bad?
    vLLM finds an adapter's targets by module name: a target the model cannot map makes
    `--enable-lora` refuse the adapter at load, on a GPU, and a module it maps to a layer
    no LoRA layer wraps has its adapter weights dropped without an error.

    ## Example
    `packed_modules_mapping = {"qkv_proj": ["q_proj", "k_proj"], ...}`: an adapter that
    trains `v_proj` is refused.

    ## Fix
    Give the fused layer every part its checkpoint holds in `packed_modules_mapping`, put
    renames in `hf_to_vllm_mapper` (LoRA reads its renames), list embeddings in
    `embedding_modules`.
    """

    code = "PFX703"
    examples: ClassVar[tuple[Case, ...]] = (
        Case(
            "LlamaForCausalLM",
            _PACKED,
            '        "qkv_proj": ["q_proj", "k_proj"],',
            "self.qkv_proj = QKVParallelLinear(",
            "warning",  # the synthetic adapter's: a warning; with `--lora`, an error
            at_cls="LlamaAttention",
        ),
    )
