"""The mechanical fixes of PFX301 (missing prefix) and PFX302 (prefix names another
attribute), as replacement nodes the rules attach to their findings.

* PFX301 adds ``prefix=...`` built from the attribute the module is stored at, rooted at the
  enclosing scope's prefix parameter, in the file's style: ``maybe_prefix(prefix, "attr")``
  when the file binds ``maybe_prefix``, else ``f"{prefix}.attr"``. Elements of a container
  get their index (``f"{prefix}.layers.{i}"`` for a ``range``/``enumerate`` counter,
  ``.layers.0`` for a literal position); a ``make_layers`` layer function passes its own
  parameter (``prefix=prefix``). The new argument follows the call's layout (one argument
  per line or not, trailing comma or not).
* PFX302 rewrites the name inside the prefix literal (``f"{prefix}.conv"`` ->
  ``f"{prefix}.short_conv"``, ``maybe_prefix(prefix, "head")`` ->
  ``maybe_prefix(prefix, "lm_head")``, ``prefix + ".x"``, ``"{}.x".format(prefix)``), or,
  inside ``make_layers``' layer function, passes the parameter as is.

Anything else raises ``NoFix`` with the reason, which the finding keeps.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from prefixlint.static.index import POSITIONAL_ONLY
from prefixlint.static.prefix_sites import (
    Site,
    builds_module,
    dotted_name,
    has_variable,
    render,
    string_value,
    target_names,
)
from prefixlint.static.walk import walk


class NoFix(Exception):
    """A finding that has no mechanical fix; the message says why."""


@dataclass(frozen=True)
class PlannedFix:
    """Replace ``node`` (a node of the parsed file) with ``replacement``."""

    node: cst.CSTNode
    replacement: cst.CSTNode
    title: str


def missing_prefix_fix(site: Site, uses_maybe_prefix: bool) -> PlannedFix:
    """PFX301: the call with ``prefix=`` appended."""
    if site.has_splat:
        raise NoFix("the call passes `*args`/`**kwargs`, which may carry the prefix")
    param = site.signature.param("prefix")
    if param is not None and param.kind == POSITIONAL_ONLY:
        raise NoFix(f"`{site.callee}` takes `prefix` positionally only")
    exp = site.expected
    if exp is None:
        raise NoFix(
            "the module is not stored at a `self` attribute, so its path is unknown; "
            "pass `prefix` by hand"
        )
    root = _root(site)
    if exp.whole:
        value: cst.BaseExpression = cst.Name(root)
    else:
        if not builds_module(site):
            raise NoFix(f"`{site.callee}` may not build the module stored at `self.{exp.path}`")
        position = _sequential_position(site) if exp.indexed and exp.index is None else None
        if exp.indexed and exp.index is None and position is None:
            index = _loop_index(site)
            value = cst.parse_expression(f'f"{{{root}}}.{exp.path}.{{{index}}}"')
        else:
            if position is not None:
                path = f"{exp.path}.{position}"
            else:
                path = exp.path + (f".{exp.index}" if exp.indexed else "")
            if uses_maybe_prefix:
                value = cst.parse_expression(f'maybe_prefix({root}, "{path}")')
            else:
                value = cst.parse_expression(f'f"{{{root}}}.{path}"')
    shown = cst.Module([]).code_for_node(value)
    new_call = append_arg(site.call, _prefix_arg(site.call, value))  # NoFix if it cannot
    return PlannedFix(site.call, new_call, f"Add `prefix={shown}`")


def mismatch_fix(site: Site) -> PlannedFix:
    """PFX302: the prefix's literal renamed (or the layer function's parameter passed)."""
    exp, value, arg = site.expected, site.value, site.prefix_arg
    assert exp is not None and value is not None and arg is not None
    got = render(value)
    if arg.keyword is None:
        raise NoFix("the prefix is passed positionally")
    if exp.whole:
        root = value[0][1]
        if not isinstance(site.scope.node, cst.Lambda):
            raise NoFix("the layer function is not a lambda")
        return PlannedFix(
            arg, arg.with_changes(value=cst.Name(root)), f"Replace prefix `{got}` by `{root}`"
        )
    if exp.indexed and exp.index is None:
        if len(value) != 3 or value[1][0] != "lit" or value[2][0] != "var":
            raise NoFix(f"prefix `{got}` is not `<prefix>.<name>.<index>`")
        text = f".{exp.path}."
    else:
        if len(value) != 2 or value[1][0] != "lit" or has_variable(value):
            raise NoFix(f"prefix `{got}` is not `<prefix>.<name>`")
        text = exp.render().removeprefix("{prefix}")
    node, new = _literal_after_root(arg.value, value[1][1], text)
    if isinstance(node, cst.FormattedStringText):
        if "{" in new or "}" in new:
            raise NoFix("the new name would need escaping in an f-string")
        replacement: cst.CSTNode = node.with_changes(value=new)
    else:
        replacement = node.with_changes(value=_requote(node, new))
    want = "{prefix}" + text + ("{" + value[2][1] + "}" if len(value) == 3 else "")
    return PlannedFix(node, replacement, f"Rename prefix `{got}` to `{want}`")


def _root(site: Site) -> str:
    """The scope's own prefix parameter, when the call sees it unchanged."""
    scope = site.scope
    if isinstance(scope.node, cst.Lambda) and site.expected is not None and site.expected.whole:
        params = scope.node.params.params
        if not params:
            raise NoFix("the layer function takes no parameter")
        return params[0].name.value
    roots = sorted(scope.roots)
    if not roots:
        raise NoFix("the enclosing function has no `prefix` parameter to build the prefix from")
    root = "prefix" if "prefix" in roots else roots[0]
    if len(roots) > 1 and root != "prefix":
        raise NoFix(f"several prefix parameters ({', '.join(roots)}): which one is ambiguous")
    for node in walk(scope.node):
        targets: list[cst.CSTNode] = []
        if isinstance(node, cst.Assign):
            targets = [t.target for t in node.targets]
        elif isinstance(node, (cst.AugAssign, cst.AnnAssign, cst.For, cst.CompFor, cst.NamedExpr)):
            targets = [node.target]
        for t in targets:
            # Bound names only: ``self.prefix = prefix`` binds an attribute, not ``prefix``.
            if root in set(target_names(t)):
                raise NoFix(f"`{root}` is reassigned in this function")
    return root


