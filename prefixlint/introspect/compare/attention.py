"""Attention for the comparison: vLLM's ``Attention`` layer runs a reference causal
attention over one sequence instead of its backend.

vLLM's backends read a forward context's metadata and a paged KV cache that only an engine
sets up; the backend is vLLM's code, not the model author's. What the author passes to the
layer is what this reference honours: the query and KV head counts, the head sizes, the
softmax scale, the sliding window, the logits soft-cap, ALiBi slopes and sinks, and whether
the layer is causal. A wrong scale handed to ``Attention(...)`` changes its output here as it
would in the engine (docs/compare.md)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch

from prefixlint.introspect import vllm_api

CAUSAL_TYPES = ("decoder",)
BIDIRECTIONAL_TYPES = ("encoder_only", "encoder")


class Unsupported(Exception):
    """A layer this reference cannot stand in for (MLA, Mamba, cross-attention, ...)."""


def unsupported_layers(
    model: torch.nn.Module, runs: Callable[[torch.nn.Module], bool] = lambda _: False
) -> list[str]:
    """Layers that read attention metadata and are not plain ``Attention`` of a type the
    reference runs, nor a layer ``runs`` says another reference runs (state-space
    layers, ``statespace.runs``): (class name) each, once."""
    attention, base = vllm_api.attention_classes()
    out: list[str] = []
    for module in model.modules():
        name = type(module).__name__
        plain = attention is not None and isinstance(module, attention)
        if plain and _attn_type(module) not in CAUSAL_TYPES + BIDIRECTIONAL_TYPES:
            plain = False
        if plain and type(module).forward is not attention.forward:  # its own forward
            plain = False
        if plain or runs(module):
            continue
        if base is not None and isinstance(module, base) and name not in out:
            out.append(name)
    return out


def binding_encoder_windows(model: torch.nn.Module, tokens: int) -> list[str]:
    """Bidirectional layers with a sliding window that binds over ``tokens`` (class name,
    once each): the reference applies a window to causal layers only (how vLLM's kernels
    bound a bidirectional one, ModernBERT's local attention, is theirs). A window of at
    least ``tokens`` on either side masks nothing, so those layers run."""
    attention, _ = vllm_api.attention_classes()
    out: list[str] = []
    for module in model.modules():
        if attention is None or not isinstance(module, attention):
            continue
        window = _window(module)
        bidirectional = _attn_type(module) in BIDIRECTIONAL_TYPES
        if bidirectional and window is not None and window < tokens:
            name = type(module).__name__
            out += [name] if name not in out else []
    return out


def _attn_type(layer: Any) -> str:
    kind = getattr(layer, "attn_type", "decoder")
    return str(getattr(kind, "value", kind))


def _window(layer: Any) -> int | None:
    window = getattr(layer, "sliding_window", None)
    if isinstance(window, (tuple, list)):  # (left, right) as some backends keep it
        window = window[0] + 1 if window and window[0] >= 0 else None
    return window if isinstance(window, int) and window > 0 else None


def reference_forward(
    layer: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    output_shape: Any = None,
    output_dtype: Any = None,
) -> torch.Tensor:
    impl = getattr(layer, "impl", None)
    n = query.shape[0]
    key, value = _shared_kv(layer, key, value)
    heads, kv_heads = layer.num_heads, layer.num_kv_heads
    head_v = getattr(layer, "head_size_v", layer.head_size)
    q = query.reshape(n, heads, layer.head_size).transpose(0, 1).float()
    k = key.reshape(n, kv_heads, layer.head_size).transpose(0, 1).float()
    v = value.reshape(n, kv_heads, head_v).transpose(0, 1).float()
    k = k.repeat_interleave(heads // kv_heads, 0)
    v = v.repeat_interleave(heads // kv_heads, 0)
    scale = float(getattr(impl, "scale", getattr(layer, "scale", 1.0 / math.sqrt(layer.head_size))))
    scores = (q @ k.transpose(1, 2)) * scale
    cap = getattr(impl, "logits_soft_cap", None)
    if cap:
        scores = cap * torch.tanh(scores / cap)
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    slopes = getattr(impl, "alibi_slopes", None)
    if slopes is not None:
        slopes = torch.as_tensor(slopes, dtype=torch.float32)
        scores = scores + slopes[:, None, None] * (j - i).float()[None]
    allowed = torch.ones(n, n, dtype=torch.bool)
    if _attn_type(layer) in CAUSAL_TYPES:
        allowed &= j <= i
        window = _window(layer)
        if window is not None:
            allowed &= (i - j) < window
    scores = scores.masked_fill(~allowed, float("-inf"))
    sinks = getattr(impl, "sinks", None)
    if isinstance(sinks, torch.Tensor):  # a per-head logit that takes probability mass
        sink = sinks.float().reshape(heads, 1, 1).expand(heads, n, 1)
        probs = torch.cat([scores, sink], -1).softmax(-1)[..., :-1]
    else:
        probs = scores.softmax(-1)
    out = (probs @ v).transpose(0, 1).reshape(n, heads * head_v)
    out = out.to(output_dtype or query.dtype)
    return out.reshape(output_shape) if output_shape is not None else out


# layer name -> the key and value it attended over, while one forward runs: a layer that
# shares another's KV cache (``kv_sharing_target_layer_name``, Gemma 3n's last layers)
# gets no key or value of its own and reads that layer's cache, which holds exactly these
_KV: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}


def _shared_kv(layer: Any, key: Any, value: Any) -> tuple[torch.Tensor, torch.Tensor]:
    target = getattr(layer, "kv_sharing_target_layer_name", None)
    if target is None:
        _KV[getattr(layer, "layer_name", "")] = (key, value)
        return key, value
    if target not in _KV:
        raise Unsupported(f"`{layer.layer_name}` shares the KV cache of `{target}`, not run")
    return _KV[target]


@contextlib.contextmanager
def reference_attention() -> Iterator[None]:
    """vLLM's ``Attention.forward`` is the reference above while the comparison runs."""
    attention, _ = vllm_api.attention_classes()
    if attention is None:
        raise Unsupported("vLLM's Attention layer was not found")
    original = attention.forward
    attention.forward = reference_forward  # type: ignore[method-assign]
    _KV.clear()
    try:
        yield
    finally:
        attention.forward = original  # type: ignore[method-assign]
        _KV.clear()


@contextlib.contextmanager
def replaced(cls: type | None, name: str, value: Any) -> Iterator[None]:
    """``cls.name`` is ``value`` while the comparison runs, then what it was; nothing when
    this vLLM has no such class (None)."""
    if cls is None:
        yield
        return
    own = name in vars(cls)  # else inherited: the class's own attribute goes again after
    original = vars(cls).get(name)
    setattr(cls, name, value)
    try:
        yield
    finally:
        if own:
            setattr(cls, name, original)
        else:
            delattr(cls, name)
