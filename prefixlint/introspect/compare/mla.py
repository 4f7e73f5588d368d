"""Multi-head latent attention (MLA) for the comparison: vLLM's ``MLAAttention`` layer
runs a reference causal attention over one sequence instead of its MLA backend.

DeepSeek V2/V3 and their kin hand the layer what MLA's prefill computes from (vLLM's
``MultiHeadLatentAttentionWrapper.forward``, 0.32): the query per head, already rotated in
its last ``qk_rope_head_dim`` features; the normed compressed KV (``kv_lora_rank`` wide);
one rotated ``k_pe`` shared by all heads; and ``kv_b_proj``, which expands the compressed
KV into each head's ``k_nope`` and ``v``. Everything the model author can get wrong is in
those and in the layer's ``scale``: the reference expands the latent with the model's own
``kv_b_proj``, appends ``k_pe`` to every head's key and runs ordinary softmax attention
(``attention.reference_forward``), as the backend's dense prefill does
(``MLACommonImpl.forward_mha``). The absorbed decode path is the same product reordered."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import torch

from prefixlint.introspect import vllm_api
from prefixlint.introspect.compare.attention import Unsupported, reference_forward, replaced
from prefixlint.introspect.compare.reference import kv_heads_raised


def runs(layer: Any) -> bool:
    """An MLA layer this reference stands in for: vLLM's ``MLAAttention`` itself (not a
    subclass with its own ``forward``), dense (a sparse layer attends to an indexer's
    top-k only), without query replication across decode-context-parallel ranks."""
    cls = vllm_api.mla_attention_class()
    if cls is None or not isinstance(layer, cls) or type(layer).forward is not cls.forward:
        return False
    return not getattr(layer, "use_sparse", False) and not getattr(layer, "dcp_q_replicate", False)


def reference_config(hf_config: Any) -> Any:
    """The config transformers' reference is built for: an MLA config (one with a
    ``kv_lora_rank``) gets as many KV heads as query heads, as every MLA checkpoint has
    (DeepSeek-V2/V3: 128 and 128). MLA expands its latent to every head: vLLM's MLA
    (``MLAAttention``, MiniCPM3's plain attention over expanded heads) never reads
    ``num_key_value_heads``, while transformers' MLA classes repeat their per-head keys by
    ``num_attention_heads // num_key_value_heads`` and fail on a synthesised config whose
    shrunk KV heads (8) are not its heads (16). Unchanged otherwise."""

    def latent(config: Any) -> bool:
        heads = getattr(config, "num_attention_heads", None)
        rank = getattr(config, "kv_lora_rank", None)
        kv_heads = getattr(config, "num_key_value_heads", None)
        ranked = isinstance(rank, int) and rank > 0 and isinstance(heads, int)
        return ranked and kv_heads not in (None, heads)

    return kv_heads_raised(hf_config, latent)


def _expanded(layer: Any, kv_c_normed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(k_nope, v) per head, ``[tokens, heads, dim]``, from the model's ``kv_b_proj``."""
    weight = getattr(layer.kv_b_proj, "weight", None)
    if isinstance(weight, torch.Tensor) and weight.numel() == 0:  # packed away (AMX)
        raise Unsupported("MLA's kv_b_proj weight was packed by the CPU backend")
    out = layer.kv_b_proj(kv_c_normed)
    kv = out[0] if isinstance(out, tuple) else out
    nope, v_dim = layer.qk_nope_head_dim, layer.v_head_dim
    kv = kv.reshape(kv_c_normed.shape[0], layer.num_heads, nope + v_dim)
    k_nope, v = kv.split([nope, v_dim], dim=-1)
    return k_nope, v


def mla_forward(
    layer: Any,
    q: torch.Tensor,
    kv_c_normed: torch.Tensor,
    k_pe: torch.Tensor,
    output_shape: Any = None,
    q_dcp_replicated: Any = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """``sinks``: a per-head learnable sink the layer's backend would apply (its impl's,
    else the one its enclosing attention holds: ``learnable_sinks``)."""
    n, heads = q.shape[0], layer.num_heads
    rope = layer.qk_rope_head_dim
    k_nope, v = _expanded(layer, kv_c_normed)
    k_pe = k_pe.reshape(n, 1, rope).expand(n, heads, rope)
    key = torch.cat([k_nope, k_pe.to(k_nope.dtype)], dim=-1)
    head_size = layer.qk_nope_head_dim + rope
    impl = getattr(layer, "impl", None)
    own = getattr(impl, "sinks", None)
    # ordinary multi-head attention once the latent is expanded: every head its own K/V
    view = SimpleNamespace(
        num_heads=heads,
        num_kv_heads=heads,
        head_size=head_size,
        head_size_v=layer.v_head_dim,
        impl=SimpleNamespace(
            scale=float(getattr(impl, "scale", layer.scale)),
            sinks=own if isinstance(own, torch.Tensor) else sinks,
        ),
        attn_type="decoder",
        sliding_window=getattr(layer, "sliding_window", None),
    )
    query = q.reshape(n, heads * head_size)
    out = reference_forward(view, query, key.reshape(n, -1), v.reshape(n, -1))
    return out.reshape(output_shape) if output_shape is not None else out


@contextlib.contextmanager
def reference_mla(sinks: dict[int, torch.Tensor] | None = None) -> Iterator[None]:
    """vLLM's ``MLAAttention.forward`` is the reference above while the comparison runs
    (``sinks``: by ``id`` of an MLA layer, the sink its backend applies on a GPU: see
    ``learnable_sinks``); nothing when this vLLM has no MLA layer."""
    found = sinks or {}

    def forward(layer: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        return mla_forward(layer, *args, sinks=found.get(id(layer)), **kwargs)

    with replaced(vllm_api.mla_attention_class(), "forward", forward):
        yield


def enable_sinks(model: torch.nn.Module) -> list[str]:
    """The learnable attention sinks vLLM built disabled on this machine, made as a GPU
    builds them: HY V4's attention (``vllm/models/hy_v4/nvidia/attention.py``) hands its
    ``learnable_sink_param`` to the MLA backend when one of the platform consumes sinks,
    in float32 ("The kernels require fp32 sinks"); where none does (the CPU) it keeps the
    parameter in bfloat16 and never passes it ("the disabled path keeps the checkpoint
    dtype since the value is never consumed"). Here the parameter becomes float32 again,
    before the load, so that the checkpoint's sink is loaded as on a GPU, and the
    reference MLA applies it (``learnable_sinks``). Returns the layers whose sink no MLA
    layer this reference runs would apply (a gap, never the model's)."""
    left = []
    for name, module in model.named_modules():
        param = getattr(module, "learnable_sink_param", None)
        if getattr(module, "learnable_sink", False) is not True:
            continue
        if not isinstance(param, torch.Tensor) or not any(runs(m) for m in module.modules()):
            left.append(name)
            continue
        if param.dtype != torch.float32:
            fresh = torch.zeros(param.shape, dtype=torch.float32, device=param.device)
            module.learnable_sink_param = torch.nn.Parameter(fresh, requires_grad=False)
    return left


def learnable_sinks(model: torch.nn.Module) -> dict[int, torch.Tensor]:
    """By ``id`` of each MLA layer this reference runs, the float32 learnable sink of the
    attention module that holds it (``enable_sinks``) where the layer's backend got none."""
    out = {}
    for module in model.modules():
        param = getattr(module, "learnable_sink_param", None)
        if getattr(module, "learnable_sink", False) is not True:
            continue
        if not isinstance(param, torch.Tensor) or param.dtype != torch.float32:
            continue
        for layer in module.modules():
            if runs(layer) and getattr(getattr(layer, "impl", None), "sinks", None) is None:
                out[id(layer)] = param
    return out
