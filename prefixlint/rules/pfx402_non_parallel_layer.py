"""PFX402 non-parallel-layer."""

from __future__ import annotations

import re

import libcst as cst

from prefixlint.static.decoder_classes import DecoderClasses, qualified_callee, top_class_name
from prefixlint.static.prefix_sites import dotted_name
from prefixlint.static.rule import FileContext, Invalid, LintRule, Where, example

# -- PFX402 ---------------------------------------------------------------------------------

_PLAIN_LAYERS = {
    "torch.nn.Linear": "nn.Linear",
    "torch.nn.modules.linear.Linear": "nn.Linear",
    "torch.nn.Embedding": "nn.Embedding",
    "torch.nn.modules.sparse.Embedding": "nn.Embedding",
}
# Attribute names at which a decoder holds a layer that vLLM shards: the attention and MLP
# projections, the token embedding, the LM head. (Routers, position embeddings and small
# fusion layers such as EAGLE's ``fc`` or MTP's ``eh_proj`` are replicated in vLLM too, and
# are not listed.)
_SHARDED_ATTRIBUTE = re.compile(
    r"^((q|k|v|qk|kv|qkv|o|out|gate|up|down|gate_up|in|q_a|q_b|kv_a|kv_b|dense)_proj"
    r"|kv_a_proj_with_mqa|qkv|wq|wk|wv|wo|wqkv|w1|w2|w3|c_attn|c_proj|c_fc|fc1|fc2|fc_in"
    r"|fc_out|query_key_value|query|key|value|dense_h_to_4h|dense_4h_to_h|lm_head"
    r"|embed_tokens|wte|word_embeddings|tok_embeddings|embed_in|embed_out)$"
)
# A router/gate of a mixture of experts: replicated in vLLM, but a prefix-taking
# ``ReplicatedLinear``/``GateLinear``, so that quantization configs can match or exclude it.
_ROUTER_ATTRIBUTE = re.compile(r"^(gate|router|wg|w_gate|gating|router_gate)$")
_MOE_LAYER = re.compile(r"^(FusedMoE\w*|SharedFusedMoE)$")
_MOE_CLASS = re.compile(r"(MoE|Moe|MoeBlock|MixtureOfExperts|SparseMoe)")
_REPLACEMENT = {
    "nn.Linear": "`ColumnParallelLinear`/`RowParallelLinear` (or `QKVParallelLinear`, "
    "`MergedColumnParallelLinear`; `ParallelLMHead` for the head)",
    "nn.Embedding": "`VocabParallelEmbedding`",
}


def _stored_at(anchors: tuple[cst.CSTNode, ...], call: cst.Call) -> str | None:
    """The attribute (last segment) the statement holding ``call`` assigns it to."""
    stmt = next((a for a in reversed(anchors) if isinstance(a, cst.SimpleStatementLine)), None)
    if stmt is None:
        return None
    for small in stmt.body:
        target = None
        if isinstance(small, cst.Assign) and len(small.targets) == 1:
            target = small.targets[0].target
        elif isinstance(small, cst.AnnAssign):
            target = small.target
        if target is None:
            continue
        name = dotted_name(target)
        if name and name.startswith("self."):
            return name.rsplit(".", 1)[-1]
    return None


