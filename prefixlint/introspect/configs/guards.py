"""What a checkpoint's config holds, read from the check that refused a synthesised one.

vLLM states some requirements as a guarded raise rather than an ``assert``:
``if getattr(hf_config, "kda_allow_negative_eigenvalues", None) is not False: raise
NotImplementedError("AliceAI requires kda_allow_negative_eigenvalues=false")``, or only in
words: "Step5 requires a checkpoint with a sparse_config section". A real checkpoint of
the model passes the check; a synthesised config fails it because it does not carry the
value. Such a failure says nothing about the model's code: the config gets what the
check asks for (the values that make the guard false; an empty section, whose fields
then take the defaults the model's code declares) and the model is built again.

Light on purpose (no torch import).
"""

from __future__ import annotations

import ast
import re
import textwrap
import traceback
from typing import Any

from prefixlint.introspect.configs.demands import _literal
from prefixlint.introspect.configs.demands import function_source as _function_source

# "requires a checkpoint with a sparse_config section"
_SECTION = re.compile(r"requires? a checkpoint with (?:a|an) `?(\w+)`? section")
# "requires a positive integer block_attn_res_block_size", "x must be an integer"
_INTEGER = re.compile(r"(?:requires? (?:a |an )?(?:positive )?integer `?(\w+)`?)")
_NEGATED: dict[type, type] = {
    ast.IsNot: ast.Is,
    ast.NotEq: ast.Eq,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.Eq: ast.NotEq,
}


def _read_attr(node: ast.AST) -> str | None:
    """``config.x``, ``self.config.x``, ``getattr(hf_config, "x", default)``: ``x``."""
    if isinstance(node, ast.Attribute):
        base = node.value
        name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
        return node.attr if name.endswith(("config", "cfg")) else None
    if (
        isinstance(node, ast.Call)
        and getattr(node.func, "id", "") == "getattr"
        and len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
    ):
        base = node.args[0]
        name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
        return node.args[1].value if name.endswith(("config", "cfg")) else None
    return None


def _passing(test: ast.AST) -> dict[str, Any]:
    """Config values under which the guard ``test`` is false (the check passes)."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        out: dict[str, Any] = {}
        for value in test.values:
            out.update(_passing(value))
        return out
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        attr = _read_attr(test.operand)
        return {attr: True} if attr else {}
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return {}
    attr = _read_attr(test.left)
    ok, value = _literal(test.comparators[0])
    negated = _NEGATED.get(type(test.ops[0]))
    if attr is None or not ok or negated is None:
        return {}
    if negated in (ast.Eq, ast.Is):
        return {attr: value}
    if negated is ast.In and isinstance(value, (list, tuple)) and value:
        return {attr: value[0]}
    return {}


def _guard_of(error: BaseException) -> ast.AST | None:
    """The test of the ``if`` whose body raised ``error`` (in the raising function)."""
    frames = list(traceback.walk_tb(error.__traceback__))
    if not frames:
        return None
    frame, line = frames[-1]
    first = frame.f_code.co_firstlineno
    try:
        tree = ast.parse(textwrap.dedent(_function_source(frame.f_code.co_filename, frame)))
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        for stmt in node.body:
            if isinstance(stmt, ast.Raise) and stmt.lineno + first - 1 <= line <= (
                (stmt.end_lineno or stmt.lineno) + first - 1
            ):
                return node.test
    return None


def _integers_asked(error: BaseException) -> dict[str, Any]:
    """ "requires a positive integer block_attn_res_block_size": an attribute the raising
    function reads from the config (``getattr(hf_config, name, None)``) that the message
    says must be an integer; a small positive one (the layer count's divisor 1 is one
    every stack accepts)."""
    frames = list(traceback.walk_tb(error.__traceback__))
    if not frames:
        return {}
    frame = frames[-1][0]
    source = _function_source(frame.f_code.co_filename, frame)
    out: dict[str, Any] = {}
    for m in _INTEGER.finditer(str(error)):
        name = m.group(1)
        if re.search(rf"getattr\(\s*[\w.]*config\s*,\s*[\"']{re.escape(name)}[\"']", source):
            out[name] = 1
    return out


def guard_demands(error: BaseException) -> dict[str, Any]:
    """The config values a guarded raise asks for (``{"kda_allow_negative_eigenvalues":
    False}``), a section the message says a checkpoint has (``{"sparse_config": {}}``),
    an integer it says an attribute must be."""
    out: dict[str, Any] = {}
    m = _SECTION.search(str(error))
    if m is not None:
        out[m.group(1)] = {}
    test = _guard_of(error)
    if test is not None:
        out.update(_passing(test))
    if isinstance(error, (ValueError, TypeError)):
        out.update({k: v for k, v in _integers_asked(error).items() if k not in out})
    return out


def give_guard_demands(error: BaseException, configs: list[Any]) -> str | None:
    """``guard_demands`` given to the first config that does not hold it yet; the name
    given, or None (a section is given only where the config has none)."""
    for name, value in guard_demands(error).items():
        for config in configs:
            try:
                current = getattr(config, name, None)
            except Exception:  # a per-layer attribute read globally
                continue
            if current == value or (isinstance(value, dict) and current is not None):
                continue
            try:
                setattr(config, name, value)
            except Exception:
                continue
            return name
    return None
