"""Which classes are model architectures, drafts and interface implementers: facts the
contract and interface rules share.

Each fact has one definition here: ``ARCHITECTURE_NAME`` (what an architecture class is
called), ``DRAFT_NAME`` (what a speculative-decoding draft is called), and the registry's
speculative-decoding table (``speculative_classes``; the registry's architectures are
``vllm_source.registry_architectures``, which needs no libcst), read from vLLM's code,
never imported.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path
from typing import TYPE_CHECKING

import libcst as cst

from prefixlint.static.index import ClassSummary, FunctionSig
from prefixlint.static.resolve import Symbol
from prefixlint.static.scope import Role
from prefixlint.static.vllm_source import VllmSource

if TYPE_CHECKING:  # rule.py imports this module: annotations only
    from prefixlint.static.rule import FileContext, LintRule

# ``For`` + an upper-case word or digit: ``LlamaForCausalLM``, ``Qwen2ForRewardModel``; not
# ``FeedForward`` or ``QFormerModel``. The sketch (source.py) and the rules both use it.
ARCHITECTURE_NAME = re.compile(r"For[A-Z0-9]\w*$")

# Draft models of speculative decoding (EAGLE, MTP, Medusa, DFlash, speculators, ...).
DRAFT_NAME = re.compile(r"MTP|Mtp|Eagle|DFlash|DSpark|Medusa|Speculator|Draft")

# -- vLLM's model registry (read from vLLM's code, ``vllm_source``) -----------------------
SPECULATIVE_TABLE = "_SPECULATIVE_DECODING_MODELS"


@functools.lru_cache(maxsize=8)
def speculative_classes(source: VllmSource | None) -> frozenset[str]:
    """Classes in the speculative-decoding table of vLLM's registry."""
    entries = source.registry() if source is not None else ()
    return frozenset(e.cls for e in entries if e.table == SPECULATIVE_TABLE)


# Methods that only a model the engine drives has, own or inherited.
MODEL_METHODS = ("load_weights", "compute_logits", "embed_input_ids")

KWONLY = "kwonly"
POS = "pos"
POSONLY = "posonly"
VARARGS = "varargs"
VARKW = "varkw"


def param_kinds(fn: cst.FunctionDef) -> list[tuple[cst.Param, str]]:
    """Parameters in order, each with its kind (as in ``inspect.Parameter``)."""
    p = fn.params
    out = [(x, POSONLY) for x in p.posonly_params]
    out += [(x, POS) for x in p.params]
    if isinstance(p.star_arg, cst.Param):
        out.append((p.star_arg, VARARGS))
    out += [(x, KWONLY) for x in p.kwonly_params]
    if isinstance(p.star_kwarg, cst.Param):
        out.append((p.star_kwarg, VARKW))
    return out


def named_params(params: list[tuple[cst.Param, str]]) -> list[tuple[cst.Param, str]]:
    """Parameters without ``self``/``cls`` and without ``*args``/``**kwargs``."""
    named = [(p, k) for p, k in params if k not in (VARARGS, VARKW)]
    if named and named[0][1] != KWONLY and named[0][0].name.value in ("self", "cls"):
        named = named[1:]
    return named


def is_method_of(ctx: FileContext, node: cst.FunctionDef, class_node: cst.ClassDef | None) -> bool:
    """``node`` is a method written directly in the body of a top-level class."""
    if class_node is None or len(ctx.prefixes.class_stack) != 1:
        return False
    body = class_node.body.body if isinstance(class_node.body, cst.IndentedBlock) else ()
    return any(stmt is node for stmt in body)


