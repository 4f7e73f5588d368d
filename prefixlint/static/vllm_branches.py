"""Branches that never run under vLLM: the fallback of a module written to work without it.

A module that imports vLLM in ``try:`` and sets a flag (``_vllm_available = True``; ``False``
in ``except ImportError:``), or binds ``find_spec("vllm") is not None``, builds its vLLM
layers in ``if _vllm_available:`` and plain ones in the ``else:``. Under vLLM the import
succeeds and the ``else:`` never runs: what it builds is not the model vLLM serves.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from pathlib import Path

import libcst as cst

from prefixlint.static.prefix_sites import dotted_name
from prefixlint.static.trees import module_tree
from prefixlint.static.walk import walk

_IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})


def _imports_vllm(stmts: list[ast.stmt]) -> bool:
    for stmt in stmts:
        for sub in ast.walk(stmt):
            if isinstance(sub, ast.Import) and any(
                a.name.split(".")[0] == "vllm" for a in sub.names
            ):
                return True
            if isinstance(sub, ast.ImportFrom) and (sub.module or "").split(".")[0] == "vllm":
                return True
    return False


def _set_to(stmts: list[ast.stmt], value: bool) -> set[str]:
    """Names the statements bind to the constant ``value``."""
    out = set()
    for stmt in stmts:
        constant = isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant)
        if constant and stmt.value.value is value:
            out.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
    return out


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return handler.type is None or any(
        isinstance(k, ast.Name) and k.id in _IMPORT_ERRORS for k in kinds
    )


def _is_vllm_spec(node: ast.AST) -> bool:
    """``find_spec("vllm")`` (``importlib.util.find_spec``, however imported)."""
    return (
        isinstance(node, ast.Call)
        and (ast.unparse(node.func).rsplit(".", 1)[-1] == "find_spec")
        and bool(node.args)
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value == "vllm"
    )


def availability_flags(tree: ast.Module) -> frozenset[str]:
    """Top-level names that are true exactly when vLLM imports: set True in a ``try`` that
    imports vLLM (or its ``else:``) and False in its ``except ImportError:``; or bound to
    ``find_spec("vllm") is not None`` (or to ``find_spec("vllm")`` itself)."""
    out: set[str] = set()
    for stmt in tree.body:
        if isinstance(stmt, ast.Try) and _imports_vllm(stmt.body):
            true = _set_to(stmt.body + stmt.orelse, True)
            false = set()
            for handler in stmt.handlers:
                if _catches_import_error(handler):
                    false |= _set_to(handler.body, False)
            out |= true & false
        elif isinstance(stmt, ast.Assign):
            value = stmt.value
            if isinstance(value, ast.Compare) and len(value.ops) == 1:
                is_not_none = isinstance(value.ops[0], ast.IsNot) and isinstance(
                    value.comparators[0], ast.Constant
                )
                value = value.left if is_not_none else None
            if value is not None and _is_vllm_spec(value):
                out.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
    return frozenset(out)


def file_flags(path: Path) -> frozenset[str]:
    """``availability_flags`` of a module file."""
    tree = module_tree(path)
    return availability_flags(tree) if tree is not None else frozenset()


def _absent_when(test: cst.BaseExpression, is_flag: Callable[[str], bool]) -> set[bool]:
    """The outcomes of ``test`` that imply vLLM did not import."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return {not b for b in _absent_when(test.expression, is_flag)}
    if isinstance(test, cst.BooleanOperation):
        left, right = _absent_when(test.left, is_flag), _absent_when(test.right, is_flag)
        # ``a and b`` true: both true; false: only that one of them is
        if isinstance(test.operator, cst.And):
            return ({True} & (left | right)) | ({False} & left & right)
        return ({False} & (left | right)) | ({True} & left & right)
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        op, right = test.comparisons[0].operator, test.comparisons[0].comparator
        inner = _absent_when(test.left, is_flag)
        constant = right.value if isinstance(right, cst.Name) else None
        if isinstance(op, (cst.Is, cst.Equal)) and constant in ("True", "False"):
            return inner if constant == "True" else {not b for b in inner}
        if isinstance(op, (cst.IsNot, cst.NotEqual)) and constant in ("True", "False", "None"):
            return {not b for b in inner} if constant == "True" else inner
        return set()
    if isinstance(test, cst.Call):
        spec = (dotted_name(test.func) or "").rsplit(".", 1)[-1] == "find_spec"
        first = test.args[0].value if test.args else None
        said = isinstance(first, cst.SimpleString) and first.evaluated_value == "vllm"
        return {False} if spec and said else set()
    name = dotted_name(test) if isinstance(test, (cst.Name, cst.Attribute)) else None
    return {False} if name and is_flag(name) else set()


def _inside(node: cst.CSTNode, block: cst.CSTNode | None) -> bool:
    return block is not None and any(sub is node for sub in walk(block))


def off_vllm(
    anchors: Sequence[cst.CSTNode], node: cst.CSTNode, is_flag: Callable[[str], bool]
) -> bool:
    """Whether ``node`` sits in a branch that runs only when vLLM does not import: the
    ``else:`` of ``if <flag>:``, the body of ``if not <flag>:``, the ``else`` of
    ``a if <flag> else b``."""
    for anchor in anchors:
        if isinstance(anchor, cst.If):
            absent = _absent_when(anchor.test, is_flag)
            if True in absent and _inside(node, anchor.body):
                return True
            if False in absent and _inside(node, anchor.orelse):
                return True
        if isinstance(anchor, cst.SimpleStatementLine):
            for sub in walk(anchor):
                if not isinstance(sub, cst.IfExp):
                    continue
                absent = _absent_when(sub.test, is_flag)
                if (True in absent and _inside(node, sub.body)) or (
                    False in absent and _inside(node, sub.orelse)
                ):
                    return True
    return False