def _sequential_position(site: Site) -> int | None:
    """``nn.Sequential(A(...), nn.ReLU(), B(...))``: the call's position among the modules."""
    if site.in_loop:
        return None
    for node in walk(site.anchors[-1]):
        if not isinstance(node, cst.Call):
            continue
        callee = dotted_name(node.func)
        if not callee or callee.rsplit(".", 1)[-1] != "Sequential":
            continue
        if any(a.value is site.call for a in node.args):
            if any(a.star or a.keyword is not None for a in node.args):
                return None
            return next(i for i, a in enumerate(node.args) if a.value is site.call)
    return None


def _loop_index(site: Site) -> str:
    """The loop variable that counts the elements from 0, when there is exactly one loop."""
    if not site.loop_vars:
        raise NoFix("an element of a container at a position this fixer cannot tell")
    if len(site.loop_vars) != 1:
        raise NoFix("built in nested loops: which variable is the index is ambiguous")
    loop = _enclosing_loop(site)
    if loop is None:
        raise NoFix("cannot find the loop that builds the module")
    target, iterable, is_append = loop
    call = iterable if isinstance(iterable, cst.Call) else None
    callee = dotted_name(call.func) if call is not None else None
    positional = [a for a in call.args if a.keyword is None and not a.star] if call else []
    keywords = [a for a in call.args if a.keyword is not None] if call else []
    index: str | None = None
    if callee == "range" and len(positional) == 1 and not keywords:
        if isinstance(target, cst.Name):
            index = target.value
    elif (
        callee == "enumerate"
        and len(positional) == 1
        and not keywords
        and isinstance(target, (cst.Tuple, cst.List))
        and len(target.elements) == 2
        and isinstance(target.elements[0].value, cst.Name)
    ):
        index = target.elements[0].value.value
    if index is None or index == "_":
        raise NoFix("the loop is not over `range(n)` or `enumerate(...)`: no index to use")
    if is_append:
        raise NoFix("built by `.append` in a loop: the list may not start empty")
    return index


def _enclosing_loop(site: Site) -> tuple[cst.CSTNode, cst.BaseExpression, bool] | None:
    """(target, iterable, built by ``.append``) of the one loop around the call."""
    stmt = site.anchors[-1] if site.anchors else None
    if stmt is not None:
        for node in walk(stmt):
            if isinstance(node, (cst.ListComp, cst.GeneratorExp, cst.SetComp)) and any(
                n is site.call for n in walk(node.elt)
            ):
                comp = node.for_in
                if comp.inner_for_in is not None:
                    raise NoFix("built in nested loops: which variable is the index is ambiguous")
                return comp.target, comp.iter, False
    for anchor in reversed(site.anchors):
        if isinstance(anchor, cst.For):
            return anchor.target, anchor.iter, True
    return None


