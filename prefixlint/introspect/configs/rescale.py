"""Values a config's validator ties to a size that synthesis shrank, rescaled with it.

transformers 5.20's ``@strict`` config validators check values that are fractions or
indices of a size: Molmo2's ``adapter_config.vision_feature_layer`` must index the layers
of ``vision_config``; Cosmos3 Edge's ``rope_parameters.mrope_section`` must sum to half of
``head_dim``. A synthesised config shrinks the size (4 vision layers, ``head_dim`` 16) and
keeps the default's values (``[24, 18]``, ``[24, 20, 20]``), so the class refuses it. The
validator's message names the value and the size; the value is rescaled in proportion,
as a checkpoint of that size would have it, and the class is tried again.

Light on purpose (no torch import).
"""

from __future__ import annotations

import re
from typing import Any

# "`adapter_config.vision_feature_layer` [24, 18] must index the 4 layers of `vision_config`"
_INDEXES = re.compile(
    r"`(?P<path>[\w.]+)`\s*(?P<values>\[[-\d,\s]*\]|-?\d+)\s*must index the\s*(?P<n>\d+)\s*"
    r"layers of `(?P<owner>[\w.]+)`"
)
# "`rope_parameters.mrope_section` must contain three sections whose sum equals half of
# `head_dim`, got [24, 20, 20] for head_dim=16."
_SUM = re.compile(
    r"`(?P<path>[\w.]+)`[^`]*?sum (?:equals|must equal|to)\s*(?P<half>half of\s*)?`(?P<size>\w+)`"
    r".*?\b(?P=size)\s*=\s*(?P<n>\d+)",
    re.S,
)


def _get(kw: dict[str, Any], default: dict[str, Any], path: list[str]) -> Any:
    """The value at ``path`` in the overrides, else in the default's dict."""
    for source in (kw, default):
        node: Any = source
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None:
            return node
    return None


def _set(kw: dict[str, Any], default: dict[str, Any], path: list[str], value: Any) -> dict:
    """``kw`` with ``value`` at ``path``; a nested dict the overrides lack is taken
    whole from the default, so the rest of it is kept."""
    out = dict(kw)
    node, base = out, default
    for part in path[:-1]:
        base = base.get(part) if isinstance(base, dict) else None
        child = node.get(part)
        child = dict(child) if isinstance(child, dict) else dict(base or {})
        node[part] = child
        node = child
    node[path[-1]] = value
    return out


def _layer_count(owner: Any) -> int | None:
    if isinstance(owner, dict):
        for key in ("num_hidden_layers", "num_layers", "depth"):
            if isinstance(owner.get(key), int):
                return owner[key]
    return None


def rescale_indices(values: list[int], old: int, new: int) -> list[int]:
    """Layer indices of a stack of ``old`` layers for one of ``new``: in proportion,
    negative indices (from the end) kept where they still exist."""
    out = []
    for v in values:
        if v < 0:
            out.append(max(v, -new))
        else:
            out.append(min(new - 1, v * new // max(old, 1)))
    return out


def rescale_sections(values: list[int], total: int) -> list[int] | None:
    """Sections summing to ``total``, each at least 1, in the proportions of ``values``;
    None when ``total`` cannot hold one per section."""
    if total < len(values) or not values or sum(values) <= 0:
        return None
    out = [max(1, v * total // sum(values)) for v in values]
    i = 0
    while sum(out) != total:  # the rounding's remainder, spread from the first
        step = 1 if sum(out) < total else -1
        if out[i % len(out)] + step >= 1:
            out[i % len(out)] += step
        i += 1
    return out


def rescaled(error: BaseException, kw: dict[str, Any], default: Any) -> dict[str, Any] | None:
    """Overrides with the value ``error``'s validator names rescaled to the shrunk size it
    names; None when the message states no such tie. The names are relative to the
    config whose validator raised: the top level, or a sub-config (``text_config``)."""
    base = default.to_dict() if hasattr(default, "to_dict") else {}
    fixed = _rescaled(str(error), kw, base)
    if fixed is not None:
        return fixed
    for key, sub in base.items():
        if isinstance(sub, dict):
            mine = kw.get(key) if isinstance(kw.get(key), dict) else {}
            inner = _rescaled(str(error), mine, sub)
            if inner is not None:
                return {**kw, key: {**sub, **mine, **inner}}
    return None


def _rescaled(text: str, kw: dict[str, Any], base: dict[str, Any]) -> dict[str, Any] | None:
    m = _INDEXES.search(text)
    if m is not None:
        path = m.group("path").split(".")
        values = _get(kw, base, path)
        old = _layer_count(_get({}, base, m.group("owner").split(".")))
        new = int(m.group("n"))
        if isinstance(values, int):
            values = [values]
        if isinstance(values, list) and old and new:
            fixed = rescale_indices([int(v) for v in values], old, new)
            if fixed != values:
                return _set(
                    kw, base, path, fixed if isinstance(_get(kw, base, path), list) else fixed[0]
                )
    m = _SUM.search(text)
    if m is not None:
        path = m.group("path").split(".")
        values = _get(kw, base, path)
        total = int(m.group("n")) // (2 if m.group("half") else 1)
        if isinstance(values, list) and all(isinstance(v, int) for v in values):
            fixed = rescale_sections(values, total)
            if fixed is not None and fixed != values:
                return _set(kw, base, path, fixed)
    return None