def is_model_architecture(ctx: FileContext, node: cst.ClassDef) -> bool:
    """A class the engine instantiates and drives as a whole model.

    A root or stage of the package's scope (registered with vLLM, or in vLLM's registry
    tables: by the module that defines it, so a plugin class that only shares a name with
    a vLLM architecture is not that architecture). Without a scope: named like an
    architecture (``...ForCausalLM``) and an ``nn.Module`` that has, itself or through a
    resolvable base, a method only such models have (``load_weights``, ``compute_logits``,
    ``embed_input_ids``) or a ``forward`` that takes ``input_ids``. The name alone also
    matches poolers (``JinaForRankingPool``) and ``FeedForward`` blocks.
    """
    if len(ctx.prefixes.class_stack) > 1 and ctx.prefixes.class_stack[-1] is node:
        return False  # a nested class
    role = ctx.role(node.name.value)
    if role is not Role.UNKNOWN:
        # The package's scope says how vLLM builds it: a root or a stage is a model.
        return role in (Role.ROOT, Role.STAGE)
    if not ctx.is_architecture(node):
        return False
    cls = ctx.class_summary(node)
    if cls is None:
        return False
    forward = cls.methods.get("forward")
    if forward is not None and forward.param("input_ids") is not None:
        return True
    if any(m in cls.methods and not cls.methods[m].is_stub for m in MODEL_METHODS):
        return True
    symbol = ctx.symbol(node)
    return symbol is not None and any(
        ctx.resolver.class_has(symbol, m) is True for m in MODEL_METHODS
    )


def all_bases_resolve(ctx: FileContext, node: cst.ClassDef) -> bool:
    cls = ctx.class_summary(node)
    if cls is None:
        return False
    return all(
        b in ctx.summary.classes or ctx.resolver.resolve(ctx.summary, b) is not None
        for b in cls.bases
    )


def is_draft_model(ctx: FileContext, node: cst.ClassDef) -> bool:
    """A draft model of speculative decoding (EAGLE, MTP, Medusa, DFlash, ...): listed as
    one in vLLM's registry, or named like one. Its proposer calls it, with its own
    arguments, and embeds tokens itself unless the draft is multimodal."""
    return is_draft_name(ctx, node.name.value)


def is_draft_name(ctx: FileContext, name: str) -> bool:
    """``name`` is named like a draft, or listed in the registry's speculative section."""
    if DRAFT_NAME.search(name):
        return True
    return name in speculative_classes(ctx.resolver.loader.vllm)


def in_draft_file(ctx: FileContext) -> bool:
    """The file defines a draft model (an MTP/EAGLE module and its helper classes)."""
    return any(is_draft_name(ctx, name) for name in ctx.summary.classes)


def anchors_to(anchors: tuple[cst.CSTNode, ...], node: cst.CSTNode) -> tuple[cst.CSTNode, ...]:
    """The anchors down to ``node``, included: a report then points inside ``node``."""
    for i, a in enumerate(anchors):
        if a is node:
            return anchors[: i + 1]
    return anchors


def top_level_class(rule: LintRule, node: cst.ClassDef) -> ClassSummary | None:
    """The summary of ``node`` when it is a top-level class (nested names may collide)."""
    stack = rule.ctx.prefixes.class_stack
    if len(stack) != 1 or stack[0] is not node or rule.ctx.prefixes.function_stack:
        return None
    return rule.ctx.class_summary(node)


def is_protocol(cls: ClassSummary) -> bool:
    return any(b.rsplit(".", 1)[-1] == "Protocol" for b in cls.bases)


def accepts_param(sig: FunctionSig, name: str) -> bool:
    return sig.param(name) is not None or sig.has_var_keyword


def interface_mro(rule: LintRule, cls: ClassSummary) -> tuple[list[Symbol], bool]:
    """The class and its resolvable bases, and whether every base could be read."""
    return rule.ctx.resolver.class_mro(Symbol(rule.ctx.summary, cls.name, cls=cls))


