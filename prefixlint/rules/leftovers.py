"""PFX401-PFX404: what a port from reference (Hugging Face) code must leave behind.

vLLM owns communication, attention, the KV cache, the generation loop and sampling. A model
file that still does any of these itself is usually a half-finished port: it runs at TP=1
and breaks (or silently computes something else) as soon as the engine's assumptions apply.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import libcst as cst

from prefixlint.catalog import DECODER_ATTENTION_LAYERS
from prefixlint.diagnostic import Severity
from prefixlint.rules.base import FileContext, Invalid, LintRule, Where
from prefixlint.rules.prefixes import dotted_name
from prefixlint.rules.walk import walk

_HEADER = """
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from vllm.distributed import get_tp_group, tensor_model_parallel_all_reduce
from vllm.model_executor.layers.linear import QKVParallelLinear, RowParallelLinear
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead
from vllm.model_executor.layers.attention import Attention
from vllm.model_executor.models.utils import make_layers, maybe_prefix
"""


def _example(body: str) -> str:
    return _HEADER + body


def _qualified(rule: LintRule, callee: str | None) -> str | None:
    if callee is None:
        return None
    return rule.ctx.resolver.qualified_name(rule.ctx.summary, callee)


def _top_class(rule: LintRule) -> str | None:
    stack = rule.ctx.prefixes.class_stack
    return stack[0].name.value if stack else None


def _names_in(node: cst.CSTNode) -> set[str]:
    """Every identifier in an expression or statement (Name values and attribute names)."""
    out: set[str] = set()
    for sub in walk(node):
        if isinstance(sub, cst.Name):
            out.add(sub.value)
    return out


# -- PFX401 ---------------------------------------------------------------------------------

# ``torch.distributed`` functions that communicate.
_TORCH_COLLECTIVES = frozenset(
    {
        "all_reduce",
        "all_gather",
        "all_gather_into_tensor",
        "_all_gather_base",
        "all_gather_object",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "_reduce_scatter_base",
        "all_to_all",
        "all_to_all_single",
        "broadcast",
        "broadcast_object_list",
        "reduce",
        "gather",
        "scatter",
        "send",
        "recv",
        "isend",
        "irecv",
        "batch_isend_irecv",
        "barrier",
    }
)
# vLLM's functional wrappers (vllm.distributed.communication_op).
_VLLM_COLLECTIVES = frozenset(
    {
        "tensor_model_parallel_all_reduce",
        "tensor_model_parallel_all_gather",
        "tensor_model_parallel_reduce_scatter",
        "tensor_model_parallel_gather",
        "broadcast_tensor_dict",
    }
)
# Methods of vLLM's GroupCoordinator that communicate, called on ``get_*_group()``.
_GROUP_METHODS = frozenset(
    {
        "all_reduce",
        "all_gather",
        "all_gatherv",
        "reduce_scatter",
        "reduce_scatterv",
        "gather",
        "all_to_all",
        "broadcast",
        "broadcast_object",
        "broadcast_tensor_dict",
        "send",
        "recv",
        "send_object",
        "recv_object",
        "send_tensor_dict",
        "recv_tensor_dict",
        "barrier",
    }
)
_GROUP_GETTERS = re.compile(
    r"^(get_(tp|pp|dp|ep|pcp|dcp|world|tensor_model_parallel|pipeline_model_parallel)_group"
    r"|get_(tp|pp|dp|ep)_group)$"
)
# Names that show code is written for the sharded case on purpose (a TP-size test, a
# sequence-parallel flag, the rank): such code manages its own communication knowingly.
_PARALLEL_STATE = re.compile(
    r"(world_size|tp_size|tp_rank|_rank$|^rank$|sequence_parallel|is_sequence_parallel"
    r"|reduce_scatter_for|tp_group|^sp_|_sp$|dp_size|ep_size|num_ranks)"
)


def _is_reduce(kind: str) -> bool:
    return kind.endswith("all_reduce") or kind == "reduce"


@dataclass
class _Collective:
    node: cst.Call
    shown: str
    kind: str  # the short name: all_reduce, all_gather, ...
    raw_torch: bool
    where: Where
    guarded: bool


class DirectCollective(LintRule):
    """
    ## What it does
    Checks for collective communication written in the model: `torch.distributed`
    collectives, vLLM's `tensor_model_parallel_all_reduce` / `_all_gather` /
    `_reduce_scatter`, and `get_tp_group().all_reduce(...)`-style calls on a process group.

    Calls that are plainly deliberate are not reported: `torch.distributed` calls given an
    explicit `group=`; an all-reduce in a file that defers a layer's reduction
    (`reduce_results=False`, the usual fused-MoE and parallel-residual pattern); and calls
    in code written for the sharded case (under an `if` on the TP size or a
    sequence-parallel flag, or in a function that reads the TP size or rank).

    ## Why is this bad?
    The parallel layers own communication: `RowParallelLinear` all-reduces its output,
    `ColumnParallelLinear(gather_output=True)` gathers, `VocabParallelEmbedding` reduces. An
    extra all-reduce after them sums already-complete results (wrong output at TP > 1, right
    output at TP = 1, so tests on one GPU pass). A `torch.distributed` call without a group
    runs over the *world* group, which also spans pipeline and data-parallel ranks: it
    mixes unrelated tensors or hangs.

    ## Example
    ```python
    out, _ = self.o_proj(attn_output)  # RowParallelLinear: already reduced
    out = tensor_model_parallel_all_reduce(out)
    ```

    Use instead:
    ```python
    out, _ = self.o_proj(attn_output)
    ```
    """

    code = "PFX401"
    name = "direct-collective"
    severity = Severity.WARNING
    summary = "Model code calls a collective itself instead of leaving it to parallel layers"

    VALID = [
        _example(
            """
