"""MoE routing for the comparison: a fused-MoE layer's router computes, on the CPU, what
vLLM's GPU routers compute for the layer as the model configured it.

vLLM 0.32's CPU router (``CPURouter``) routes some configurations otherwise than the GPU
routers and the model's code say: without grouped top-k, softmax scoring never reads an
``e_score_correction_bias`` (Ernie 4.5 MoE), and sigmoid scoring fails an assert
(Laguna). The router is vLLM's backend, not the model author's. What the author passes
to the layer is what this reference honours, as the GPU routers (``FusedTopKRouter``,
``FusedTopKBiasRouter``, ``GroupedTopKRouter``) do:
- softmax or sigmoid scoring of the router logits, in float32;
- an ``e_score_correction_bias`` that steers the choice of experts, not their weights;
- grouped top-k: the best ``topk_group`` of ``num_expert_group`` groups, each scored by
  its best expert (its best two with a bias); a group count of None is one group, the
  default the models' ``getattr(config, "n_group", 1)`` mean;
- renormalising the chosen weights;
- ``routed_scaling_factor`` where the router applies it (grouped top-k or a bias; else the
  layer applies it to the output, or no GPU router does).

A model's own routing function and hash-routed layers run as vLLM's CPU router runs them
(the model's function; DeepSeek V4's ported kernels)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from prefixlint.introspect import vllm_api
from prefixlint.introspect.compare.attention import replaced

SCORING = ("softmax", "sigmoid")


def takes(router: Any) -> bool:
    """A router this reference routes: configured by the model with a scoring it knows."""
    routing = vllm_api.moe_routing(router)
    return (
        routing is not None
        and routing["custom"] is None
        and not routing["hashed"]
        and routing["scoring"] in SCORING
    )


def unroutable(model: torch.nn.Module) -> str | None:
    """The first fused-MoE layer whose routing neither this reference nor vLLM's CPU router
    computes (a scoring function of neither), as "scoring at path", or None."""
    cpu = vllm_api.cpu_router_class()
    for name, module in model.named_modules():
        router = getattr(module, "router", None)
        if cpu is None or not isinstance(router, cpu) or takes(router):
            continue
        routing = vllm_api.moe_routing(router)
        if routing is None or routing["custom"] is not None or routing["hashed"]:
            continue  # the model's own function, DeepSeek V4's hash kernels
        if routing["scoring"] != "sqrtsoftplus":  # the CPU router's own biased kernel
            return f"`{routing['scoring']}` scoring at `{name}`"
    return None


def route(routing: dict[str, Any], logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights float32, expert ids int32), ``[tokens, top_k]`` each."""
    logits = logits.float()
    scores = logits.softmax(-1) if routing["scoring"] == "softmax" else logits.sigmoid()
    bias = routing["bias"]
    choice = scores if bias is None else scores + bias.float()[None]
    groups = int(routing["groups"] or 1) if routing["grouped"] else 1
    if groups > 1:
        choice = _best_groups(choice, groups, int(routing["topk_group"] or 1), bias is not None)
    ids = choice.topk(routing["top_k"], dim=-1)[1]
    weights = scores.gather(1, ids)
    if routing["renormalize"]:
        weights = weights / weights.sum(-1, keepdim=True)
    if routing["scale"] != 1.0 and (routing["grouped"] or bias is not None):
        weights = weights * routing["scale"]
    return weights.float().contiguous(), ids.to(torch.int32).contiguous()


def _best_groups(choice: torch.Tensor, groups: int, keep: int, biased: bool) -> torch.Tensor:
    """``choice`` with the experts outside the best ``keep`` groups at -inf."""
    n = choice.shape[0]
    per = choice.view(n, groups, -1)
    score = per.topk(2, dim=-1)[0].sum(-1) if biased else per.max(-1).values
    kept = torch.zeros_like(score).scatter_(1, score.topk(keep, dim=-1)[1], 1.0).bool()
    mask = kept[:, :, None].expand_as(per).reshape(n, -1)
    return choice.masked_fill(~mask, float("-inf"))


def _routed_by_reference(original: Callable) -> Callable:
    """``CPURouter._compute_routing`` that routes what this reference takes, and leaves
    the rest to ``original``."""

    def compute(
        router: Any, hidden: torch.Tensor, logits: torch.Tensor, indices: Any, **kw: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        routing = vllm_api.moe_routing(router) if takes(router) else None
        if routing is None:
            return original(router, hidden, logits, indices, **kw)
        return route(routing, logits)

    return compute


def _zero_experts_by_reference(original: Callable) -> Callable:
    """``ZeroExpertRouter._compute_routing`` (LongCat) on the CPU, as vLLM's GPU path
    computes it: routing over the real and zero experts as above (the bias steers, the
    router's scale applies), the identity experts' output (each token's hidden state times
    the weights its zero experts got) kept for the layer to add, and the zero experts'
    slots given to expert 0 with weight 0. Other zero-expert types: ``original``."""

    def compute(
        router: Any, hidden: torch.Tensor, logits: torch.Tensor, indices: Any, **kw: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        routing = vllm_api.moe_routing(router)
        identity = getattr(router, "zero_expert_type", None) == "identity"
        if routing is None or routing["scoring"] not in SCORING or not identity:
            return original(router, hidden, logits, indices, **kw)
        weights, ids = route(routing, logits)
        zero = ids >= int(router.num_logical_experts)
        kept = (weights * zero).sum(-1, keepdim=True)
        router._zero_expert_output = (hidden.float() * kept).to(hidden.dtype)
        return weights.masked_fill(zero, 0.0), ids.masked_fill(zero, 0)

    return compute


@contextlib.contextmanager
def reference_routing() -> Iterator[None]:
    """vLLM's CPU router (and the zero-expert router, whose routing has no CPU op) routes
    with the reference above while the comparison runs; nothing on a vLLM without them."""
    cls = vllm_api.cpu_router_class()
    routed = None if cls is None else _routed_by_reference(cls._compute_routing)
    zero_cls = vllm_api.zero_expert_router_class()
    zero = None if zero_cls is None else _zero_experts_by_reference(zero_cls._compute_routing)
    with replaced(cls, "_compute_routing", routed), replaced(zero_cls, "_compute_routing", zero):
        yield