def forward_of(rule: LintRule, cls: ClassSummary) -> FunctionSig | None:
    """The ``forward`` the class runs: its own, else the first one along resolvable bases."""
    own = cls.methods.get("forward")
    if own is not None:
        return own
    mro, _ = interface_mro(rule, cls)
    for entry in mro[1:]:
        if entry.cls is None or is_protocol(entry.cls):
            continue
        sig = entry.cls.methods.get("forward")
        if sig is not None and not sig.is_stub:
            return sig
    return None


def is_drafter(rule: LintRule, cls: ClassSummary) -> bool:
    """A speculative-decoding drafter: its forward consumes the target's hidden states."""
    if is_draft_name(rule.ctx, cls.name):
        return True
    sig = forward_of(rule, cls)
    return sig is not None and any(
        sig.param(p) is not None for p in ("hidden_states", "previous_hidden_states")
    )


def raising_method(rule: LintRule, cls: ClassSummary, method: str) -> str | None:
    """The class along ``cls``'s resolvable bases (itself first) that defines ``method``
    with a body that only raises ``NotImplementedError``: the author wrote the method and
    said it is unsupported, which is not the same as having none (vLLM's interface checks
    look for the attribute). None when no class does. The index counts such a body as a
    stub, so its source is read here, only when a rule is about to say "has no"."""
    mro, _ = interface_mro(rule, cls)
    for entry in mro:
        if entry.cls is None or is_protocol(entry.cls):
            continue
        sig = entry.cls.methods.get(method)
        if sig is None or not sig.is_stub:
            continue
        if entry.module is rule.ctx.summary:
            text = rule.ctx.source_text
        else:
            try:
                text = Path(entry.module.path).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
        if _raises_not_implemented(text, entry.cls.name, method):
            return entry.cls.name
    return None


def _raises_not_implemented(text: str, cls: str, method: str) -> bool:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return False
    for node in tree.body:
        if not (isinstance(node, ast.ClassDef) and node.name == cls):
            continue
        for fn in node.body:
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name == method:
                body = [
                    s
                    for s in fn.body
                    if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
                ]
                return (
                    len(body) == 1
                    and isinstance(body[0], ast.Raise)
                    and body[0].exc is not None
                    and _exception_name(body[0].exc) == "NotImplementedError"
                )
    return False


def _exception_name(exc: ast.expr) -> str:
    target = exc.func if isinstance(exc, ast.Call) else exc
    if isinstance(target, ast.Attribute):
        return target.attr
    return target.id if isinstance(target, ast.Name) else ""


# V0's forward contract: the engine passed the KV caches and the attention metadata.
V0_FORWARD_PARAMS = ("kv_caches", "attn_metadata")


def removed_vllm_imports(ctx: FileContext) -> list[str]:
    """The names the file imports from vLLM that the vLLM being read does not have: a
    module it lacks, or a name its module binds nowhere (a variable or an alias the module
    binds is there, whatever it is). Evidence the file targets another vLLM."""
    loader, out = ctx.resolver.loader, []
    for local, (module, attr) in sorted(ctx.summary.imports.items()):
        if not module.startswith("vllm"):
            continue
        if ctx.resolver.unresolved_vllm(ctx.summary, local) is None:
            continue
        if attr is not None and loader.by_name(f"{module}.{attr}") is not None:
            continue  # a submodule
        found = loader.by_name(module)
        if found is not None and (found.names is None or (attr or "") in found.names):
            continue  # bound there (or cannot be known): not evidence
        out.append(f"{module}.{attr}" if attr else module)
    return out


def other_vllm(ctx: FileContext) -> str:
    """A clause that says the file targets another vLLM (it imports names the vLLM being
    read does not define), for a finding judged against this one; empty otherwise."""
    removed = removed_vllm_imports(ctx)
    if not removed:
        return ""
    shown = ", ".join(f"`{n}`" for n in removed[:3]) + (", ..." if len(removed) > 3 else "")
    return (
        f" (the file imports {shown}, which this vLLM does not define: it targets another "
        "vLLM, and is judged here against this one)"
    )
