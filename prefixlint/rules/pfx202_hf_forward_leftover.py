"""PFX202 hf-forward-leftover."""

from __future__ import annotations

import libcst as cst

from prefixlint.static.model_classes import is_method_of, is_model_architecture, param_kinds
from prefixlint.static.prefix_sites import Site
from prefixlint.static.rule import CONTRACT, FileContext, Invalid, LintRule, Where, example

# -- PFX202 --------------------------------------------------------------------------------

HF_FORWARD_PARAMS: dict[str, str] = {
    "attention_mask": "request boundaries are the attention backend's business",
    "past_key_values": "the KV cache is paged and owned by the engine",
    "use_cache": "the KV cache is always on and owned by the engine",
    "output_attentions": "attention weights are never materialised",
    "output_hidden_states": "the engine asks for hidden states through the pooler",
    "return_dict": "`forward` returns a tensor (or `IntermediateTensors`)",
    "labels": "there is no training loss in inference",
    "head_mask": "heads cannot be masked in vLLM's attention",
    "cache_position": "positions come in `positions`, the cache is paged",
}


# vLLM's attention layers over the paged KV cache: a module that builds one runs on the flat
# batch, whatever its ``forward`` is called with.
PAGED_ATTENTION_LAYERS = frozenset(
    {
        "Attention",
        "MLAAttention",
        "ChunkedLocalAttention",
        "CrossAttention",
        "EncoderOnlyAttention",
        "StaticSinkAttention",
        "MultiHeadLatentAttentionWrapper",
    }
)


class HFForwardLeftover(LintRule):
    """
    ## What it does
    Checks the `forward` of a model class for parameters of a Hugging Face Transformers
    model that have no meaning in vLLM: `attention_mask`, `past_key_values`, `use_cache`,
    `output_attentions`, `output_hidden_states`, `return_dict`, `labels`, `head_mask`,
    `cache_position`.

    A model class here is one on vLLM's paged-attention path: an architecture class, an
    `nn.Module` whose `__init__` takes `vllm_config`, one whose `forward` takes
    `positions` (decoder layers, attention blocks), or one that builds a vLLM attention
    layer (`Attention`, `MLAAttention`, ...). Vision and audio encoders, which run their
    own attention over a padded batch, legitimately take `attention_mask` and are not
    checked.

    ## Why is this bad?
    vLLM runs a flat batch without padding: there is no mask to pass, the KV cache is
    paged and owned by the engine, and nothing asks for attention weights or a dict. The
    parameters are never passed, so the code behind them is dead, and often wrong (a
    cache branch that never runs, a mask that is always `None`).

    ## Example
    ```python
    def forward(self, input_ids, positions, attention_mask=None, past_key_values=None):
        ...
    ```

    Use instead:
    ```python
    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        ...
    ```
    """

    code = "PFX202"
    applies_to = CONTRACT
    triggers = ("past_key_value", "layer_past", "use_cache")

    VALID = [
        example(
            """
class MyForCausalLM(LlamaForCausalLM):
    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        return input_ids
"""
        ),
        example(
            """
class VisionEncoderLayer(nn.Module):  # a vision tower: its own padded attention
    def __init__(self, hidden: int, prefix: str = ""):
        super().__init__()

    def forward(self, hidden_states, attention_mask=None):
        return hidden_states
"""
        ),
    ]
    INVALID = [
        Invalid(
            example(
                """
class MyForCausalLM(LlamaForCausalLM):
    def forward(self, input_ids, positions, intermediate_tensors=None,
                inputs_embeds=None, attention_mask=None):
        return input_ids
"""
            ),
            line=4,
            contains="`attention_mask`",
        ),
        Invalid(
            example(
                """
class DecoderLayer(nn.Module):
    def __init__(self, hidden: int, prefix: str = ""):
        super().__init__()

    def forward(self, positions, hidden_states, past_key_values=None, use_cache=False):
        return hidden_states
"""
            ),
            line=6,
            contains="`past_key_values`",
        ),
        Invalid(
            example(
                """
class MyModel(nn.Module):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()

    def forward(self, input_ids, output_hidden_states: bool = False):
        return input_ids
"""
            ),
            line=6,
            contains="output_hidden_states",
        ),
        Invalid(
            example(
                """
from vllm.model_executor.layers.attention import Attention

class SelfAttention(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.attn = Attention(4, 2, 1.0, prefix=f"{prefix}.attn")

    def forward(self, hidden_states, attention_mask=None):
        return self.attn(hidden_states, hidden_states, hidden_states)
"""
            ),
            line=9,
            contains="builds `Attention`",
        ),
    ]

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        # forwards of other classes: reported when the class builds a paged attention layer
        self._pending: list[tuple[cst.ClassDef, cst.FunctionDef, Site]] = []

    def visit_FunctionDef(self, node: cst.FunctionDef, class_node: cst.ClassDef | None) -> None:
        if node.name.value != "forward" or not is_method_of(self.ctx, node, class_node):
            return
        assert class_node is not None
        names = {p.name.value for p, _ in param_kinds(node)}
        if not names & HF_FORWARD_PARAMS.keys():
            return
        at = self.here(node)
        if runs_in_vllm(self.ctx, class_node, node):
            self._report(class_node, node, at, "")
        else:
            self._pending.append((class_node, node, at))

    def leave_Module(self) -> None:
        for class_node, node, at in self._pending:
            paged = builds_paged_attention(self.ctx, class_node)
            if paged is not None:
                self._report(class_node, node, at, f", and the class builds `{paged}`")

    def _report(self, class_node: cst.ClassDef, node: cst.FunctionDef, at: Where, why: str) -> None:
        cls = class_node.name.value
        for param, _ in param_kinds(node):
            name = param.name.value
            what = HF_FORWARD_PARAMS.get(name)
            if what is not None:
                self.report(
                    param,
                    f"`{name}` is a Hugging Face parameter that vLLM never passes to "
                    f"`{cls}.forward` ({what}{why}); remove it and the code that reads it",
                    site=at,
                )


def runs_in_vllm(ctx: FileContext, class_node: cst.ClassDef, forward: cst.FunctionDef) -> bool:
    """The class's ``forward`` is called by vLLM's runner or its layers, as the signature
    or the class shows: it takes ``positions``, or the class is an architecture or takes
    ``vllm_config``."""
    names = {p.name.value for p, _ in param_kinds(forward)}
    return (
        "positions" in names
        or is_model_architecture(ctx, class_node)
        or (ctx.takes_vllm_config(class_node) and ctx.is_module_class(class_node))
    )


def builds_paged_attention(ctx: FileContext, class_node: cst.ClassDef) -> str | None:
    """The paged attention layer the class builds, if any (complete after the walk)."""
    return next(
        (
            s.callee
            for s in ctx.prefixes.sites
            if s.callee.rsplit(".", 1)[-1] in PAGED_ATTENTION_LAYERS
            and any(a is class_node for a in s.anchors)
        ),
        None,
    )


def reports_forward(ctx: FileContext, class_node: cst.ClassDef, forward: cst.FunctionDef) -> bool:
    """PFX202 reports this ``forward``'s Hugging Face parameters (after the walk)."""
    return (
        runs_in_vllm(ctx, class_node, forward)
        or builds_paged_attention(ctx, class_node) is not None
    )
