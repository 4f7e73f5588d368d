"""PFX402 non-parallel-layer."""

from __future__ import annotations

import libcst as cst

from prefixlint.diagnostic import Severity
from prefixlint.static.decoder_classes import DecoderClasses, qualified_callee, top_class_name
from prefixlint.static.model_classes import in_draft_file
from prefixlint.static.prefix_sites import dotted_name
from prefixlint.static.rule import CONTRACT, FileContext, Invalid, LintRule, Where, example

# -- PFX402 ---------------------------------------------------------------------------------

_PLAIN_LAYERS = {
    "torch.nn.Linear": "nn.Linear",
    "torch.nn.modules.linear.Linear": "nn.Linear",
    "torch.nn.Embedding": "nn.Embedding",
    "torch.nn.modules.sparse.Embedding": "nn.Embedding",
}
# vLLM's mixture-of-experts layers live in this package (``FusedMoE``, ``SharedFusedMoE``,
# ``FusedMoEFactory``, ...): a class that builds one is an MoE block.
_MOE_PACKAGE = "vllm.model_executor.layers.fused_moe"
_REPLACEMENT = {
    "nn.Linear": "`ColumnParallelLinear`/`RowParallelLinear` (or `QKVParallelLinear`, "
    "`MergedColumnParallelLinear`; `ParallelLMHead` for the head)",
    "nn.Embedding": "`VocabParallelEmbedding`",
}


def _is_position_table(call: cst.Call) -> bool:
    """``nn.Embedding(config.max_position_embeddings, ...)``: its size is a number of
    positions (the config's ``*position*`` field), not the vocabulary."""
    first = next((a.value for a in call.args if a.keyword is None), None)
    if first is None:
        first = next(
            (a.value for a in call.args if a.keyword and a.keyword.value == "num_embeddings"), None
        )
    return first is not None and "position" in _BLANK.code_for_node(first).lower()