class NonParallelLayer(LintRule):
    """
    ## What it does
    Checks for `nn.Linear` and `nn.Embedding` (however imported) used in a text decoder
    where vLLM shards the layer: the attention and MLP projections (`q_proj`, `o_proj`,
    `gate_up_proj`, `down_proj`, `fc1`, `c_attn`, ...), the token embedding and the LM head;
    and a plain `nn.Linear` router (`gate`, `router`) in an MoE block (a class that builds
    vLLM's `FusedMoE`, or is named like an MoE block), which takes no prefix.

    Decoder classes are the classes that build vLLM's `Attention`, a vocab-parallel
    embedding or head, or call `make_layers`; classes named `...DecoderLayer` or
    `...ForCausalLM`; and the classes those construct, except vision and audio towers,
    projectors and adapters, which vLLM often runs replicated with plain layers.

    ## Why is this bad?
    A plain layer holds the whole weight on every GPU and computes the whole output: it
    is not sharded under tensor parallelism (and its neighbours, which are, receive a full
    tensor where they expect a slice), it cannot be quantized by the checkpoint's
    quantization config, and it takes no `prefix`, so LoRA and per-layer quantization
    cannot find it.

    ## Example
    ```python
    self.o_proj = nn.Linear(hidden_size, hidden_size, bias=False)
    ```

    Use instead:
    ```python
    self.o_proj = RowParallelLinear(
        hidden_size, hidden_size, bias=False, quant_config=quant_config,
        prefix=f"{prefix}.o_proj",
    )
    ```
    """

    code = "PFX402"
    triggers = ("Linear(", "Embedding(")

    VALID = [
        example(
            """
class Attn(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.o_proj = RowParallelLinear(8, 8, prefix=f"{prefix}.o_proj")
        self.attn = Attention(4, 2, 1.0, prefix=f"{prefix}.attn")
        self.pos_embed = nn.Embedding(16, 8)
"""
        ),
        example(
            """
class VisionAttention(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.q_proj = nn.Linear(8, 8)

class ForCausalLM(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.vision = VisionAttention(prefix=f"{prefix}.vision")
"""
        ),
    ]
    INVALID = [
        Invalid(
            example(
                """
from vllm.model_executor.layers.fused_moe import FusedMoE

class MyMoE(nn.Module):
    def __init__(self, hidden: int, experts: int, prefix: str = ""):
        super().__init__()
        self.gate = nn.Linear(hidden, experts, bias=False)
        self.experts = FusedMoE(experts, 2, hidden, 4 * hidden, prefix=f"{prefix}.experts")
"""
            ),
            line=7,
            contains="router",
        ),
        Invalid(
            example(
                """
class Attn(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.o_proj = nn.Linear(8, 8, bias=False)
        self.attn = Attention(4, 2, 1.0, prefix=f"{prefix}.attn")
"""
            ),
            line=5,
            contains="RowParallelLinear",
        ),
        Invalid(
            example(
                """
from torch.nn import Embedding

class MyMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj = torch.nn.Linear(8, 16)

class MyModel(nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.embed_tokens = Embedding(vocab, 8)
        self.layers = nn.ModuleList([MyDecoderLayer() for _ in range(2)])

class MyDecoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = MyMLP()

class MyForCausalLM(nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.model = MyModel(vocab)
"""
            ),
            line=7,
            contains="nn.Linear",
        ),
    ]

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self._decoder = DecoderClasses()
        self._found: list[tuple[str, cst.Call, str, str, Where]] = []
        self._routers: list[tuple[str, cst.Call, str, Where]] = []
        self._moe: set[str] = set()  # classes that build vLLM's fused MoE layer

    def visit_Call(self, node: cst.Call, callee: str | None) -> None:
        self._decoder.note_call(self, callee)
        top = top_class_name(self)
        if callee is not None and top is not None and _MOE_LAYER.match(callee.rsplit(".", 1)[-1]):
            self._moe.add(top)
        if callee is None or callee.rsplit(".", 1)[-1] not in ("Linear", "Embedding"):
            return
        plain = _PLAIN_LAYERS.get(qualified_callee(self, callee) or "")
        top = top_class_name(self)
        if plain is None or top is None:
            return
        attr = _stored_at(tuple(self.ctx.prefixes.anchors), node)
        if attr is None:
            return
        if plain == "nn.Linear" and _ROUTER_ATTRIBUTE.match(attr):
            self._routers.append((top, node, attr, self.here()))
        elif _SHARDED_ATTRIBUTE.match(attr):
            self._found.append((top, node, plain, attr, self.here()))

    def visit_Name(self, node: cst.CSTNode, name: str) -> None:
        self._decoder.note_name(self, name)

    def visit_FunctionDef(self, node: cst.FunctionDef, class_node: cst.ClassDef | None) -> None:
        self._decoder.note_function(self, node)

    def leave_Module(self) -> None:
        for top, node, attr, where in self._routers:
            if top in self._moe or _MOE_CLASS.search(top):
                self.report(
                    node,
                    f"`self.{attr}` is a plain `nn.Linear` router in MoE block `{top}`: it "
                    "takes no prefix, so a quantization config can neither match nor "
                    "exclude it by name, and LoRA cannot find it; use `ReplicatedLinear` "
                    f'(or `GateLinear`) with `prefix=f"{{prefix}}.{attr}"`',
                    site=where,
                )
        if not self._found:
            return
        decoder = self._decoder.compute(self)
        for top, node, plain, attr, where in self._found:
            if top not in decoder:
                continue
            replacement = _REPLACEMENT[plain]
            if attr == "lm_head":
                replacement = "`ParallelLMHead`"
            self.report(
                node,
                f"`self.{attr}` is a plain `{plain}` in decoder class `{top}`: it is not "
                f"sharded under tensor parallelism, cannot be quantized and has no prefix; "
                f"use {replacement}",
                site=where,
            )
