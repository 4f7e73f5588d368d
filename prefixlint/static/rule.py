"""The rule base class and the per-file context every rule reads.

Rules follow Fixit's shape: one small ``libcst`` visitor class per rule, its docstring the
rule's documentation, its ``VALID`` and ``INVALID`` examples beside it. All rules of a run
share one batched traversal of the file (``libcst.visit_batched``), and the costlier shared
analyses (prefix sites, class facts) are computed once per file, on first use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import libcst as cst

from prefixlint.codes import CODES
from prefixlint.diagnostic import Severity
from prefixlint.static.index import ClassSummary, FunctionSig, ModuleSummary
from prefixlint.static.model_classes import ARCHITECTURE_NAME
from prefixlint.static.prefix_fixes import NoFix, PlannedFix
from prefixlint.static.prefix_sites import Hooks, PrefixAnalysis, Site
from prefixlint.static.resolve import Resolver, Symbol

# The imports every rule example starts with, so that examples read as model files do.
EXAMPLE_HEADER = """
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from vllm.config import VllmConfig
from vllm.distributed import get_pp_group, get_tp_group, tensor_model_parallel_all_reduce
from vllm.model_executor.layers.attention import Attention
from vllm.model_executor.layers.linear import QKVParallelLinear, RowParallelLinear
from vllm.model_executor.layers.vocab_parallel_embedding import (
    ParallelLMHead,
    VocabParallelEmbedding,
)
from vllm.model_executor.models.interfaces import SupportsMultiModal, SupportsPP
from vllm.model_executor.models.llama import LlamaForCausalLM, LlamaModel
from vllm.model_executor.models.utils import PPMissingLayer, make_layers, maybe_prefix
from vllm.multimodal import MULTIMODAL_REGISTRY
"""


def example(body: str) -> str:
    """A VALID or INVALID example: the shared imports, then ``body``."""
    return EXAMPLE_HEADER + body


@dataclass(frozen=True)
class Invalid:
    """An INVALID example: the code, and optionally the expected line (counted in the
    example's body), a fragment of the message, and the code after the fix (Fixit's
    ``expected_replacement``, as a body too)."""

    code: str
    line: int | None = None
    contains: str | None = None
    fixed: str | None = None

    @property
    def header_lines(self) -> int:
        return EXAMPLE_HEADER.count("\n") if self.code.startswith(EXAMPLE_HEADER) else 0

    def file_line(self) -> int | None:
        return None if self.line is None else self.line + self.header_lines


# A rule trigger: a method that calls a prefix-taking callable (names resolved per file).
PREFIX_CALLS = "<prefix-taking calls>"


@dataclass(frozen=True)
class Where:
    """A place in the walk (the item and its enclosing nodes), kept for a report made
    later, in ``leave_Module``; the locator narrows from the anchors to the node."""

    item: object
    anchors: tuple[cst.CSTNode, ...]


@dataclass
class Report:
    rule: type[LintRule]
    node: cst.CSTNode
    message: str
    severity: Severity
    item: object  # the source.Item the node belongs to
    anchors: tuple[cst.CSTNode, ...]  # enclosing function/statement nodes, outermost first
    fix: PlannedFix | None = None  # what replaces which node (``node`` itself or inside it)
    no_fix: str | None = None  # why a fixable rule has no fix for this finding


class FileContext:
    """What rules know about the file being linted."""

    def __init__(
        self,
        path: str,
        summary: ModuleSummary,
        resolver: Resolver,
        architectures: frozenset[str] = frozenset(),
    ) -> None:
        self.path = path
        self.source_text = ""  # the whole file, for rules that look past the sketch
        self.summary = summary
        self.resolver = resolver
        self.architectures = architectures
        self._sig_cache: dict[str, FunctionSig | None] = {}

    def prefix_signature(self, callee: str) -> FunctionSig | None:
        short = callee.rsplit(".", 1)[-1].lower()
        if "prefix" in short or "name" in short:
            return None  # ``maybe_prefix``, ``_get_qualname``: they compute names, not layers
        if callee.startswith("self.") and callee.count(".") == 1:
            return self._method_signature(callee[5:])
        if callee not in self._sig_cache:
            self._sig_cache[callee] = self.resolver.prefix_signature(self.summary, callee)
        return self._sig_cache[callee]

    def _method_signature(self, name: str) -> FunctionSig | None:
        """``self._init_model(prefix=...)``: a method of the class being walked (or of a
        resolvable base) that takes ``prefix``. ``self.gate(x)`` calls a module: None."""
        stack = self.prefixes.class_stack
        cls = self.summary.classes.get(stack[0].name.value) if stack else None
        if cls is None:
            return None
        mro, _ = self.resolver.class_mro(Symbol(self.summary, cls.name, cls=cls))
        for entry in mro:
            assert entry.cls is not None
            sig = entry.cls.methods.get(name)
            if sig is not None:
                return sig if sig.param("prefix") is not None else None
        return None

    @property
    def uses_maybe_prefix(self) -> bool:
        """The file binds ``maybe_prefix`` (imports or defines it): fixes use its style."""
        return "maybe_prefix" in self.summary.imports or "maybe_prefix" in self.summary.functions

    # Set by the linter before the walk; rules read sites from it in ``leave_Module``.
    prefixes: PrefixAnalysis

    # -- classes ----------------------------------------------------------------------
    def class_summary(self, node: cst.ClassDef) -> ClassSummary | None:
        return self.summary.classes.get(node.name.value)

    def symbol(self, node: cst.ClassDef) -> Symbol | None:
        cls = self.class_summary(node)
        return Symbol(self.summary, cls.name, cls=cls) if cls else None

    def is_architecture(self, node: cst.ClassDef) -> bool:
        """A top-level model class: named in vLLM's registry or shaped like one."""
        name = node.name.value
        if name in self.architectures:
            return True
        if not ARCHITECTURE_NAME.search(name) or name.startswith("_"):
            return False
        return bool(node.bases) and self.is_module_class(node)

    def is_module_class(self, node: cst.ClassDef) -> bool:
        """Plausibly an ``nn.Module``: a base resolves to one, or looks like one."""
        cls = self.class_summary(node)
        if cls is None:
            return False
        return _is_module(self, self.summary, cls, 0)

    def takes_vllm_config(self, node: cst.ClassDef) -> bool:
        cls = self.class_summary(node)
        init = cls.methods.get("__init__") if cls else None
        return init is not None and init.param("vllm_config") is not None

    def declares(self, node: cst.ClassDef, interface: str) -> bool:
        cls = self.class_summary(node)
        return cls is not None and self.resolver.inherits(self.summary, cls, interface)


