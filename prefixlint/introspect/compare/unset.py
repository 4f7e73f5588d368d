"""The config attributes a failed reference build read as None, said in the PFX600 note.

A config class may declare an attribute with the default None and derive no value for it
(Qwen4Exp's QSA fields: ``indexer_budget: int | None = None``), while its modeling
module reads it unconditionally (``self.token_budget // self.compress_ratio``,
``modeling_qwen4_exp.py:676``): transformers cannot build its own default config. A
checkpoint's ``config.json`` gives such values; a synthesised config has none to give,
and the comparison cannot derive one (no class derives it; a number made up here would
be a config no checkpoint has). So it does not run, and its note names what was None
instead of only the ``TypeError`` about ``NoneType``.
"""

from __future__ import annotations

import ast
import linecache
from typing import Any

from prefixlint.introspect.configs.demands import config_attr, config_reader_frame


def said(error: BaseException) -> str:
    """`` (`Cls.__init__` read `a`, `b` as None: `Config` declares them None ...)`` for a
    ``TypeError``/``AttributeError`` on None whose failing statement uses config
    attributes that are None; "" otherwise."""
    found = none_attributes(error)
    if found is None:
        return ""
    function, config, attrs, others = found
    names = ", ".join(f"`{a}`" for a in attrs)
    also = f", and {', '.join(f'`{a}`' for a in others)} there too" if others else ""
    cls = type(config)
    if all(_declared_none(cls, a) for a in attrs + others):
        return (
            f" (`{function}` read {names} as None{also}: `{cls.__name__}` declares "
            "them None and derives no value, a checkpoint's config.json gives them)"
        )
    return f" (`{function}` read {names} as None{also})"


def none_attributes(error: BaseException) -> tuple[str, Any, list[str], list[str]] | None:
    """(the failing function's qualified name, the config it read, the attributes of
    that config its failing statement uses, directly or through a local or ``self.x``
    the function assigned from one, that hold None, and the other attributes of None the
    function reads: a config that sets the first only fails at the next)."""
    where = config_reader_frame(error)
    if not isinstance(error, (TypeError, AttributeError)) or "NoneType" not in str(error):
        return None
    if where is None:
        return None
    filename, line, frame = where
    config = _config_of(frame)
    tree, stmt = statement_at(filename, line)
    if config is None or stmt is None or tree is None:
        return None
    copies = _copies(tree)
    attrs: list[str] = []
    for node in ast.walk(stmt):
        attr = config_attr(node) or copies.get(_key(node))
        if attr and attr not in attrs and _none(config, attr):
            attrs.append(attr)
    if not attrs:
        return None
    others = [config_attr(n) for n in ast.walk(tree)]
    others = [a for a in dict.fromkeys(others) if a and a not in attrs and _none(config, a)]
    return getattr(frame.f_code, "co_qualname", frame.f_code.co_name), config, attrs, others


def _none(config: Any, attr: str) -> bool:
    return hasattr(config, attr) and getattr(config, attr) is None


def statement_at(filename: str, line: int) -> tuple[ast.AST | None, ast.stmt | None]:
    """The function that holds ``line`` of ``filename`` and the innermost statement that
    spans it, from the whole module's source (a signature over several lines, closed at
    the margin as formatters write it, parses there)."""
    try:
        module = ast.parse("".join(linecache.getlines(filename)))
    except (SyntaxError, ValueError):
        return None, None
    spans = [
        node
        for node in ast.walk(module)
        if isinstance(node, ast.stmt) and node.lineno <= line <= (node.end_lineno or node.lineno)
    ]
    functions = [n for n in spans if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    plain = [n for n in spans if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]

    def size(node: ast.stmt) -> int:
        return (node.end_lineno or node.lineno) - node.lineno

    function = min(functions, key=size) if functions else None
    inner = [n for n in plain if function is None or _within(n, function)]
    return function, (min(inner, key=size) if inner else None)


def _within(node: ast.stmt, function: ast.stmt) -> bool:
    return function.lineno <= node.lineno and (node.end_lineno or 0) <= (function.end_lineno or 0)


def _config_of(frame: Any) -> Any:
    """The config the failing frame reads: its ``config`` argument, or ``self.config``."""
    local = frame.f_locals.get("config")
    if local is not None and hasattr(local, "to_dict"):
        return local
    owner = getattr(frame.f_locals.get("self"), "config", None)
    return owner if hasattr(owner, "to_dict") else None


def _key(node: ast.AST) -> str:
    """``x`` for a local, ``self.x`` for an attribute of ``self``; "" otherwise."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and getattr(node.value, "id", "") == "self":
        return f"self.{node.attr}"
    return ""


def _copies(tree: ast.AST) -> dict[str, str]:
    """``self.token_budget = config.indexer_budget``: ``{"self.token_budget":
    "indexer_budget"}``, for each local or ``self`` attribute the function assigns
    straight from a config attribute."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            attr, key = config_attr(node.value), _key(node.targets[0])
            if attr and key:
                out.setdefault(key, attr)
    return out


def _declared_none(cls: type, attr: str) -> bool:
    """Whether the config class declares ``attr`` with the default None (a class
    attribute of None, as a dataclass-style config holds its default)."""
    return any(attr in vars(k) and vars(k)[attr] is None for k in cls.__mro__)
