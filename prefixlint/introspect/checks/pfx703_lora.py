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

    ## Details
    For a model that declares `SupportsLoRA`, an adapter (`--lora`: a PEFT folder or hub
    id, `adapter_config.json` and the safetensors header only; without it, a synthetic
    adapter training every linear layer of the checkpoint the dry-run streamed) is
    matched on the tp=1 meta build with vLLM's own functions, as its LoRA loader and
    manager match it: the expected names (`get_supported_lora_modules` with fused layers
    replaced by their `packed_modules_mapping` parts), each adapter tensor's module
    (`parse_fine_tuned_lora_name` under `hf_to_vllm_mapper.get_rename_mapper()`,
    `lora_skip_prefixes`), and the module the manager gives it to
    (`is_supported_lora_module`, the LoRA layers' `can_replace_layer`). Reported at the
    model's line: a fused layer whose `packed_modules_mapping` lacks a part the adapter
    trains (at the line that built it; a missing entry PFX606 reports is confirmed there
    instead), a module the loader renames in code but LoRA's renames do not reach, a
    target no module of the model is, a module no LoRA layer can replace (its adapter
    weights are dropped silently), an embedding `embedding_modules` does not list, a
    `modules_to_save` classification head the model does not expose. What vLLM refuses
    in the adapter itself (DoRA, a bias, other `modules_to_save`) is a PFX600 note, as
    is a vLLM without these functions. A router's module is a warning, not an error:
    adapters train routers only with `all-linear`. Tower modules vLLM wraps only on
    request are notes.

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
