"""The rule base class and the per-file context every rule reads.

Rules follow Fixit's shape: one small ``libcst`` visitor class per rule, its docstring the
rule's documentation, its ``VALID`` and ``INVALID`` examples beside it. All rules of a run
share one batched traversal of the file (``libcst.visit_batched``), and the costlier shared
analyses (prefix sites, class facts) are computed once per file, on first use.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import libcst as cst

from prefixlint.codes import CODES
from prefixlint.diagnostic import Severity
from prefixlint.static.index import ClassSummary, FunctionSig, ModuleSummary
from prefixlint.static.model_classes import ARCHITECTURE_NAME
from prefixlint.static.prefix_fixes import NoFix, PlannedFix
from prefixlint.static.prefix_sites import Hooks, PrefixAnalysis, Site, quant_reaches
from prefixlint.static.resolve import DECODER_ATTENTION_LAYERS, Resolver, Symbol
from prefixlint.static.scope import PackageScope, Role
from prefixlint.static.vllm_branches import availability_flags, file_flags, off_vllm
from prefixlint.static.vllm_facts import owns_engine_cache
from prefixlint.static.vllm_source import is_vllm

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

# What a rule checks (``LintRule.applies_to``).
INTERFACE = "interface"
CONTRACT = "contract"
MODULE = "module"


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
    not_verified: bool = False  # a note that says the rule could not decide
    data: dict[str, Any] = field(default_factory=dict)  # facts for code that reads it


class FileContext:
    """What rules know about the file being linted."""

    def __init__(
        self,
        path: str,
        summary: ModuleSummary,
        resolver: Resolver,
        scope: PackageScope | None = None,
    ) -> None:
        self.path = path
        self.source_text = ""  # the whole file, for rules that look past the sketch
        self.summary = summary
        self.resolver = resolver
        self.scope = scope  # how vLLM builds the classes of this file's package
        self._sig_cache: dict[str, FunctionSig | None] = {}
        self._cache_layers: dict[str, bool] = {}
        self._flags: frozenset[str] | None = None  # vllm_branches.availability_flags

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

    def owns_cache(self, callee: str) -> bool:
        """``callee`` builds a layer the engine allocates a cache for, registered under its
        prefix (vLLM's ``Attention``, ``MLAAttention``, Mamba mixers), as vLLM's code says."""
        if callee not in self._cache_layers:
            symbol = self.resolver.resolve(self.summary, callee)
            if symbol is None:
                symbol = self.resolver.vllm_layer(self.summary, callee)
            self._cache_layers[callee] = (
                owns_engine_cache(self.resolver, symbol)
                if symbol is not None
                # unreadable: vLLM's name for an attention layer, unless it is another
                # package's class of the same name
                else callee.rsplit(".", 1)[-1] in DECODER_ATTENTION_LAYERS
                and not self.resolver.imported_from_elsewhere(self.summary, callee)
            )
        return self._cache_layers[callee]

    def name_has_consumer(self, site: Site) -> bool:
        """Someone looks the layer up by its prefix: a quantization config reaches it, or
        it owns an engine cache (registered under its name)."""
        return quant_reaches(site) or self.owns_cache(site.callee)

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

    # -- how vLLM builds the class (``scope.py``) -----------------------------------
    def role(self, name: str) -> Role:
        return self.scope.role(self.summary.module, name) if self.scope else Role.UNKNOWN

    def is_architecture(self, node: cst.ClassDef) -> bool:
        """A top-level class vLLM builds as a model: a root or a stage of the package's
        scope; without a scope, a class shaped like one (named ``...ForCausalLM``)."""
        role = self.role(node.name.value)
        if role is not Role.UNKNOWN:
            return role in (Role.ROOT, Role.STAGE)
        name = node.name.value
        if not ARCHITECTURE_NAME.search(name) or name.startswith("_"):
            return False
        return bool(node.bases) and self.is_module_class(node)

    def outside_contract(self, name: str) -> str | None:
        """Why a finding on class ``name`` is only a note: no model the package registers
        with vLLM builds it (another loader does). None when it is in the contract."""
        if self.role(name) is not Role.OUTSIDE:
            return None
        config = "" if self._takes("vllm_config", name) else ", and it takes no `vllm_config`"
        return (
            f"a note: `{name}` is outside vLLM's model contract, since the package registers "
            f"its models with vLLM and none of them builds `{name}`{config} (another loader "
            "does)"
        )

    def component_root(self, site: Site) -> str | None:
        """Why a construction without prefix is the root of another loader's component: a
        class no model of the package builds (another loader does), with no prefix of its
        own to derive from, builds one of the package's own models (a pipeline's
        ``self.transformer``), which that loader names from ``""`` as vLLM names its root.
        None otherwise (a vLLM layer built there still needs a name)."""
        cls = site.scope.class_node
        if site.scope.roots or cls is None or self.role(cls.name.value) is not Role.OUTSIDE:
            return None
        symbol = self.resolver.resolve(self.summary, site.callee)
        if symbol is None or is_vllm(symbol.module.module or ""):
            return None
        return (
            f"a note: `{cls.name.value}` has no prefix of its own and another loader builds "
            f'it, so `{site.callee}` is the root of one of its components, named from `""` '
            "as vLLM names the model it builds"
        )

    def not_the_root(self, name: str) -> str | None:
        """Why an interface finding on class ``name`` is only a note: vLLM reads the
        interfaces of the root it builds, and ``name`` is not one. None for a root."""
        role = self.role(name)
        if role is Role.STAGE:
            builder = self.scope.builder_of(self.summary.module, name) if self.scope else None
            shown = builder.name if builder else "another model"
            return (
                f"a note: `{name}` is a stage, built by `{shown}` with "
                f"`init_vllm_registered_model`, and vLLM reads the interfaces of `{shown}`; "
                "it matters only if a checkpoint names this class's architecture itself"
            )
        if role is Role.BUILT:
            return (
                f"a note: `{name}` is built inside a model of its package, not by vLLM as the "
                "root, and vLLM reads the interfaces of the root"
            )
        return self.outside_contract(name)

    def inner_part(self, name: str) -> str | None:
        """Why code of class ``name`` that would be a reference leftover in the model vLLM
        drives is the model's own on purpose: ``name`` is a sub-module built under a root
        (vLLM calls the root, and ``name`` only by way of the model's own code). None
        when it is a root, or the package has no scope."""
        if self.role(name) is not Role.BUILT:
            return None
        return f"`{name}` is a sub-module of a model its package registers, which vLLM calls"

    @functools.cached_property
    def tree(self) -> ast.Module | None:
        """The whole file as ``ast`` (the sketch stubs most method bodies), for rules that
        read a body the sketch dropped; None when it does not parse."""
        try:
            return ast.parse(self.source_text)
        except (SyntaxError, ValueError):
            return None

    def off_vllm(self, node: cst.CSTNode) -> bool:
        """``node`` sits in a branch that never runs under vLLM (the fallback of a module
        that works without it: ``vllm_branches``); the flag may come from another module."""
        if self._flags is None:
            tree = self.tree
            self._flags = availability_flags(tree) if tree is not None else frozenset()
        return off_vllm(self.prefixes.anchors, node, self._is_flag)

    def _is_flag(self, name: str) -> bool:
        head, _, attr = name.partition(".")
        if not attr and head in (self._flags or ()):
            return True
        module, imported = self.summary.imports.get(head, ("", None))
        if attr and imported is not None:  # ``from pkg import compat``: ``compat.FLAG``
            module, imported = f"{module}.{imported}", None
        path = self.resolver.loader.path_for(module) if module else None
        flag = attr or imported
        if path is None or flag is None or "." in flag:
            return False
        self.resolver.loader.touched.add(path)  # the results cache depends on it now
        return flag in file_flags(path)

    def beside_paged_attention(self, name: str) -> bool:
        """``name`` is built under a root whose decoder keeps its attention in vLLM's
        cache-owning layers (``Attention``)."""
        return self.role(name) is Role.BUILT and self.in_paged_model(name)

    def in_paged_model(self, name: str) -> bool:
        """``name`` is a model of the package, or a part of one, whose decoder keeps its
        attention in vLLM's cache-owning layers (the root, its stages and what they build)."""
        return self.scope is not None and any(
            r.name == name and r.module == self.summary.module for r in self.scope.paged
        )

    def _takes(self, param: str, name: str) -> bool:
        cls = self.summary.classes.get(name)
        init = cls.methods.get("__init__") if cls else None
        return init is None or init.param(param) is not None or init.has_var_keyword

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
    # Words that make a top-level statement that defines nothing (a call at import time,
    # an ``if`` around one) worth parsing for this rule; by default only definitions are.
    statement_triggers: ClassVar[tuple[str, ...]] = ()
    # What the rule checks, which decides where a finding is only a note (``scope.py``):
    # ``INTERFACE`` (what vLLM reads of the model it builds: notes on classes that are
    # not that root), ``CONTRACT`` (how vLLM runs model code: notes on classes no model of
    # the package registers or builds), ``MODULE`` (names and layers: wherever they are).
    applies_to: ClassVar[str] = "module"
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
        not_verified: bool = False,
        data: dict[str, Any] | None = None,
    ) -> None:
        """Report ``node``. A fix is ``replacement`` (replaces ``node``, as in Fixit) or
        ``fix``, a planner that returns what replaces which node, or raises ``NoFix`` with
        the reason the finding then carries. ``not_verified``: a note that says what the
        rule could not decide, and why (shown like phase 2's "not verified" notes)."""
        walk = self.ctx.prefixes
        item = site.item if site is not None else walk.item
        anchors = site.anchors if site is not None else tuple(walk.anchors)
        why = self._scope_note(anchors)
        if not_verified:
            if why is not None:
                return  # what could not be checked does not apply to this class
            severity = Severity.NOTE
        if why is not None and (severity or self.severity) is not Severity.NOTE:
            severity, message = Severity.NOTE, f"{message} ({why})"
        planned = PlannedFix(node, replacement, "Replace") if replacement is not None else None
        no_fix = None
        if (severity or self.severity) is Severity.NOTE:
            # Fixes only from findings that are shown: a note is what the model may do by
            # design (a router vLLM keeps unquantized), and ``--fix`` must not change it
            planned = fix = None
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
                not_verified,
                data or {},
            )
        )

    def _scope_note(self, anchors: tuple[cst.CSTNode, ...]) -> str | None:
        """Why a finding of this rule, made inside ``anchors``, is a note (see
        ``applies_to``); None when it keeps its severity."""
        if self.applies_to == MODULE:
            return None
        top = next((a for a in anchors if isinstance(a, cst.ClassDef)), None)
        if top is None:
            return None
        name = top.name.value
        if self.applies_to == INTERFACE:
            return self.ctx.not_the_root(name)
        return self.ctx.outside_contract(name)

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
