"""Which fused layers a model's checkpoint holds as separate parts, read from the model's own
stacked-params tables, without importing it.

A ``load_weights`` that writes a checkpoint's ``q_proj``, ``k_proj`` and ``v_proj`` into one
``qkv_proj`` loops over a table of ``(fused, part, shard)`` rows (``(".qkv_proj",
".q_proj", "q")``), and a ``WeightsMapper`` says the same with ``orig_to_new_stacked``
(``".q_proj": (".qkv_proj", "q")``). Either is the model's own evidence that the parts are
separate tensors in the checkpoint, which is what quantization's and LoRA's
``packed_modules_mapping`` lookups need.
"""

from __future__ import annotations

import ast
from typing import Any


def stacked_rows(tree: ast.AST) -> tuple[tuple[str, str, Any], ...]:
    """``(fused, part, shard)`` rows of every table (a list or tuple of at least two of
    them) in ``tree``, names as their leaves (``stacked_leaf``), in source order."""
    out: list[tuple[str, str, Any]] = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.List, ast.Tuple)) or len(node.elts) < 2:
            continue
        rows = []
        for elt in node.elts:
            row = _row(elt)
            if row is None:
                break
            rows.append(row)
        else:
            out.extend(rows)
    return tuple(dict.fromkeys(out))


def _row(node: ast.expr) -> tuple[str, str, Any] | None:
    if not (isinstance(node, ast.Tuple) and len(node.elts) == 3):
        return None
    fused, part, shard = (e.value if isinstance(e, ast.Constant) else None for e in node.elts)
    if not (isinstance(fused, str) and isinstance(part, str)):
        return None
    if not isinstance(shard, (str, int)) or isinstance(shard, bool):
        return None
    return stacked_leaf(fused), stacked_leaf(part), shard


def stacked_leaf(name: str) -> str:
    """The module name a stacked-params entry means: its last part. vLLM matches the
    entries as substrings of a weight's name (``".mlp.gate_proj"`` in a mapper, to keep
    the shared expert's apart), while ``packed_modules_mapping`` and every module lookup
    use the leaf (``gate_up_proj: [gate_proj, up_proj]``)."""
    return name.strip(".").rsplit(".", 1)[-1]


def mapper_rows(tree: ast.AST) -> tuple[tuple[str, str, Any], ...]:
    """``(fused, part, shard)`` rows of ``orig_to_new_stacked={".q_proj": (".qkv_proj",
    "q"), ...}`` arguments in ``tree``."""
    out: list[tuple[str, str, Any]] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.keyword) and node.arg == "orig_to_new_stacked"):
            continue
        if not isinstance(node.value, ast.Dict):
            continue
        for key, value in zip(node.value.keys, node.value.values, strict=True):
            part = key.value if isinstance(key, ast.Constant) else None
            if not isinstance(part, str) or not isinstance(value, ast.Tuple):
                continue
            row = _row(ast.Tuple(elts=[value.elts[0], key, value.elts[-1]]))
            if row is not None and len(value.elts) == 2:
                out.append(row)
    return tuple(dict.fromkeys(out))


def separate_parts(tree: ast.AST) -> dict[str, list[str]]:
    """Fused layer name -> the checkpoint parts the model's tables write into it, for the
    fused layers with at least two parts of other names (a checkpoint that holds the
    fused tensor itself, as Phi-3's ``gate_up_proj``, needs no such table)."""
    parts: dict[str, list[str]] = {}
    for fused, part, _ in (*stacked_rows(tree), *mapper_rows(tree)):
        if part != fused and part not in parts.setdefault(fused, []):
            parts[fused].append(part)
    return {fused: names for fused, names in parts.items() if len(names) >= 2}
