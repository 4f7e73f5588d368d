"""Code dispatches on a (stand-in) sub-config's model type and knows none it has.

Failure: a ``ValueError`` or ``NotImplementedError`` raised by a function that reads
``config.model_type`` and compares it with string literals: vLLM 0.32's
``models/ovis2_5.py`` ``model_type = config.model_type`` ... ``if model_type ==
"siglip2_navit": ...`` ... ``raise ValueError(f"Unsupported visual tokenizer
model_type: {model_type}")``.

Change: that config object takes the first model type the function compares with and,
where transformers or vLLM know that type, its config class's shrunk defaults for what
it lacks (values it already has are kept).

Limits: the object must be one of the build's configs (nested ones included); the
comparison must be in the raising function.
"""

from __future__ import annotations

import ast
import contextlib
import textwrap
from typing import Any

from prefixlint.introspect.configs.demands import config_reader_frame, function_source
from prefixlint.introspect.configs.model_types import config_class
from prefixlint.introspect.configs.repairs.reading import Failure
from prefixlint.introspect.configs.shrink import shrink_kwargs


def repair(failure: Failure) -> str | None:
    dispatch = compared_model_type(failure.error)
    if dispatch is None or not any(dispatch[0] is c for c in failure.nested):
        return None
    config, model_type = dispatch
    config.model_type = model_type
    with contextlib.suppress(Exception):
        default = config_class(model_type)()
        values = {**default.to_dict(), **shrink_kwargs(default)}
        for key, value in values.items():
            if key not in vars(config) and not key.startswith("_"):
                setattr(config, key, value)
    return "model_type"


def compared_model_type(error: BaseException) -> tuple[Any, str] | None:
    """The config object the raising function dispatches on by model type and the first
    model type it compares with, or None."""
    where = config_reader_frame(error)
    if not isinstance(error, (ValueError, NotImplementedError)) or where is None:
        return None
    filename, _, frame = where
    try:
        tree = ast.parse(textwrap.dedent(function_source(filename, frame)))
    except SyntaxError:
        return None
    holders = {}  # local name or expression -> the name of the config it was read from
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            value = node.value
            if isinstance(value, ast.Attribute) and value.attr == "model_type":
                holders[ast.unparse(node.targets[0])] = ast.unparse(value.value)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Compare) and len(node.ops) == 1):
            continue
        left, right = node.left, node.comparators[0]
        if not (isinstance(right, ast.Constant) and isinstance(right.value, str)):
            continue
        source = ast.unparse(left)
        owner = holders.get(source)
        if owner is None and isinstance(left, ast.Attribute) and left.attr == "model_type":
            owner = ast.unparse(left.value)
        head, _, rest = (owner or "").partition(".")
        if not owner or head not in frame.f_locals:
            continue
        obj = frame.f_locals[head]
        for part in rest.split(".") if rest else []:
            obj = getattr(obj, part, None)
        if hasattr(obj, "to_dict") and getattr(obj, "model_type", None) != right.value:
            return obj, right.value
    return None
