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
) -> torch.Tensor:
    n, heads = q.shape[0], layer.num_heads
    rope = layer.qk_rope_head_dim
    k_nope, v = _expanded(layer, kv_c_normed)
    k_pe = k_pe.reshape(n, 1, rope).expand(n, heads, rope)
    key = torch.cat([k_nope, k_pe.to(k_nope.dtype)], dim=-1)
    head_size = layer.qk_nope_head_dim + rope
    impl = getattr(layer, "impl", None)
    # ordinary multi-head attention once the latent is expanded: every head its own K/V
    view = SimpleNamespace(
        num_heads=heads,
        num_kv_heads=heads,
        head_size=head_size,
        head_size_v=layer.v_head_dim,
        impl=SimpleNamespace(scale=float(getattr(impl, "scale", layer.scale))),
        attn_type="decoder",
        sliding_window=getattr(layer, "sliding_window", None),
    )
    query = q.reshape(n, heads * head_size)
    out = reference_forward(view, query, key.reshape(n, -1), v.reshape(n, -1))
    return out.reshape(output_shape) if output_shape is not None else out


@contextlib.contextmanager
def reference_mla() -> Iterator[None]:
    """vLLM's ``MLAAttention.forward`` is the reference above while the comparison runs;
    nothing when this vLLM has no MLA layer."""
    with replaced(vllm_api.mla_attention_class(), "forward", mla_forward):
        yield


def disabled_sinks(model: torch.nn.Module) -> list[str]:
    """Layers whose learnable attention sink vLLM built disabled: where no attention
    backend of this platform consumes sinks (the CPU), HY V4's attention keeps the
    parameter in the checkpoint's dtype and never hands it to the attention
    (``vllm/models/hy_v4/nvidia/attention.py``: "the disabled path keeps the checkpoint
    dtype since the value is never consumed"); an engine on a GPU uses it. Such a layer
    computes without the sink here only: a gap of this machine, not the model's."""
    out = []
    for name, module in model.named_modules():
        param = getattr(module, "learnable_sink_param", None)
        sink = getattr(module, "learnable_sink", False) is True
        if sink and isinstance(param, torch.Tensor) and param.dtype != torch.float32:
            out.append(name)
    return out
