"""A per-layer list of the config indexed past its end.

Failure: ``IndexError: list index out of range`` on the line that raised it, which
subscripts a config's list attribute (``config.layer_types[self.layer_idx]``) with an
index the frame can evaluate: vLLM 0.33's ``models/commandr.py``
``config.layer_types[self.layer_idx]`` in the Cohere EAGLE draft, whose decoder layers
are numbered after the target's (``layer_idx = i + start_layer_id``), on a synthesised
draft config whose guessed ``layer_types`` has one entry per draft layer.

Change: the list grows to hold the index and as many entries again as it had (the layers
numbered after another stack's read ``start + i`` for each of theirs), each new entry
repeating its last one (a list of layer kinds stays a list of layer kinds).

Limits: only a subscript by a name, ``self.``/``config.`` attribute or arithmetic of them,
evaluated in the failing frame; at most 4096 entries; an empty list is not extended (it
says nothing of its entries).
"""

from __future__ import annotations

import ast
import contextlib
from typing import Any

from prefixlint.introspect.configs.repairs.reading import Failure, failing_frames, failing_line

_LIMIT = 4096


def _subscripts(line: str) -> list[tuple[str, ast.expr]]:
    """``(attribute, index expression)`` of each ``<x>.attr[index]`` on the line."""
    text = line.strip()
    tree = None
    # the line alone, a compound statement's header (``if ...:``), or part of a call
    for candidate in (text, f"{text} pass", f"({text.rstrip(':,')})"):
        with contextlib.suppress(SyntaxError):
            tree = ast.parse(candidate, mode="exec")
            break
    if tree is None:
        return []
    out = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Attribute)
            and not isinstance(node.slice, ast.Slice)
        ):
            out.append((node.value.attr, node.slice))
    return out


def _evaluate(expr: ast.expr, frame: Any) -> int | None:
    allowed = (ast.Name, ast.Attribute, ast.BinOp, ast.Constant, ast.Load, ast.operator)
    if not all(isinstance(n, allowed) for n in ast.walk(expr)):
        return None
    with contextlib.suppress(Exception):
        code = compile(ast.Expression(expr), "<index>", "eval")
        value = eval(code, {"__builtins__": {}}, dict(frame.f_locals))
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    return None


def repair(failure: Failure) -> str | None:
    error = failure.error
    if not isinstance(error, IndexError):
        return None
    frames = failing_frames(error, depth=1)
    if not frames:
        return None
    for attr, expr in _subscripts(failing_line(error)):
        index = _evaluate(expr, frames[0])
        if index is None or not 0 <= index < _LIMIT:
            continue
        for config in failure.nested:
            value = vars(config).get(attr)
            if isinstance(value, list) and value and len(value) <= index:
                # Layers numbered after another stack's (``start + i`` for each of the
                # list's ``n`` layers) read up to ``index + n - 1``: one repair covers all.
                size = min(index + len(value), _LIMIT)
                setattr(config, attr, value + [value[-1]] * (size - len(value)))
                return attr
    return None
