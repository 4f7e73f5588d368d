"""PFX607: an attention layer's head counts differ from the per-rank counts of its QKV
projection."""

from __future__ import annotations

from typing import ClassVar

from prefixlint.introspect.checks.base import BuildCheck, Case, Findings, Subject, View
from prefixlint.introspect.finding import Finding


class PerRankHeads(BuildCheck):
    """## What it does
    At tp > 1, compares the head counts an `Attention` layer was given with the per-rank
    counts of the QKV projection beside it.

    ## Details
    At tensor-parallel size > 1 the QKV projection splits the heads across ranks; the
    `Attention` beside it must be given the per-rank counts (`total // tp_size`). Global
    counts there shape the KV cache and the attention kernel for heads this rank does
    not hold. Reported at the line that built the attention layer.

    ## Why is this bad?
    Global counts shape the KV cache and the attention kernel for heads this rank does not
    hold.

    ## Example
    `Attention(self.total_num_heads, ...)`.

    ## Fix
    Pass the per-rank counts (`total // tp_size`), as the projection splits them.
    """

    code = "PFX607"
    examples: ClassVar[tuple[Case, ...]] = (
        Case(
            "LlamaAttention",
            "        self.attn = attn_cls(\n            self.num_heads,",
            "        self.attn = attn_cls(\n            self.total_num_heads,",
            "self.attn = attn_cls(",
            tp=(1, 2),
        ),
    )

    def check(self, view: View, subject: Subject, out: Findings) -> None:
        if view.layout.tp <= 1:
            return
        for parent in view.model.modules():
            children = list(parent.children())
            attn = [c for c in children if "layer_name" in vars(c) and hasattr(c, "num_kv_heads")]
            qkv = [
                c for c in children if hasattr(c, "total_num_kv_heads") and hasattr(c, "num_heads")
            ]
            if len(attn) != 1 or len(qkv) != 1:
                continue
            a, q = attn[0], qkv[0]
            if getattr(a, "head_size", None) != getattr(q, "head_size", None):
                continue
            # more query heads than the projection's: global counts. Fewer is a projection
            # that packs more (an output gate doubles its query heads: Qwen3-Next)
            if a.num_kv_heads == q.num_kv_heads and a.num_heads <= q.num_heads:
                continue
            file, line = view.site_of(a, None)
            message = (
                f"`{type(a).__name__}` gets {a.num_heads} query / {a.num_kv_heads} KV heads at "
                f"tp={view.layout.tp}, but the QKV projection beside it gives each rank "
                f"{q.num_heads} / {q.num_kv_heads}: pass the per-rank counts "
                "(`total // tp_size`), as the projection splits them"
            )
            out.add(Finding(self.code, "error", message, file, line), view.build)
