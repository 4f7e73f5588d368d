"""A prefix that starts with a dot at the root: ``f"{prefix}.model"`` in the class vLLM
builds as the whole model, whose ``prefix`` is ``""`` there, names the module ``.model``
(and every layer under it ``.model.layers.0...``). ``maybe_prefix(prefix, "model")`` is
right at the root and nested alike.
"""

from __future__ import annotations

import libcst as cst

from prefixlint.static.prefix_fixes import PlannedFix
from prefixlint.static.prefix_sites import Site, is_known


def leading_dot_name(site: Site) -> str | None:
    """``model`` for ``f"{prefix}.model"`` (the scope's own prefix, then a literal that
    starts with a dot), when that is the whole value; else None."""
    value = site.value
    if value is None or not is_known(value) or len(value) != 2 or site.prefix_arg is None:
        return None
    if not _joins_by_hand(site.prefix_arg.value):
        return None  # ``maybe_prefix(prefix, "model")`` drops the dot when prefix is empty
    (kind, root), (lit_kind, text) = value
    if kind != "root" or lit_kind != "lit" or not text.startswith(".") or len(text) < 2:
        return None
    if root not in site.scope.roots:
        return None
    return text[1:]


def _joins_by_hand(node: cst.BaseExpression) -> bool:
    """An f-string, ``+`` or ``"{}.x".format(...)``: a join that keeps the dot."""
    if isinstance(node, (cst.FormattedString, cst.BinaryOperation)):
        return True
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value == "format"
    )


def leading_dot_fix(site: Site, uses_maybe_prefix: bool) -> PlannedFix:
    """``maybe_prefix(prefix, "model")`` when the file binds ``maybe_prefix``, else an
    expression that needs no import."""
    name = leading_dot_name(site)
    assert name is not None and site.prefix_arg is not None
    root = site.value[0][1]  # type: ignore[index]
    if uses_maybe_prefix:
        text = f'maybe_prefix({root}, "{name}")'
    else:
        text = f'f"{{{root}}}.{name}" if {root} else "{name}"'
    value = cst.parse_expression(text)
    return PlannedFix(site.prefix_arg.value, value, f"Replace with `{text}`")
