"""PFX203 missing-embed-input-ids."""

from __future__ import annotations

import libcst as cst

from prefixlint.diagnostic import Severity
from prefixlint.static.model_classes import (
    is_draft_model,
    is_model_architecture,
    raising_method,
)
from prefixlint.static.rule import INTERFACE, Invalid, LintRule, example
from prefixlint.static.vllm_facts import embed_method

# -- PFX203 --------------------------------------------------------------------------------


class MissingEmbedInputIds(LintRule):
    """
    ## What it does
    Checks that an architecture class has an `embed_input_ids` method (the name vLLM's
    `VllmModel` protocol gives it, read from the vLLM being checked against), its own or one of
    a base class. It reports only when every base class can be read; a base outside the
    checked files and vLLM could define it. Draft models of speculative decoding (MTP,
    Medusa, ...) are not checked: their proposer embeds the tokens itself unless the draft
    is multimodal.

    ## Why is this bad?
    The engine calls `model.embed_input_ids(input_ids)` to obtain the text embeddings
    separately, for multimodal input (placeholder positions are overwritten before the
    layers run), prompt embeddings and speculative decoding. The registry's check of the
    model interface fails without it ("The model is missing the `embed_input_ids`
    method").

    ## Example
    ```python
    class MyModelForCausalLM(nn.Module):
        def forward(self, input_ids, positions, ...): ...
    ```

    Use instead:
    ```python
    class MyModelForCausalLM(nn.Module):
        def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
            return self.model.embed_input_ids(input_ids)

        def forward(self, input_ids, positions, ...): ...
    ```
    """

    code = "PFX203"
    applies_to = INTERFACE

    VALID = [
        example(
            """
class MyForConditionalGeneration(nn.Module):
    def __init__(self, *, vllm_config, prefix: str = ""):
        super().__init__()
        raise NotImplementedError("not supported on this platform")

    def compute_logits(self, hidden_states):
        return hidden_states
"""
        ),
        example(
            """
class MyForCausalLM(LlamaForCausalLM):
    pass
"""
        ),
        example(
            """
class MyForCausalLM(nn.Module, SupportsPP):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(8, 8, prefix=maybe_prefix(prefix, "embed"))

    def embed_input_ids(self, input_ids):
        return self.embed_tokens(input_ids)

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        return input_ids
"""
        ),
        example(
            """
from some_plugin.base import PluginBase  # cannot be read: unknowable

class MyForCausalLM(PluginBase):
    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        return input_ids
"""
        ),
    ]
    INVALID = [
        Invalid(
            example(
                """
class MyForCausalLM(nn.Module, SupportsPP):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        return input_ids
"""
            ),
            line=2,
            contains="embed_input_ids",
        ),
        Invalid(
            example(
                """
class MyForCausalLM(nn.Module):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        self.model = LlamaModel(vllm_config=vllm_config, prefix=maybe_prefix(prefix, "model"))

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        return self.model(input_ids, positions, intermediate_tensors, inputs_embeds)
"""
            ),
            line=2,
            contains="self.model.embed_input_ids",
        ),
    ]

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        if len(self.ctx.prefixes.class_stack) != 1 or not is_model_architecture(self.ctx, node):
            return
        if is_draft_model(self.ctx, node) or always_raises(node):
            return  # a draft's proposer embeds; a platform stub is never built
        symbol = self.ctx.symbol(node)
        method = embed_method(self.ctx.resolver)  # as the vLLM being read names it
        if symbol is None or self.ctx.resolver.class_has(symbol, method) is not False:
            return
        cls = node.name.value
        inner = ""
        summary = self.ctx.class_summary(node)
        owner = raising_method(self, summary, method) if summary is not None else None
        if owner is not None:
            # Written and declared unsupported: vLLM's interface check finds it and text
            # generation runs; only the paths that embed separately raise (a note).
            self.report(
                node.name,
                f"`{owner}.{method}` only raises `NotImplementedError`: text generation runs, "
                "but prompt embeddings, multimodal input and speculative decoding call it "
                "and fail",
                severity=Severity.NOTE,
            )
            return
        if summary is not None and "model" in summary.attributes:
            inner = f": e.g. `return self.model.{method}(input_ids)`"
        self.report(
            node.name,
            f"architecture `{cls}` has no `{method}` (own or inherited); the engine "
            f"calls it to embed text separately from `forward` (vLLM's `VllmModel` protocol). "
            f"Add `def {method}(self, input_ids)`{inner}",
        )


def always_raises(node: cst.ClassDef) -> bool:
    """A stub for an unsupported platform: its ``__init__`` ends in a ``raise``, so the
    class is never built."""
    body = node.body.body if isinstance(node.body, cst.IndentedBlock) else ()
    init = next(
        (s for s in body if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"), None
    )
    if init is None or not isinstance(init.body, cst.IndentedBlock) or not init.body.body:
        return False
    last = init.body.body[-1]
    return isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[0], cst.Raise)
