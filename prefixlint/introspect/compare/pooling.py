"""Pooling models in the comparison (encoders, embedding models, classifiers).

A pooling model's forward returns its hidden states; its pooler (CLS, mean or last-token
pooling, a classifier applied to the pooled vector) runs afterwards, in the engine's
runner. So the comparison ends at the forward's output, compared with transformers'
output of the same shape: its per-token ``logits`` where the forward already applies a
head (a token classifier, a masked-LM head), else its base model's last hidden state.
The pooler itself is not compared (docs/compare.md)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from prefixlint.introspect import vllm_api


def served(model_config: Any, model: nn.Module) -> bool:
    """vLLM serves the model as a pooling model: a pooling runner, a pooling class, or an
    architecture registered only as an embedding model (``LlamaModel``, ``Qwen2Model``),
    which vLLM builds from the generative class and serves through its embedding adapter
    (a checkpoint's sentence-transformers files select the pooling runner; the
    synthesised config has none). An architecture also registered for text generation
    (``LlamaForCausalLM``) is generative."""
    if getattr(model_config, "runner_type", "generate") == "pooling":
        return True
    if vllm_api.is_pooling_model(model):
        return True
    archs = getattr(model_config.hf_config, "architectures", None) or []
    if not archs:
        return False
    embedding = vllm_api.group_of(archs[0], vllm_api.EMBEDDING_GROUP)
    return embedding and not vllm_api.group_of(archs[0], vllm_api.TEXT_GENERATION_GROUP)


def without_padding(ids: torch.Tensor, config: Any) -> torch.Tensor:
    """The token ids with no padding token among them: vLLM runs one unpadded sequence,
    while transformers' encoders skip a padding token's position (RoBERTa numbers its
    positions from ``padding_idx + 1`` over the tokens that are not padding)."""
    pad = getattr(config, "pad_token_id", None)
    vocab = int(getattr(config, "vocab_size", 0) or 0)
    if not isinstance(pad, int) or vocab < 2:
        return ids
    return torch.where(ids == pad, (ids + 1) % vocab, ids)


@contextlib.contextmanager
def last_hidden(reference: nn.Module) -> Iterator[dict[str, torch.Tensor]]:
    """The last hidden state of the reference's base model (``base_model``: ``bert`` of
    ``BertForSequenceClassification``, the model itself for ``BertModel``), recorded
    under "hidden" while the reference runs."""
    seen: dict[str, torch.Tensor] = {}
    base = getattr(reference, "base_model", None)
    base = base if isinstance(base, nn.Module) else reference

    def hook(_: nn.Module, __: tuple, out: Any) -> None:
        value = getattr(out, "last_hidden_state", None)
        if value is None and isinstance(out, (tuple, list)) and out:
            value = out[0]
        if isinstance(value, torch.Tensor) and "hidden" not in seen:
            seen["hidden"] = value.detach().float().clone()

    handle = base.register_forward_hook(hook)
    try:
        yield seen
    finally:
        handle.remove()


def reference_output(ours: torch.Tensor, out: Any, hidden: torch.Tensor | None) -> Any:
    """transformers' output that the forward's ``ours`` stands for: per-token logits of
    the same size (a head inside the forward), else the base model's last hidden state;
    None when neither has its size (nothing to compare)."""
    for theirs in (getattr(out, "logits", None), hidden):
        if isinstance(theirs, torch.Tensor) and theirs.numel() == ours.numel():
            return theirs.float()
    return None


def own_heads(model: nn.Module, matched: dict[str, Any]) -> list[str]:
    """A plugin's modules with weights of which transformers' class has nothing (no
    module of it matched): a head its forward may apply after the backbone (ColBERT's
    ``colbert_linear`` on LFM2), so its output is not transformers' hidden state."""
    paths = list(matched)
    out = []
    for name, child in model.named_children():
        if not any(True for _ in child.parameters()):
            continue
        if not any(p == name or p.startswith(f"{name}.") for p in paths):
            out.append(name)
    return out
