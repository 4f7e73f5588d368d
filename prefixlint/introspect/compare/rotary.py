"""The rotary embedding's size, compared: a partial rotary factor ignored is found at the
line that built the rotary embedding, not only at the attention around it.

A rotary embedding has no weights, so it is no module boundary (``boundaries.matched``),
and vLLM's (``rotary_emb(positions, q, k)`` -> rotated q, k) and transformers'
(``rotary_emb(x, position_ids)`` -> cos, sin) compute different things. What both say is
how many dimensions of a head they rotate: vLLM's ``rotary_dim``, the last size of
transformers' cos. A vLLM rotary embedding whose size is none of those transformers'
rotary modules produced in the same forward rotates other dimensions: it becomes a
boundary that differs (its input, the positions, agrees), placed just before the
compared module that encloses it, so that ``first_divergent`` starts there.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from torch import nn

from prefixlint.introspect.compare.facts import Boundary


@contextlib.contextmanager
def reference_sizes(reference: nn.Module) -> Iterator[set[int]]:
    """The sizes transformers' rotary modules produce while the block runs (the last size
    of the cos they return), recorded by forward hooks."""
    sizes: set[int] = set()

    def hook(_m: nn.Module, _args: tuple, out: Any) -> None:
        cos = out[0] if isinstance(out, tuple) and out else None
        if cos is not None and hasattr(cos, "shape") and len(cos.shape) >= 1:
            sizes.add(int(cos.shape[-1]))

    handles = [
        m.register_forward_hook(hook)
        for name, m in reference.named_modules()
        if type(m).__name__.endswith("RotaryEmbedding") or name.endswith("rotary_emb")
    ]
    try:
        yield sizes
    finally:
        for h in handles:
            h.remove()


def ours(model: nn.Module) -> dict[str, int]:
    """vLLM's rotary embeddings (a ``rotary_dim`` and a ``cos_sin_cache``), path -> size;
    one path per module (``get_rope`` hands layers of one config the same one)."""
    out: dict[str, int] = {}
    for name, module in model.named_modules():
        size = getattr(module, "rotary_dim", None)
        if isinstance(size, int) and hasattr(module, "cos_sin_cache"):
            out[name] = size
    return out


def with_sizes(
    found: list[Boundary],
    sizes: dict[str, int],
    reference: set[int],
    sites: dict[str, tuple[str, int]],
) -> list[Boundary]:
    """``found`` with a differing boundary for each vLLM rotary embedding whose size is
    not one transformers' produced, before its enclosing compared module (none where
    transformers has no rotary module, or none encloses it)."""
    if not reference:
        return found
    out = list(found)
    for path, size in sizes.items():
        if size in reference:
            continue
        at = next((i for i, b in enumerate(out) if path.startswith(b.path + ".")), None)
        if at is None:
            continue
        theirs = ", ".join(str(s) for s in sorted(reference))
        detail = f"rotates {size} dimensions of each head, transformers' rotary embedding {theirs}"
        nearest = min(reference, key=lambda s: abs(s - size))
        boundary = Boundary(
            path,
            "rotary_emb",
            float(abs(size - nearest)),
            1.0,
            0.0,
            sites.get(path, ("", 0)),
            detail=detail,
        )
        out.insert(at, boundary)
    return out