class Attn(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.o_proj = RowParallelLinear(8, 8, prefix=f"{prefix}.o_proj")

    def forward(self, x):
        out, _ = self.o_proj(x)
        return out
"""
        ),
        _example(
            """
class MoE(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.down = RowParallelLinear(8, 8, reduce_results=False, prefix=f"{prefix}.down")

    def forward(self, x):
        out, _ = self.down(x)
        return tensor_model_parallel_all_reduce(out)
"""
        ),
        _example(
            """
class Block(nn.Module):
    def forward(self, x):
        if self.is_sequence_parallel:
            x = get_tp_group().all_gather(x, 0)
        dist.all_gather([x, x], x, group=get_tp_group().device_group)
        return x
"""
        ),
    ]
    INVALID = [
        Invalid(
            _example(
                """
class Attn(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.o_proj = RowParallelLinear(8, 8, prefix=f"{prefix}.o_proj")

    def forward(self, x):
        out, _ = self.o_proj(x)
        return tensor_model_parallel_all_reduce(out)
"""
            ),
            line=19,
            contains="tensor_model_parallel_all_reduce",
        ),
        Invalid(
            _example(
                """
class MLP(nn.Module):
    def forward(self, x):
        y = self.fc(x)
        torch.distributed.all_reduce(y)
        return y
"""
            ),
            line=15,
            contains="world",
        ),
        Invalid(
            _example(
                """
class MLP(nn.Module):
    def forward(self, x):
        return get_tp_group().all_reduce(self.fc(x))
"""
            ),
            line=14,
            contains="get_tp_group().all_reduce",
        ),
    ]

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self._found: list[_Collective] = []
        self._defers_reduction = False

    def visit_Call(self, node: cst.Call, callee: str | None) -> None:
        for arg in node.args:
            kw = arg.keyword.value if arg.keyword is not None else ""
            if "reduce" in kw and not (
                isinstance(arg.value, cst.Name) and arg.value.value == "True"
            ):
                self._defers_reduction = True  # reduce_results=False / a computed flag
        found = self._classify(node, callee)
        if found is None:
            return
        shown, kind, raw = found
        if raw and any(a.keyword is not None and a.keyword.value == "group" for a in node.args):
            return  # an explicit group: deliberate
        self._found.append(
            _Collective(node, shown, kind, raw, self.here(), self._guarded(node, raw))
        )

    def _classify(self, node: cst.Call, callee: str | None) -> tuple[str, str, bool] | None:
        func = node.func
        if callee is None:
            # ``get_tp_group().all_reduce(x)``
            if (
                isinstance(func, cst.Attribute)
                and isinstance(func.value, cst.Call)
                and func.attr.value in _GROUP_METHODS
            ):
                getter = dotted_name(func.value.func)
                if getter and _GROUP_GETTERS.match(getter.rsplit(".", 1)[-1]):
                    short = getter.rsplit(".", 1)[-1]
                    return f"{short}().{func.attr.value}", func.attr.value, False
            return None
        short = callee.rsplit(".", 1)[-1]
        if short not in _TORCH_COLLECTIVES and short not in _VLLM_COLLECTIVES:
            return None
        head = callee.split(".")[0]
        if head in self.ctx.summary.functions or head in self.ctx.summary.classes:
            return None  # a local helper of that name
        qualified = _qualified(self, callee) or callee
        if short in _TORCH_COLLECTIVES and (
            qualified.startswith("torch.distributed.") and qualified.count(".") == 2
        ):
            return callee, short, True
        if short in _TORCH_COLLECTIVES and qualified.startswith("torch.ops.vllm."):
            return callee, short, False
        if short in _VLLM_COLLECTIVES and (
            qualified.startswith("vllm.")
            or ("." not in callee and head not in self.ctx.summary.imports)
        ):
            return callee, short.replace("tensor_model_parallel_", ""), False
        return None

    def _guarded(self, node: cst.Call, raw: bool) -> bool:
        """Under an ``if`` on parallel state, or in a function that reads it."""
        own = _names_in(node)
        for anchor in self.ctx.prefixes.anchors:
            if isinstance(anchor, (cst.If, cst.While)) and any(
                _PARALLEL_STATE.search(n) for n in _names_in(anchor.test)
            ):
                return True
        if raw:
            return False  # a raw call without a group is wrong whatever the context
        functions = self.ctx.prefixes.function_stack
        if functions:
            names = _names_in(functions[-1].body) - own
            if any(_PARALLEL_STATE.search(n) for n in names):
                return True
        return False

    def leave_Module(self) -> None:
        for c in self._found:
            if c.guarded:
                continue
            if c.raw_torch:
                self.report(
                    c.node,
                    f"`{c.shown}` runs over the default (world) process group, which spans "
                    "pipeline and data-parallel ranks too; the parallel layers own "
                    "communication (pass vLLM's group explicitly if this is really needed)",
                    site=c.where,
                )
                continue
            if _is_reduce(c.kind) and self._defers_reduction:
                continue
            why = (
                "parallel layers already reduce their outputs (`RowParallelLinear`, "
                "`FusedMoE`), so a second all-reduce sums complete results"
                if _is_reduce(c.kind)
                else "the parallel layers own communication"
            )
            self.report(
                c.node,
                f"`{c.shown}` in model code: {why}; leave it to the layer, or build the "
                "layer with `reduce_results=False` when the reduction is deferred on purpose",
                site=c.where,
            )


# -- decoder classes (PFX402, PFX403) ---------------------------------------------------------

_DECODER_ATTENTION = DECODER_ATTENTION_LAYERS
_LM_LAYERS = frozenset({"VocabParallelEmbedding", "ParallelLMHead", "make_layers"})
_DECODER_NAME = re.compile(r"(DecoderLayer|DecoderBlock|ForCausalLM)$")
# Classes of encoders and adapters: a vision or audio tower legitimately uses plain layers
# and SDPA (vLLM runs many of them replicated), so the decoder label does not flow into them.
_TOWER_NAME = re.compile(
    r"(Vision|Visual|ViT|Vit[A-Z]|Image|Audio|Speech|Whisper|Siglip|SigLIP|Clip|CLIP|"
    r"Projector|Resampler|Connector|Perceiver|Patch|Encoder|Tower|Pixel|Video|Merger|Adapter)"
)
_TEXT_NAME = re.compile(r"(Decoder|CausalLM|LanguageModel|TextModel|Text[A-Z])")


def _is_tower(name: str) -> bool:
    return bool(_TOWER_NAME.search(name)) and not _TEXT_NAME.search(name)


@dataclass
class _ClassFacts:
    builds: set[str] = field(default_factory=set)  # local classes it constructs or names
    seed: bool = False  # builds vLLM decoder attention, a vocab-parallel layer, make_layers


def _is_vllm_decoder_layer(rule: LintRule, name: str) -> bool:
    short = name.rsplit(".", 1)[-1]
    if short not in _DECODER_ATTENTION and short not in _LM_LAYERS:
        return False
    head = name.split(".")[0]
    if head not in rule.ctx.summary.imports:
        return False
    return (_qualified(rule, name) or name).startswith("vllm.")


class _DecoderClasses:
    """Which top-level classes of a file are part of a text decoder.

    A class is a decoder class when it builds vLLM's decoder ``Attention``, a vocab-parallel
    embedding or head, or calls ``make_layers``; or when it is named like a decoder layer or
    a causal LM; or when a decoder class constructs it, unless it is named like a vision or
    audio tower, projector or adapter.
    """

    def __init__(self) -> None:
        self.facts: dict[str, _ClassFacts] = {}

    def note_call(self, rule: LintRule, callee: str | None) -> None:
        top = _top_class(rule)
        if top is None or callee is None:
            return
        facts = self.facts.setdefault(top, _ClassFacts())
        head = callee.split(".")[0]
        if head in rule.ctx.summary.classes and "." not in callee:
            facts.builds.add(head)
            return
        if _is_vllm_decoder_layer(rule, callee):
            facts.seed = True

    def note_name(self, rule: LintRule, name: str) -> None:
        """A class named, not called: ``attn_cls = Attention``, ``layer_type=MyLayer``."""
        top = _top_class(rule)
        if top is None:
            return
        if name in rule.ctx.summary.classes:
            if name != top:
                self.facts.setdefault(top, _ClassFacts()).builds.add(name)
        elif _is_vllm_decoder_layer(rule, name):
            self.facts.setdefault(top, _ClassFacts()).seed = True

    def note_function(self, rule: LintRule, node: cst.FunctionDef) -> None:
        """Classes given as parameter defaults (``attn_layer_type=LlamaAttention``)."""
        p = node.params
        for param in (*p.posonly_params, *p.params, *p.kwonly_params):
            if param.default is not None:
                name = dotted_name(param.default)
                if name:
                    self.note_name(rule, name)

    def compute(self, rule: LintRule) -> set[str]:
        classes = rule.ctx.summary.classes
        todo = [
            name
            for name in classes
            if self.facts.get(name, _ClassFacts()).seed
            or (_DECODER_NAME.search(name) and not _is_tower(name))
        ]
        out: set[str] = set()
        while todo:
            name = todo.pop()
            if name in out:
                continue
            out.add(name)
            for built in self.facts.get(name, _ClassFacts()).builds:
                if built not in out and not _is_tower(built):
                    todo.append(built)
        return out


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
    `gate_up_proj`, `down_proj`, `fc1`, `c_attn`, ...), the token embedding and the LM head.

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
    name = "non-parallel-layer"
    severity = Severity.WARNING
    summary = "A decoder projection, embedding or head is a plain `nn.Linear`/`nn.Embedding`"

    VALID = [
        _example(
            """
class Attn(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.o_proj = RowParallelLinear(8, 8, prefix=f"{prefix}.o_proj")
        self.attn = Attention(4, 2, 1.0, prefix=f"{prefix}.attn")
        self.pos_embed = nn.Embedding(16, 8)
"""
        ),
        _example(
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
            _example(
                """
class Attn(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.o_proj = nn.Linear(8, 8, bias=False)
        self.attn = Attention(4, 2, 1.0, prefix=f"{prefix}.attn")
"""
            ),
            line=15,
            contains="RowParallelLinear",
        ),
        Invalid(
            _example(
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
            line=17,
            contains="nn.Linear",
        ),
    ]

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self._decoder = _DecoderClasses()
        self._found: list[tuple[str, cst.Call, str, str, Where]] = []

    def visit_Call(self, node: cst.Call, callee: str | None) -> None:
        self._decoder.note_call(self, callee)
        if callee is None or callee.rsplit(".", 1)[-1] not in ("Linear", "Embedding"):
            return
        plain = _PLAIN_LAYERS.get(_qualified(self, callee) or "")
        top = _top_class(self)
        if plain is None or top is None:
            return
        attr = _stored_at(tuple(self.ctx.prefixes.anchors), node)
        if attr is None or not _SHARDED_ATTRIBUTE.match(attr):
            return
        self._found.append((top, node, plain, attr, self.here()))

    def visit_Name(self, node: cst.CSTNode, name: str) -> None:
        self._decoder.note_name(self, name)

    def visit_FunctionDef(self, node: cst.FunctionDef, class_node: cst.ClassDef | None) -> None:
        self._decoder.note_function(self, node)

    def leave_Module(self) -> None:
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


# -- PFX403 ---------------------------------------------------------------------------------

_FUSED_ATTENTION = frozenset(
    {
        "scaled_dot_product_attention",
        "flash_attn_func",
        "flash_attn_varlen_func",
        "flash_attn_qkvpacked_func",
        "memory_efficient_attention",
    }
)
_MATMUL_FUNCS = frozenset({"matmul", "bmm", "baddbmm"})


def _is_transposed(node: cst.CSTNode) -> bool:
    for sub in walk(node):
        if isinstance(sub, cst.Attribute) and sub.attr.value in ("mT", "T", "mH", "H"):
            return True
        if (
            isinstance(sub, cst.Call)
            and isinstance(sub.func, cst.Attribute)
            and sub.func.attr.value in ("transpose", "permute", "t")
        ):
            return True
    return False


def _has_score_matmul(function: cst.CSTNode) -> bool:
    """``q @ k.transpose(-1, -2)`` or ``torch.matmul(q, k.transpose(...))`` in a function."""
    for sub in walk(function):
        if isinstance(sub, cst.BinaryOperation) and isinstance(sub.operator, cst.MatrixMultiply):
            if _is_transposed(sub.right):
                return True
        elif isinstance(sub, cst.Call):
            name = dotted_name(sub.func)
            if (
                name
                and name.rsplit(".", 1)[-1] in _MATMUL_FUNCS
                and any(_is_transposed(a.value) for a in sub.args[:3])
            ):
                return True
    return False


class OwnAttention(LintRule):
    """
    ## What it does
    Checks for attention computed by hand in a text decoder: `scaled_dot_product_attention`,
    direct `flash_attn` / `xformers` calls, or a softmax in a class that multiplies
    queries by transposed keys (`q @ k.transpose(-2, -1)`, `torch.matmul(q, k.mT)`).
    Decoder classes are found as for PFX402; vision and audio towers, which vLLM runs with
    SDPA, are not checked.

    ## Why is this bad?
    vLLM's `Attention` layer is where the paged KV cache lives: it writes this step's keys
    and values into the cache blocks, reads the request's earlier tokens from them, and
    keeps requests of a flat batch apart. Hand-written attention sees only the tokens of
    the current step, mixes requests that share the batch, and has no cache: output is
    wrong for every token after the prompt.

    ## Example
    ```python
    attn_output = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    ```

    Use instead:
    ```python
    self.attn = Attention(num_heads, head_dim, scaling, num_kv_heads=num_kv_heads,
                          cache_config=cache_config, quant_config=quant_config,
                          prefix=f"{prefix}.attn")
    ...
    attn_output = self.attn(q, k, v)
    ```
    """

    code = "PFX403"
    name = "own-attention"
    severity = Severity.WARNING
    summary = "A decoder computes attention itself instead of using vLLM's `Attention`"

    VALID = [
        _example(
            """
class MyAttention(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.attn = Attention(4, 2, 1.0, prefix=f"{prefix}.attn")

    def forward(self, q, k, v):
        return self.attn(q, k, v)
"""
        ),
        _example(
            """
class VisionAttention(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)

class MyMoE(nn.Module):
    def forward(self, x):
        return torch.softmax(self.gate(x), dim=-1)

class MyDecoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.moe = MyMoE()
"""
        ),
    ]
    INVALID = [
        Invalid(
            _example(
                """
class MyAttention(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

class MyDecoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = MyAttention()
"""
            ),
            line=14,
            contains="scaled_dot_product_attention",
        ),
        Invalid(
            _example(
                """
class MyDecoderLayer(nn.Module):
    def forward(self, q, k, v):
        scores = q @ k.transpose(-2, -1) * self.scale
        probs = torch.softmax(scores, dim=-1)
        return probs @ v
"""
            ),
            line=15,
            contains="softmax",
        ),
    ]

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self._decoder = _DecoderClasses()
        self._found: list[tuple[str, cst.Call, str, bool, Where]] = []
        self._functions: dict[str, list[cst.FunctionDef]] = {}

    def visit_Call(self, node: cst.Call, callee: str | None) -> None:
        self._decoder.note_call(self, callee)
        if callee is None:
            return
        short = callee.rsplit(".", 1)[-1]
        top = _top_class(self)
        if top is None:
            return
        if short in _FUSED_ATTENTION:
            self._found.append((top, node, short, False, self.here()))
        elif short == "softmax":
            self._found.append((top, node, short, True, self.here()))

    def visit_Name(self, node: cst.CSTNode, name: str) -> None:
        self._decoder.note_name(self, name)

    def visit_FunctionDef(self, node: cst.FunctionDef, class_node: cst.ClassDef | None) -> None:
        self._decoder.note_function(self, node)
        top = _top_class(self)
        if top is not None:
            self._functions.setdefault(top, []).append(node)

    def leave_Module(self) -> None:
        if not self._found:
            return
        decoder = self._decoder.compute(self)
        scored: dict[str, bool] = {}
        for top, node, short, is_softmax, where in self._found:
            if top not in decoder:
                continue
            if is_softmax:
                # The scores are often computed in ``forward`` and normalised in a helper.
                if top not in scored:
                    scored[top] = any(_has_score_matmul(f) for f in self._functions.get(top, []))
                if not scored[top]:
                    continue
                what = "a softmax over `q @ k^T` scores"
            else:
                what = f"`{short}`"
            self.report(
                node,
                f"decoder class `{top}` computes attention itself with {what}: it bypasses "
                "the paged KV cache and the batch's request boundaries; use vLLM's "
                "`Attention` layer",
                site=where,
            )


# -- PFX404 ---------------------------------------------------------------------------------

_GENERATION_METHODS = frozenset({"generate", "prepare_inputs_for_generation", "_reorder_cache"})
_KV_NAMES = frozenset({"past_key_values", "past_key_value", "layer_past", "use_cache"})
_SAMPLING = frozenset(
    {
        "torch.multinomial",
        "torch.distributions.Categorical",
        "torch.distributions.categorical.Categorical",
    }
)
_SAMPLING_SHORT = frozenset({"top_k_top_p_filtering", "sample_top_p"})


class GenerationLeftover(LintRule):
    """
    ## What it does
    Checks model classes (`nn.Module`s) for what belongs to a generation loop: a `generate`,
    `prepare_inputs_for_generation` or `_reorder_cache` method; sampling
    (`torch.multinomial`, `torch.distributions.Categorical`, top-k/top-p filtering); and
    KV-cache plumbing (`past_key_values`, `past_key_value`, `layer_past`, `use_cache`).
    KV-cache names are reported once per function. Classes that subclass a Transformers
    model (vLLM occasionally runs one as a tower) are not checked.

    ## Why is this bad?
    vLLM's engine runs the loop, samples and owns the paged KV cache. A `generate` method
    is never called; a model that samples returns tokens where logits are expected;
    `past_key_values` is always `None` (the cache lives inside `Attention`), so code that
    depends on it silently recomputes or drops the context. Such leftovers mark a port
    that was not finished.

    ## Example
    ```python
    def forward(self, input_ids, positions, past_key_values=None, use_cache=False):
        ...
    ```

    Use instead:
    ```python
    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        ...
    ```
    """

    code = "PFX404"
    name = "generation-leftover"
    severity = Severity.WARNING
    summary = "A model class generates, samples or handles a KV cache itself"

    VALID = [
        _example(
            """
class MyForCausalLM(nn.Module):
    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        return self.model(input_ids, positions, intermediate_tensors, inputs_embeds)

    def compute_logits(self, hidden_states):
        return self.logits_processor(self.lm_head, hidden_states)
"""
        ),
        _example(
            """
from transformers import PretrainedConfig

class MyConfig(PretrainedConfig):
    def __init__(self, use_cache=True, **kwargs):
        self.use_cache = use_cache

def sample_noise(n):
    return torch.multinomial(torch.ones(n), 1)
"""
        ),
    ]
    INVALID = [
        Invalid(
            _example(
                """
class MyForCausalLM(nn.Module):
    def forward(self, input_ids, positions):
        return self.model(input_ids, positions)

    def generate(self, input_ids, max_new_tokens=16):
        for _ in range(max_new_tokens):
            logits = self.forward(input_ids, None)
        return input_ids
"""
            ),
            line=16,
            contains="generate",
        ),
        Invalid(
            _example(
                """
class MyAttention(nn.Module):
    def forward(self, hidden_states, layer_past=None, use_cache=False):
        if layer_past is not None:
            hidden_states = torch.cat([layer_past, hidden_states])
        return hidden_states
"""
            ),
            line=13,
            contains="layer_past",
        ),
        Invalid(
            _example(
                """
class MyForCausalLM(nn.Module):
    def forward(self, input_ids, positions):
        logits = self.model(input_ids, positions)
        return torch.multinomial(torch.softmax(logits, -1), 1)
"""
            ),
            line=15,
            contains="multinomial",
        ),
    ]

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self._module_cache: dict[int, bool] = {}
        self._kv_reported: set[int] = set()

    def _in_model_class(self) -> bool:
        stack = self.ctx.prefixes.class_stack
        if not stack:
            return False
        node = stack[-1]
        key = id(node)
        if key not in self._module_cache:
            self._module_cache[key] = self._is_model_class(node)
        return self._module_cache[key]

    def _is_model_class(self, node: cst.ClassDef) -> bool:
        bases = [dotted_name(b.value) for b in node.bases]
        for base in bases:
            if base and (_qualified(self, base) or "").startswith("transformers."):
                return False  # a Transformers model run as is
        stack = self.ctx.prefixes.class_stack
        if node is stack[0] and self.ctx.class_summary(node) is not None:
            return self.ctx.is_module_class(node)
        return any(b and b.rsplit(".", 1)[-1] == "Module" for b in bases)

    def visit_FunctionDef(self, node: cst.FunctionDef, class_node: cst.ClassDef | None) -> None:
        if class_node is None or not self._in_model_class():
            return
        name = node.name.value
        if name in _GENERATION_METHODS and self.ctx.prefixes.class_stack[-1] is class_node:
            self.report(
                node.name,
                f"`{name}` in a model class: vLLM's engine runs the generation loop and "
                "never calls it; delete it",
                site=self._inside(node),
            )
        p = node.params
        params = [*p.posonly_params, *p.params, *p.kwonly_params]
        for param in params:
            if param.name.value in _KV_NAMES:
                self._kv(node, param.name, param.name.value, self._inside(node))
                break

    def visit_Call(self, node: cst.Call, callee: str | None) -> None:
        if not self._in_model_class():
            return
        if callee is not None:
            short = callee.rsplit(".", 1)[-1]
            qualified = _qualified(self, callee) or callee
            if qualified in _SAMPLING or short in _SAMPLING_SHORT:
                self.report(
                    node,
                    f"`{callee}` samples inside the model: vLLM's sampler does that from "
                    "the logits `compute_logits` returns",
                    site=self.here(),
                )
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value in _KV_NAMES:
                self._kv_current(arg.keyword, arg.keyword.value)
                break

    def visit_Name(self, node: cst.CSTNode, name: str) -> None:
        last = name.rsplit(".", 1)[-1]
        if last in _KV_NAMES and self._in_model_class():
            self._kv_current(node, last)

    def _inside(self, function: cst.FunctionDef) -> Where:
        """Locate within ``function``, whether or not the walk has pushed it yet."""
        return self.here(function)

    def _kv_current(self, node: cst.CSTNode, name: str) -> None:
        functions = self.ctx.prefixes.function_stack
        if functions:
            self._kv(functions[-1], node, name, self.here())

    def _kv(self, function: cst.FunctionDef, node: cst.CSTNode, name: str, where: Where) -> None:
        if id(function) in self._kv_reported:
            return
        self._kv_reported.add(id(function))
        self.report(
            node,
            f"`{name}` in `{function.name.value}`: KV-cache handling from the reference "
            "implementation; in vLLM the paged cache lives inside `Attention` and this is "
            "never set",
            site=where,
        )
