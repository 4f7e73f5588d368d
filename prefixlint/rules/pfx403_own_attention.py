"""PFX403 own-attention."""

from __future__ import annotations

import libcst as cst

from prefixlint.diagnostic import Severity
from prefixlint.static.decoder_classes import DecoderClasses, top_class_name
from prefixlint.static.prefix_sites import dotted_name
from prefixlint.static.rule import CONTRACT, FileContext, Invalid, LintRule, Where, example
from prefixlint.static.walk import walk

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
    SDPA, are not checked. An error where the class builds vLLM's `Attention` (its KV
    cache) and attends by hand beside it; a note for an inner sequence of a model whose
    decoder keeps its attention in vLLM's layers (a code predictor over residual codebooks).

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
    applies_to = CONTRACT
    triggers = (
        "scaled_dot_product_attention",
        "softmax",
        "flash_attn",
        "xformers",
        "matmul(",
        "bmm(",
        " @ ",
        "transpose(",
        ".mT",
    )

    VALID = [
        example(
            """
class MyAttention(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.attn = Attention(4, 2, 1.0, prefix=f"{prefix}.attn")

    def forward(self, q, k, v):
        return self.attn(q, k, v)
"""
        ),
        example(
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
            example(
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
            line=4,
            contains="scaled_dot_product_attention",
        ),
        Invalid(
            example(
                """
class MyDecoderLayer(nn.Module):
    def forward(self, q, k, v):
        scores = q @ k.transpose(-2, -1) * self.scale
        probs = torch.softmax(scores, dim=-1)
        return probs @ v
"""
            ),
            line=5,
            contains="softmax",
        ),
        Invalid(
            example(
                """
class MyDecoderLayer(nn.Module):
    def _scores(self, q, k):  # the score matmul in one method...
        return torch.matmul(q, k.mT) * self.scale

    def forward(self, q, k, v):  # ...the softmax in another
        probs = torch.softmax(self._scores(q, k), dim=-1)
        return torch.matmul(probs, v)
"""
            ),
            line=7,
            contains="softmax",
        ),
        Invalid(
            example(
                """
class MyAttention(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.attn = Attention(4, 2, 1.0, prefix=f"{prefix}.attn")

    def forward(self, q, k, v):  # vLLM's layer built, then bypassed
        probs = torch.softmax(q @ k.transpose(-2, -1), dim=-1)
        return probs @ v

class MyDecoderLayer(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.self_attn = MyAttention(prefix=f"{prefix}.self_attn")
"""
            ),
            line=8,
            contains="neither written nor read",
        ),
    ]

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self._decoder = DecoderClasses()
        self._found: list[tuple[str, cst.Call, str, bool, Where]] = []
        self._functions: dict[str, list[cst.FunctionDef]] = {}

    def visit_Call(self, node: cst.Call, callee: str | None) -> None:
        self._decoder.note_call(self, callee)
        if callee is None:
            return
        short = callee.rsplit(".", 1)[-1]
        top = top_class_name(self)
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
        top = top_class_name(self)
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
            message = (
                f"decoder class `{top}` computes attention itself with {what}: it bypasses "
                "the paged KV cache and the batch's request boundaries; use vLLM's "
                "`Attention` layer"
            )
            severity = None
            cache = self._own_cache_layer(top)
            if cache is not None:
                # the decoder's own attention: it builds the layer that owns its KV cache,
                # then attends without it, so the cache is never written or read
                severity = Severity.ERROR
                message += (
                    f" (an error: `{top}` builds `self.{cache}`, the layer vLLM allocates "
                    "its KV cache for, but never attends through it: the KV cache is "
                    "neither written nor read, so each decode step attends to its own "
                    "token only and loses the context)"
                )
            elif self.ctx.beside_paged_attention(top):
                # The model keeps its decoder's attention in vLLM's layers; this one is a
                # second, inner sequence it builds and attends to within one step.
                severity = Severity.NOTE
                message += (
                    f" (a note: {self.ctx.inner_part(top)}, and that model keeps its "
                    "decoder's attention in vLLM's cache layers; this one attends over a "
                    "sequence the model builds within a step, such as residual codebooks)"
                )
            self.report(node, message, severity=severity, site=where)

    def _own_cache_layer(self, top: str) -> str | None:
        """The attribute at which class ``top`` builds a layer that owns an engine cache
        (vLLM's ``Attention``), or None."""
        for site in self.ctx.prefixes.sites:
            owner = next((a for a in site.anchors if isinstance(a, cst.ClassDef)), None)
            if owner is None or owner.name.value != top or site.expected is None:
                continue
            if self.ctx.owns_cache(site.callee):
                return site.expected.path
        return None