_BLANK = cst.Module(body=[])


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
    Checks for `nn.Linear` and `nn.Embedding` (however imported) held by a text decoder,
    at any attribute (`q_proj`, `Wi`, `fc1`, `embed_tokens`, ...): vLLM shards and
    quantizes these layers; and for a plain `nn.Linear` in an MoE block (a class that builds
    one of vLLM's MoE layers, those defined in `vllm.model_executor.layers.fused_moe`),
    typically its router, which takes no prefix.

    Decoder classes are the classes that build vLLM's `Attention`, a vocab-parallel
    embedding or head, or call `make_layers`; classes named `...DecoderLayer` or
    `...ForCausalLM`; and the classes those construct, except vision and audio towers,
    projectors and adapters, which vLLM often runs replicated with plain layers. A table of
    positions (`nn.Embedding(config.max_position_embeddings, ...)`) is replicated by design
    and not reported; in a speculative-decoding draft, where vLLM's own MTP and EAGLE heads
    keep their fusion projections (`eh_proj`, `fc`) replicated, a finding is a note. So it is
    in a class that already holds its vocabulary in vLLM's parallel layers (an auxiliary
    codebook table or head), and in a transformer of its own (no vLLM attention anywhere in
    it) built under a model whose decoder uses vLLM's `Attention`.

    A layer built in a branch that never runs under vLLM is not reported: the `else:` of
    `if _vllm_available:` (or the body of `if not _vllm_available:`, the `else` of
    `a if _vllm_available else b`), where the flag is set `True` in a `try:` that imports
    vLLM and `False` in its `except ImportError:`, or is `find_spec("vllm") is not None`,
    in the same module or imported from another. Under vLLM that import succeeds, so the
    fallback is not the model vLLM serves.

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
    applies_to = CONTRACT
    triggers = ("Linear(", "Embedding(")

    VALID = [
        example(
            """
class Attn(nn.Module):
    def __init__(self, config, prefix: str = ""):
        super().__init__()
        self.o_proj = RowParallelLinear(8, 8, prefix=f"{prefix}.o_proj")
        self.attn = Attention(4, 2, 1.0, prefix=f"{prefix}.attn")
        self.pos_embed = nn.Embedding(config.max_position_embeddings, 8)
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
        # a fallback for use without vLLM: never built under it
        example(
            """
try:
    from vllm.model_executor.layers.linear import RowParallelLinear
    _vllm_available = True
except ImportError:
    _vllm_available = False

class MyDecoderLayer(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        if _vllm_available:
            self.o_proj = RowParallelLinear(8, 8, prefix=f"{prefix}.o_proj")
        else:
            self.o_proj = nn.Linear(8, 8)
        self.down_proj = (
            RowParallelLinear(8, 8, prefix=f"{prefix}.down_proj")
            if _vllm_available
            else nn.Linear(8, 8)
        )
"""
        ),
        example(
            """
import importlib.util

HAS_VLLM = importlib.util.find_spec("vllm") is not None

class MyDecoderLayer(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.o_proj = RowParallelLinear(8, 8, prefix=f"{prefix}.o_proj")
        if not HAS_VLLM:
            self.o_proj = nn.Linear(8, 8)
"""
        ),
    ]
    INVALID = [
        # a flag that is not vLLM's availability: both branches may run under vLLM
        Invalid(
            example(
                """
USE_FAST = True

class MyDecoderLayer(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        if USE_FAST:
            self.o_proj = RowParallelLinear(8, 8, prefix=f"{prefix}.o_proj")
        else:
            self.o_proj = nn.Linear(8, 8)
"""
            ),
            line=10,
        ),
        # the vLLM branch itself
        Invalid(
            example(
                """
try:
    import vllm
    _vllm_available = True
except ImportError:
    _vllm_available = False

class MyDecoderLayer(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.down_proj = RowParallelLinear(8, 8, prefix=f"{prefix}.down_proj")
        if _vllm_available:
            self.o_proj = nn.Linear(8, 8)
"""
            ),
            line=13,
        ),
        Invalid(
            example(
                """
from vllm.model_executor.layers.fused_moe import FusedMoEFactory

class MyMoE(nn.Module):
    def __init__(self, hidden: int, experts: int, prefix: str = ""):
        super().__init__()
        self.gate = nn.Linear(hidden, experts, bias=False)
        self.experts = FusedMoEFactory(experts, 2, hidden, 4 * hidden, prefix=f"{prefix}.experts")
"""
            ),
            line=7,
            contains="router",
        ),
        Invalid(
            example(
                """
from vllm.model_executor.layers.fused_moe import FusedMoEOfAnotherRelease

class MyMoE(nn.Module):
    def __init__(self, hidden: int, experts: int, prefix: str = ""):
        super().__init__()
        self.gate = nn.Linear(hidden, experts, bias=False)
        self.experts = FusedMoEOfAnotherRelease(experts, prefix=f"{prefix}.experts")
"""
            ),
            line=7,
            contains="not verified",
        ),
        Invalid(
            example(
                """
from vllm.model_executor.layers.linear import RowParallelLinear

class MyDecoderLayer(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.Wi = nn.Linear(8, 32, bias=False)
        self.Wo = RowParallelLinear(16, 8, bias=False, prefix=f"{prefix}.Wo")
"""
            ),
            line=7,
            contains="`self.Wi`",
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
        self._unknown: dict[str, str] = {}  # class -> a vLLM name it calls that is not found

    def visit_Call(self, node: cst.Call, callee: str | None) -> None:
        self._decoder.note_call(self, callee)
        top = top_class_name(self)
        if callee is not None and top is not None:
            if self._is_moe_layer(callee):
                self._moe.add(top)
            elif (
                missing := self.ctx.resolver.unresolved_vllm(self.ctx.summary, callee)
            ) and missing.startswith(_MOE_PACKAGE + "."):
                # An MoE layer of another release (``fused_moe.FusedMoE``): undecided.
                self._unknown.setdefault(top, missing)
        if callee is None or callee.rsplit(".", 1)[-1] not in ("Linear", "Embedding"):
            return
        plain = _PLAIN_LAYERS.get(qualified_callee(self, callee) or "")
        if plain is None or top is None:
            return
        attr = _stored_at(tuple(self.ctx.prefixes.anchors), node)
        if attr is None:
            return
        if plain == "nn.Embedding" and _is_position_table(node):
            return  # a table of positions, not of the vocabulary: replicated by design
        if self.ctx.off_vllm(node):
            return  # the fallback of a module that works without vLLM: never built under it
        if plain == "nn.Linear":
            self._routers.append((top, node, attr, self.here()))
        self._found.append((top, node, plain, attr, self.here()))

    def _is_moe_layer(self, callee: str) -> bool:
        """One of vLLM's MoE layers, by where vLLM defines it (not by its name)."""
        symbol = self.ctx.resolver.resolve(self.ctx.summary, callee)
        if symbol is None:
            symbol = self.ctx.resolver.vllm_layer(self.ctx.summary, callee)
        module = (symbol.module.module or "") if symbol is not None else ""
        return module == _MOE_PACKAGE or module.startswith(_MOE_PACKAGE + ".")

    def visit_Name(self, node: cst.CSTNode, name: str) -> None:
        self._decoder.note_name(self, name)

    def visit_FunctionDef(self, node: cst.FunctionDef, class_node: cst.ClassDef | None) -> None:
        self._decoder.note_function(self, node)

    def leave_Module(self) -> None:
        routers = set()
        decoder = self._decoder.compute(self)
        for top, node, attr, where in self._routers:
            if top not in self._moe:
                missing = self._unknown.get(top)
                if missing is not None and top not in decoder:
                    self._undecided(top, node, attr, missing, where)
                continue
            routers.add(id(node))
            self.report(
                node,
                f"`self.{attr}` is a plain `nn.Linear` in MoE block `{top}` (its router, or "
                "a gate beside the experts): it takes no prefix, so a quantization config "
                "can neither match nor exclude it by name, and LoRA cannot find it; use "
                f'`ReplicatedLinear` (or `GateLinear`) with `prefix=f"{{prefix}}.{attr}"`',
                site=where,
            )
        if not self._found:
            return
        draft = in_draft_file(self.ctx)
        local = self._decoder.without_paged_attention(decoder)
        for top, node, plain, attr, where in self._found:
            if top not in decoder or id(node) in routers:
                continue
            why = self._replicated_by_design(top, local)
            if why is not None:
                self.report(
                    node,
                    f"`self.{attr}` is a plain `{plain}` in decoder class `{top}` (a note: {why})",
                    severity=Severity.NOTE,
                    site=where,
                )
                continue
            replacement = _REPLACEMENT[plain]
            if attr == "lm_head":
                replacement = "`ParallelLMHead`"
            message = (
                f"`self.{attr}` is a plain `{plain}` in decoder class `{top}`: it is not "
                f"sharded under tensor parallelism, cannot be quantized and has no prefix; "
                f"use {replacement}"
            )
            if draft:
                # vLLM's own MTP and EAGLE heads keep their fusion projections (``eh_proj``,
                # ``fc``) replicated: a draft runs beside the target, not sharded like it.
                message += (
                    " (a note: in a speculative-decoding draft, where vLLM's own MTP and "
                    "EAGLE heads keep such projections replicated)"
                )
            self.report(node, message, severity=Severity.NOTE if draft else None, site=where)

    def _replicated_by_design(self, top: str, local: set[str]) -> str | None:
        """Why a plain layer here is deliberate, on evidence: the class holds its vocabulary
        in vLLM's parallel layers already (this is an auxiliary table or head: codebooks,
        speakers); or it belongs to a transformer of its own under a model that keeps its
        decoder's attention in vLLM's layers (a code predictor, a local decoder)."""
        if self._decoder.holds_vocabulary(top):
            return (
                f"`{top}` holds its vocabulary in vLLM's parallel layers; this is an auxiliary "
                "table or head (codebooks, speakers), replicated by design"
            )
        if top in local and self.ctx.beside_paged_attention(top):
            return (
                f"{self.ctx.inner_part(top)}, which keeps its decoder's attention in vLLM's "
                "layers; this is a transformer of its own that never uses them, replicated "
                "by design"
            )
        return None

    def _undecided(self, top: str, node: cst.Call, attr: str, missing: str, where: Where) -> None:
        source = self.ctx.resolver.loader.vllm
        read = source.origin if source is not None else "the vLLM prefixlint reads"
        self.report(
            node,
            f"not verified: whether `self.{attr}` (a plain `nn.Linear`) is the router of an "
            f"MoE block: `{top}` builds `{missing}`, which {read} does not define, so "
            "prefixlint cannot tell whether it is one of vLLM's MoE layers",
            site=where,
            not_verified=True,
        )
