"""Which part of computing the logits differs, where the logits differ from transformers'
while every compared module before them agrees: the head (its weight not tied, loaded
wrong or laid out wrong, or its bias), the logits processor after it (a scale, a
soft-cap, the vocabulary), or the model's own ``compute_logits`` (what it does to the
hidden states before the head or to the logits after the processor).

vLLM's ``LogitsProcessor`` is a module the model builds (a construction site like any
other) and is called with the head module and the hidden states: a forward hook sees the
head, its input and the processor's output. transformers' head is its output embeddings
module (``get_output_embeddings()``); its hook gives its input and raw output, before the
class's scale or soft-cap. Each part is compared in turn with the same tolerance.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from prefixlint.introspect import vllm_api
from prefixlint.introspect.compare.boundaries import difference, removed_after
from prefixlint.introspect.compare.facts import Boundary

_AGREE = "the logits differ from transformers' while the final hidden states agree: "


@dataclass
class Seen:
    """What one forward of each model gave its head: vLLM's processor call (the head
    module, its input and bias, the processor's output) and transformers' head."""

    processor: nn.Module | None = None
    head: nn.Module | None = None
    hidden: torch.Tensor | None = None
    bias: torch.Tensor | None = None
    processed: torch.Tensor | None = None
    calls: int = 0  # processor calls: more than one (Medusa's heads) is not placed
    reference_in: torch.Tensor | None = None
    reference_out: torch.Tensor | None = None


@contextlib.contextmanager
def watched(model: nn.Module, seen: Seen) -> Iterator[None]:
    """vLLM's logits processors of ``model``, hooked into ``seen`` while open."""
    cls = vllm_api.logits_processor_class()
    handles = []

    def hook(module: nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        seen.calls += 1
        given = dict(zip(("lm_head", "hidden_states", "embedding_bias"), args, strict=False))
        given.update(kwargs)
        head, hidden = given.get("lm_head"), given.get("hidden_states")
        if isinstance(head, nn.Module) and isinstance(hidden, torch.Tensor):
            seen.processor, seen.head = module, head
            seen.hidden = hidden.detach().float().clone()
            bias = given.get("embedding_bias")
            seen.bias = bias.detach().float() if isinstance(bias, torch.Tensor) else None
            if isinstance(output, torch.Tensor):
                seen.processed = output.detach().float().clone()  # kept from in-place edits

    for module in model.modules() if cls is not None else ():
        if isinstance(module, cls):
            handles.append(module.register_forward_hook(hook, with_kwargs=True))
    with removed_after(handles):
        yield


@contextlib.contextmanager
def reference_head(reference: nn.Module, seen: Seen) -> Iterator[None]:
    """transformers' output embeddings (its head), hooked into ``seen`` while open."""
    try:
        head = reference.get_output_embeddings()
    except (AttributeError, NotImplementedError):
        head = None

    def hook(module: nn.Module, args: tuple, output: Any) -> None:
        if args and isinstance(args[0], torch.Tensor) and isinstance(output, torch.Tensor):
            seen.reference_in, seen.reference_out = args[0].detach().float(), output.detach()
            seen.reference_out = seen.reference_out.float()

    handles = [head.register_forward_hook(hook)] if isinstance(head, nn.Module) else []
    with removed_after(handles):
        yield


def placed(
    first: Boundary,
    seen: Seen,
    given: tuple[Any, Any],
    model: nn.Module,
    sites: dict[int, tuple[str, int]],
    tolerance: float,
) -> Boundary:
    """``first`` (the logits boundary) at the part that differs, with its words;
    ``given``: the model's forward output and its final logits; ``sites``: id of a
    module -> the model's line that built it. Unchanged where the parts were not seen."""
    hidden, logits = given
    weight = getattr(seen.head, "weight", None)
    if seen.calls != 1 or not isinstance(weight, torch.Tensor) or seen.reference_out is None:
        return first
    close = _close(tolerance)
    head = _name(model, seen.head)
    if not close(seen.hidden, seen.reference_in):
        if close(seen.hidden, hidden):  # the model's output, given on as it is
            words = (
                "the logits differ from transformers', and so do the hidden states the head "
                "is given (the model's output), which no compared module's difference "
                "accounts for"
            )
            return replace(first, blame=words)
        words = (
            f"{_AGREE}`compute_logits` gives the head other hidden states than the model's "
            "output, and transformers' head gets other ones"
        )
        return replace(first, site=_method_site(model), blame=words)
    if not close(_linear(seen.hidden, weight, seen.bias), seen.reference_out):
        own = getattr(seen.head, "bias", None)
        passed = seen.bias is not None or not isinstance(own, torch.Tensor)
        if not passed and close(_linear(seen.hidden, weight, own), seen.reference_out):
            words = (
                f"{_AGREE}`compute_logits` does not pass the head `{head}`'s bias to the "
                "logits processor: with it, the head's output agrees with transformers'"
            )
            return replace(first, site=_method_site(model), blame=words)
        words = (
            f"{_AGREE}the head `{head}` gives other values than transformers' head from the same "
            "hidden states: its weight (not tied, loaded or laid out wrong) or its bias"
        )
        return replace(first, site=sites.get(id(seen.head), first.site), blame=words)
    if seen.processed is not None and not close(logits, seen.processed):
        words = (
            f"{_AGREE}the head `{head}` agrees with transformers'; `compute_logits` changes the "
            "logits processor's output after it, and the result differs"
        )
        return replace(first, site=_method_site(model), blame=words)
    name = _name(model, seen.processor)
    words = (
        f"{_AGREE}the head `{head}` agrees with transformers'; the logits processor `{name}` "
        "computes other logits from its output: its scale, soft-cap or vocabulary"
    )
    return replace(first, site=sites.get(id(seen.processor), first.site), blame=words)


def _linear(hidden: Any, weight: torch.Tensor, bias: Any) -> torch.Tensor | None:
    """The head as vLLM's unquantized head computes it; None where the weight (or bias)
    does not fit the hidden states (a head laid out transposed)."""
    try:
        b = bias.detach().float() if isinstance(bias, torch.Tensor) else None
        return F.linear(hidden, weight.detach().float(), b)
    except RuntimeError:
        return None


def _close(tolerance: float) -> Any:
    """Whether two tensors agree within ``tolerance`` (relative to the second's largest
    value; vocabulary padding dropped); shapes that do not line up do not agree."""

    def close(ours: Any, theirs: Any) -> bool:
        if not isinstance(ours, torch.Tensor) or not isinstance(theirs, torch.Tensor):
            return False
        _, rel = difference(ours.float(), theirs.float(), True)
        return rel == rel and rel <= tolerance

    return close


def _name(model: nn.Module, module: Any) -> str:
    return next((p for p, m in model.named_modules() if m is module), type(module).__name__)


def _method_site(model: nn.Module) -> tuple[str, int]:
    """The line of the ``compute_logits`` the model's class runs (the class that defines
    it); ("", 0) where it has no source (the finding then sits at the class)."""
    method = getattr(type(model), "compute_logits", None)
    code = getattr(inspect.unwrap(method), "__code__", None) if method is not None else None
    if code is None:
        return "", 0
    return code.co_filename, code.co_firstlineno