def _literal_after_root(
    expr: cst.BaseExpression, old: str, new: str
) -> tuple[cst.SimpleString | cst.FormattedStringText, str]:
    """The string node holding the literal part ``old`` that follows the root, and the text
    it must hold instead (the node's text may have the root's separator elsewhere)."""
    if isinstance(expr, cst.FormattedString):
        texts = [p for p in expr.parts if isinstance(p, cst.FormattedStringText)]
        exprs = [p for p in expr.parts if isinstance(p, cst.FormattedStringExpression)]
        if (
            len(expr.parts) >= 2
            and isinstance(expr.parts[0], cst.FormattedStringExpression)
            and isinstance(expr.parts[1], cst.FormattedStringText)
            and len(texts) == 1
            and texts[0].value == old
            and len(exprs) == len(expr.parts) - 1
        ):
            return texts[0], new
    elif isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add):
        right = expr.right
        if isinstance(right, cst.SimpleString) and string_value(right) == old:
            return right, new
    elif isinstance(expr, cst.Call):
        callee = dotted_name(expr.func)
        args = expr.args
        if callee and callee.rsplit(".", 1)[-1] == "maybe_prefix" and len(args) == 2:
            name = args[1].value
            if isinstance(name, cst.SimpleString) and "." + (string_value(name) or "") == old:
                return name, new.removeprefix(".")
            if isinstance(name, cst.FormattedString) and name.parts:
                head, rest = name.parts[0], name.parts[1:]
                if (
                    isinstance(head, cst.FormattedStringText)
                    and "." + head.value == old
                    and all(isinstance(p, cst.FormattedStringExpression) for p in rest)
                ):
                    return head, new.removeprefix(".")
        if (
            isinstance(expr.func, cst.Attribute)
            and expr.func.attr.value == "format"
            and isinstance(expr.func.value, cst.SimpleString)
        ):
            template = string_value(expr.func.value)
            if template is not None and template.startswith("{}") and template[2:] == old:
                return expr.func.value, "{}" + new
    raise NoFix("the prefix is not a literal this fixer can rewrite (built from other parts)")


def _requote(node: cst.SimpleString, text: str) -> str:
    """``text`` as a string literal with ``node``'s prefix and quotes."""
    prefix, quote = node.prefix, node.quote
    if quote in text or "\\" in text or "\n" in text:
        raise NoFix("the new name would need escaping")
    return f"{prefix}{quote}{text}{quote}"


# -- the new argument ------------------------------------------------------------------
_NO_SPACE = cst.SimpleWhitespace("")


def _prefix_arg(call: cst.Call, value: cst.BaseExpression) -> cst.Arg:
    return keyword_arg(call, "prefix", value)


def keyword_arg(call: cst.Call, keyword: str, value: cst.BaseExpression) -> cst.Arg:
    """``keyword=value``, spaced around ``=`` as the call's other keywords are."""
    equal = next(
        (
            a.equal
            for a in call.args
            if a.keyword is not None and isinstance(a.equal, cst.AssignEqual)
        ),
        cst.AssignEqual(whitespace_before=_NO_SPACE, whitespace_after=_NO_SPACE),
    )
    return cst.Arg(value=value, keyword=cst.Name(keyword), equal=equal)


def _has_comment(node: cst.CSTNode) -> bool:
    return "#" in cst.Module([]).code_for_node(node)


def _bare(ws: cst.BaseParenthesizableWhitespace) -> cst.BaseParenthesizableWhitespace:
    """The whitespace without its comment and blank lines: just the line break and indent."""
    if isinstance(ws, cst.ParenthesizedWhitespace):
        newline = ws.first_line.newline
        return ws.with_changes(first_line=cst.TrailingWhitespace(newline=newline), empty_lines=())
    return ws


def append_arg(call: cst.Call, arg: cst.Arg) -> cst.Call:
    """``call`` with ``arg`` appended, laid out as the call's arguments already are."""
    args = list(call.args)
    if not args:
        return call.with_changes(args=[arg])
    last = args[-1]
    trailing = isinstance(last.comma, cst.Comma)
    close = last.comma.whitespace_after if trailing else last.whitespace_after_arg
    # The separator between two arguments of this call.
    if len(args) >= 2 and isinstance(args[-2].comma, cst.Comma):
        sep = args[-2].comma
    elif trailing and isinstance(call.whitespace_before_args, cst.ParenthesizedWhitespace):
        # one argument on its own line, with a trailing comma: one argument per line
        sep = cst.Comma(whitespace_after=call.whitespace_before_args)
    else:
        sep = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    sep_after = _bare(sep.whitespace_after)
    if isinstance(close, cst.ParenthesizedWhitespace) and isinstance(
        sep_after, cst.ParenthesizedWhitespace
    ):
        # ``last,  # comment`` keeps its comment; the new argument goes on the next line.
        between = close.with_changes(indent=sep_after.indent, last_line=sep_after.last_line)
    else:
        if _has_comment(close):
            raise NoFix("a comment after the last argument would move")
        between = sep_after
    new_last = last.with_changes(
        comma=cst.Comma(whitespace_before=sep.whitespace_before, whitespace_after=between),
        whitespace_after_arg=_NO_SPACE,
    )
    if trailing:
        new = arg.with_changes(comma=last.comma.with_changes(whitespace_after=_bare(close)))
        new = new.with_changes(whitespace_after_arg=last.whitespace_after_arg)
    else:
        new = arg.with_changes(whitespace_after_arg=_bare(close))
    return call.with_changes(args=[*args[:-1], new_last, new])