def _is_module(ctx: FileContext, module: ModuleSummary, cls: ClassSummary, depth: int) -> bool:
    if depth > 8:
        return False
    for base in cls.bases:
        short = base.rsplit(".", 1)[-1]
        if short == "Module" or base in ("nn.Module", "torch.nn.Module"):
            return True
        sym = ctx.resolver.resolve(module, base)
        if sym is not None and sym.cls is not None:
            if _is_module(ctx, sym.module, sym.cls, depth + 1):
                return True
        elif (
            base in module.classes
            and base != cls.name
            and _is_module(ctx, module, module.classes[base], depth + 1)
        ):
            return True
    return False


class LintRule:
    """Base class of every static rule.

    The linter walks each file once and calls these hooks on every rule that defines them:
    ``visit_ClassDef(node)``, ``visit_FunctionDef(node, class_node)``,
    ``visit_Call(node, callee)``, ``visit_Name(node, dotted_name)`` and, after the walk,
    ``leave_Module()``, where the prefix sites of the whole file are complete.
    """

    code: ClassVar[str]
    # Filled from ``prefixlint.codes`` by the code: the table is the one source.
    name: ClassVar[str]
    severity: ClassVar[Severity]
    summary: ClassVar[str]
    default_enabled: ClassVar[bool]
    # Words that make a method body worth parsing for this rule (other methods keep only
    # their signature); ``PREFIX_CALLS`` stands for calls of prefix-taking callables.
    triggers: ClassVar[tuple[str, ...]] = ()
    VALID: ClassVar[list[str]] = []
    INVALID: ClassVar[list[Invalid]] = []

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        entry = CODES[cls.code]
        cls.name = entry.name
        cls.severity = entry.severity
        cls.summary = entry.summary
        cls.default_enabled = entry.default_enabled

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.reports: list[Report] = []

    def report(
        self,
        node: cst.CSTNode,
        message: str,
        *,
        severity: Severity | None = None,
        replacement: cst.CSTNode | None = None,
        fix: Callable[[], PlannedFix] | None = None,
        site: Site | Where | None = None,
    ) -> None:
        """Report ``node``. A fix is ``replacement`` (replaces ``node``, as in Fixit) or
        ``fix``, a planner that returns what replaces which node, or raises ``NoFix`` with
        the reason the finding then carries."""
        walk = self.ctx.prefixes
        item = site.item if site is not None else walk.item
        anchors = site.anchors if site is not None else tuple(walk.anchors)
        planned = PlannedFix(node, replacement, "Replace") if replacement is not None else None
        no_fix = None
        if fix is not None:
            try:
                planned = fix()
            except NoFix as e:
                no_fix = str(e)
        self.reports.append(
            Report(
                type(self),
                node,
                message,
                severity or self.severity,
                item,
                anchors,
                planned,
                no_fix,
            )
        )

    def here(self, *extra: cst.CSTNode) -> Where:
        """Where the walk is now, narrowed to ``extra`` (say, the function reported on)."""
        walk = self.ctx.prefixes
        anchors: list[cst.CSTNode] = []
        for node in (*walk.anchors, *extra):
            if not anchors or anchors[-1] is not node:  # a node the walk pushed already
                anchors.append(node)
        return Where(walk.item, tuple(anchors))

    @classmethod
    def documentation(cls) -> str:
        import inspect

        return inspect.cleandoc(cls.__doc__ or "")


class RuleHooks(Hooks):
    """Forwards the walk's events to the rules that listen for them."""

    def __init__(self, rules: list[LintRule]) -> None:
        def bound(name: str) -> list:
            return [getattr(r, name) for r in rules if hasattr(r, name)]

        self._class = bound("visit_ClassDef")
        self._function = bound("visit_FunctionDef")
        self._call = bound("visit_Call")
        self._name = bound("visit_Name")
        if not self._call:
            self.on_call = Hooks.on_call.__get__(self)  # type: ignore[method-assign]
        if not self._name:
            self.on_name = Hooks.on_name.__get__(self)  # type: ignore[method-assign]

    def on_class(self, node: cst.ClassDef) -> None:
        for fn in self._class:
            fn(node)

    def on_function(self, node: cst.FunctionDef, class_node: cst.ClassDef | None) -> None:
        for fn in self._function:
            fn(node, class_node)

    def on_call(self, node: cst.Call, callee: str | None) -> None:
        for fn in self._call:
            fn(node, callee)

    def on_name(self, node: cst.Name | cst.Attribute, name: str) -> None:
        for fn in self._name:
            fn(node, name)
