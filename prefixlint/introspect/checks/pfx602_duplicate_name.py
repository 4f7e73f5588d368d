"""PFX602: two layers are registered under one name."""

from __future__ import annotations

import traceback
from collections import Counter
from collections.abc import Callable
from typing import Any, ClassVar

from prefixlint.introspect.checks.base import (
    BuildCheck,
    Case,
    FailureCheck,
    Findings,
    Subject,
    View,
    ancestors,
    model_frame,
)
from prefixlint.introspect.finding import Finding


class DuplicateLayerName(FailureCheck):
    """## What it does
    Reads vLLM's own "Duplicate layer name" error raised while the model was built, and
    finds the model's frame that made the duplicate.

    ## Details
    vLLM's own 'Duplicate layer name' error, or two leaf layers (linear, attention,
    embedding) given the same prefix: they would share one quantization lookup and one
    KV-cache slot. Usually a literal prefix, or a loop whose prefix lacks the index.

    ## Why is this bad?
    Two attention layers under one name share one KV-cache slot and one quantization
    lookup; vLLM refuses to start.

    ## Example
    `self.attn = Attention(..., prefix="attn")`: a literal prefix, the same in every layer.

    ## Fix
    Derive the prefix from the parent's: `prefix=f"{prefix}.attn"`.
    """

    code = "PFX602"
    examples: ClassVar[tuple[Case, ...]] = (
        Case(
            "LlamaAttention",
            'prefix=f"{prefix}.attn",',
            'prefix="attn",',
            "self.attn = attn_cls(",
            tp=(1, 2),
            pp=(2,),
        ),
    )

    def judge(self, build: Any, subject: Subject) -> Finding | None:
        text = str(build.error)
        if "Duplicate layer name" not in text:
            return None
        file, line = _duplicate_frame(build, build.recorder.external)
        message = f"two layers register under one name; vLLM: {text.strip()[:200]}"
        return Finding(self.code, "error", message, *((file, line) if file else subject.class_site))


class DuplicateLeafName(BuildCheck):
    """## What it does
    Finds two leaf layers (linear, attention, embedding) of a built model given the same
    prefix.

    ## Why is this bad?
    They share one quantization lookup and one KV-cache slot.

    ## Example
    `self.down_proj = RowParallelLinear(..., prefix=f"{prefix}.gate_up_proj")` beside the
    real `gate_up_proj`.

    ## Fix
    Give each layer the name of its own attribute.
    """

    code = "PFX602"
    examples: ClassVar[tuple[Case, ...]] = (
        Case(
            "LlamaMLP",
            'prefix=f"{prefix}.down_proj",',
            'prefix=f"{prefix}.gate_up_proj",',
            "self.down_proj = RowParallelLinear(",
        ),
    )

    def check(self, view: View, subject: Subject, out: Findings) -> None:
        leaves: dict[str, list[tuple[str, Any]]] = {}
        for path, r in view.by_path.items():
            if view.is_container(path) or r.prefix == "" or path in view.delegating:
                continue
            if view.wrong(path) and any(
                view.wrong(a) for a in ancestors(path) if a in view.by_path
            ):
                continue  # named wrong because an ancestor is: reported there
            leaves.setdefault(r.prefix, []).append((path, r))
        for prefix, same in leaves.items():
            if len(same) < 2:
                continue
            first_path, first = min(same, key=lambda x: x[1].order)
            for path, r in same:
                if r is not first:
                    message = (
                        f"`{r.cls}` at `{path}` has the prefix `{prefix}` of another layer "
                        f"(`{first_path}`)"
                    )
                    finding = Finding(self.code, "error", message, r.site_file, r.site_line)
                    out.add(finding, view.build, path)


def _duplicate_frame(build: Any, external: Callable[[str], bool]) -> tuple[str, int]:
    """Where a duplicate layer name was made: walking out from the failing construction,
    each model-code frame that itself received a name another module already has only
    passes the duplicate on; the first frame whose own name is unique made it (a literal
    prefix, or a call in a loop that leaves out the index)."""
    records = [r for r in build.recorder.records.values() if r.prefix is not None]
    by_class = Counter((type(r.module), r.prefix) for r in records)
    by_name = Counter(r.prefix for r in records)
    frames = [(f, line) for f, line in traceback.walk_tb(build.error_tb)]
    for frame, line in reversed(frames):
        file = frame.f_code.co_filename
        if not external(file):
            continue
        prefix = frame.f_locals.get("prefix")
        if not isinstance(prefix, str):
            continue
        owner = frame.f_locals.get("self")
        repeated = by_class[(type(owner), prefix)] if owner is not None else by_name[prefix]
        if repeated < 2:
            return file, line
    return model_frame(build.error_tb, external)
