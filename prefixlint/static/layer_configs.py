"""The per-layer configs a layer's constructor takes and a construction leaves out.

vLLM hands each layer its share of the engine's configuration as constructor arguments:
``quant_config`` (how the checkpoint quantized it) and ``cache_config`` (the KV-cache dtype
and window). A layer built without one falls back to ``None`` and builds as if the engine
had none. PFX405 and PFX406 read, for each layer construction (a prefix site), whether the
callee takes such a config, whether the call passes it, and which expression carrying it
the constructing function has in reach: its own name (a parameter or a local bound before
the call), ``self.<config>`` (bound before the call, or in another method), or
``vllm_config.<config>``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import libcst as cst

from prefixlint.static.index import ModuleSummary
from prefixlint.static.prefix_fixes import PlannedFix, append_arg, keyword_arg
from prefixlint.static.prefix_sites import Site, dotted_name, target_names
from prefixlint.static.resolve import Resolver, Symbol
from prefixlint.static.vllm_source import is_vllm
from prefixlint.static.walk import children

QUANT_CONFIG = "quant_config"
CACHE_CONFIG = "cache_config"
VLLM_CONFIG = "vllm_config"


def passes(site: Site, config: str) -> bool:
    """The call passes ``config`` in any form (``config=None`` is a choice, not an
    omission), or may through ``*args``/``**kwargs``."""
    if site.has_splat:
        return True
    positional = 0
    for arg in site.call.args:
        if arg.keyword is not None:
            if arg.keyword.value == config:
                return True
        else:
            positional += 1
    index = site.signature.positional_index(config)
    return index is not None and index < positional


def omitted(site: Site, config: str) -> bool:
    """The callee takes ``config`` (with a default: else the call would not build) and
    the call does not pass it."""
    param = site.signature.param(config)
    return param is not None and param.default is not None and not passes(site, config)


@dataclass(frozen=True)
class Bindings:
    """The names a function binds, in order, and where each call falls in that order."""

    params: frozenset[str]
    order: tuple[str, ...]  # bound names (``x``, ``self.x``) in source order
    calls: dict[int, int]  # id(call) -> how many bindings come before it


def _walk_bindings(node: cst.CSTNode, order: list[str], calls: dict[int, int]) -> None:
    if isinstance(node, cst.Call):
        calls[id(node)] = len(order)
    if isinstance(node, (cst.Assign, cst.AnnAssign)):
        if node.value is not None:  # the value runs before the target is bound
            _walk_bindings(node.value, order, calls)
        targets = (
            [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
        )
        for target in targets:
            order.extend(_bound(target))
        return
    for child in children(node):
        _walk_bindings(child, order, calls)


def _bound(target: cst.BaseExpression) -> Iterator[str]:
    name = dotted_name(target)
    if name is not None and (name.count(".") == 0 or name.startswith("self.")):
        yield name
    elif name is None:
        yield from target_names(target)


def _params(node: cst.FunctionDef | cst.Lambda) -> frozenset[str]:
    p = node.params
    every = [*p.posonly_params, *p.params, *p.kwonly_params]
    if isinstance(p.star_arg, cst.Param):
        every.append(p.star_arg)
    return frozenset(param.name.value for param in every)


class Reach:
    """What each function of a file has in reach, read once per function."""

    def __init__(self) -> None:
        self._functions: dict[int, Bindings] = {}

    def bindings(self, function: cst.FunctionDef) -> Bindings:
        key = id(function)
        if key not in self._functions:
            order: list[str] = []
            calls: dict[int, int] = {}
            _walk_bindings(function.body, order, calls)
            self._functions[key] = Bindings(_params(function), tuple(order), calls)
        return self._functions[key]

    def expression(self, site: Site, config: str, class_attributes: set[str]) -> str | None:
        """The expression that carries ``config`` where ``site`` is built, or None.
        ``class_attributes``: the ``self.x`` the class binds in any method."""
        lambda_params = _params(site.scope.node) if isinstance(site.scope.node, cst.Lambda) else ()
        functions = [a for a in site.anchors if isinstance(a, cst.FunctionDef)]
        names: set[str] = set(lambda_params)
        for function in functions:
            found = self.bindings(function)
            before = found.calls.get(id(site.call))
            names |= found.params
            names |= set(found.order[:before] if before is not None else ())
        if config in names:
            return config
        own = f"self.{config}"
        innermost = functions[-1] if functions else None
        if own in names or (
            innermost is not None
            and innermost.name.value != "__init__"
            and site.scope.class_node is not None
            and config in class_attributes
        ):
            return own
        if VLLM_CONFIG in names:
            return f"{VLLM_CONFIG}.{config}"
        return None


def config_fix(site: Site, config: str, expression: str) -> PlannedFix:
    """The call with ``config=expression`` appended."""
    value = cst.parse_expression(expression)
    new_call = append_arg(site.call, keyword_arg(site.call, config, value))  # NoFix if not
    return PlannedFix(site.call, new_call, f"Add `{config}={expression}`")


# -- what the callee builds --------------------------------------------------------------

# vLLM's bases that its quantization configs dispatch on (``get_quant_method``'s
# ``isinstance(layer, LinearBase)`` / ``RoutedExperts``): a checkpoint quantizes these.
QUANTIZED_BASES = frozenset({"LinearBase", "RoutedExperts", "FusedMoE"})
# The package of vLLM's MoE layers, whose factory functions build ``RoutedExperts``.
MOE_PACKAGE = "vllm.model_executor.layers.fused_moe"
# The package of vLLM's MoE routers (``GateLinear``): built unquantized by convention.
ROUTER_PACKAGE = "vllm.model_executor.layers.fused_moe.router"
# vLLM's vocabulary layers: quantized only by configs that opt in (GPTQ/AWQ
# ``lm_head_quantized``, compressed-tensors schemes that name them).
VOCAB_BASE = "VocabParallelEmbedding"
LM_HEAD = "ParallelLMHead"


def callee_symbols(resolver: Resolver, module: ModuleSummary, site: Site) -> list[Symbol]:
    """What the site may build: its callee, or the classes a local name is bound to
    (``attn_cls = EncoderOnlyAttention if ... else Attention``)."""
    out = []
    for name in [site.callee, *site.scope.aliases.get(site.callee, ())]:
        symbol = resolver.resolve(module, name) or resolver.vllm_layer(module, name)
        if symbol is not None:
            out.append(symbol)
    return out


def _mro_names(resolver: Resolver, symbol: Symbol) -> set[str]:
    mro, _ = resolver.class_mro(symbol)
    out = {e.name for e in mro if is_vllm(e.module.module or "")}
    for entry in mro:
        if entry.cls is not None and is_vllm(entry.module.module or ""):
            out |= {b.rsplit(".", 1)[-1] for b in entry.cls.bases}
    return out


def quantized_layer(resolver: Resolver, symbol: Symbol) -> bool:
    """A vLLM layer a quantized checkpoint quantizes: a linear layer or an MoE layer."""
    module = symbol.module.module or ""
    if symbol.function is not None:
        return module.startswith(MOE_PACKAGE)
    return symbol.cls is not None and bool(_mro_names(resolver, symbol) & QUANTIZED_BASES)


# vLLM's fused linear layers: one module for parts a checkpoint may hold separately.
FUSED_LAYERS = frozenset({"QKVParallelLinear", "MergedColumnParallelLinear"})


def fused_layer(resolver: Resolver, symbol: Symbol) -> bool:
    """One of vLLM's fused linear layers (``QKVParallelLinear``,
    ``MergedColumnParallelLinear``) or a subclass of one."""
    return symbol.cls is not None and bool(_mro_names(resolver, symbol) & FUSED_LAYERS)


def is_router(symbol: Symbol) -> bool:
    """One of vLLM's MoE router layers, by where vLLM defines it."""
    module = symbol.module.module or ""
    return module == ROUTER_PACKAGE or module.startswith(ROUTER_PACKAGE + ".")


def vocabulary_layer(resolver: Resolver, symbol: Symbol) -> str | None:
    """``"head"`` for vLLM's ``ParallelLMHead`` (GPTQ, AWQ, compressed-tensors and
    ModelOpt configs may quantize it), ``"embedding"`` for its other vocabulary layers
    (only compressed-tensors schemes that name them do), None otherwise."""
    if symbol.cls is None:
        return None
    names = _mro_names(resolver, symbol)
    if LM_HEAD in names:
        return "head"
    return "embedding" if VOCAB_BASE in names else None


def builds_layer(
    resolver: Resolver,
    symbol: Symbol,
    is_layer: Callable[[Symbol], bool],
    seen: set[tuple[str, str]] | None = None,
) -> bool:
    """A class (the model's own, or vLLM's) whose body names a layer ``is_layer``
    accepts, directly or through the classes it names (an MLP block, an attention block)."""
    seen = set() if seen is None else seen
    key = (symbol.module.path, symbol.name)
    if symbol.cls is None or key in seen or len(seen) > 40:
        return False
    seen.add(key)
    for name in symbol.cls.mentions:
        found = resolver.resolve(symbol.module, name)
        if found is not None and (is_layer(found) or builds_layer(resolver, found, is_layer, seen)):
            return True
    return False


def cut_off(sites: list[Site], site: Site, config: str) -> list[Site]:
    """The layers a class of this file builds without ``config`` because the class takes
    none (no ``config``, no ``vllm_config``, no ``**kwargs``), when ``site`` builds that
    class: the builder may have the config in reach, but cannot hand it down (a
    cross-attention block built as ``CrossAttention(config, prefix=...)``)."""
    sig = site.signature
    if sig.param(config) is not None or sig.param("vllm_config") is not None:
        return []
    if sig.has_var_keyword:
        return []
    name = site.callee.rsplit(".", 1)[-1]
    if "." in site.callee:
        return []
    return [
        s
        for s in sites
        if s.scope.class_node is not None
        and s.scope.class_node.name.value == name
        and s.scope.node is not None
        and getattr(getattr(s.scope.node, "name", None), "value", None) == "__init__"
        and omitted(s, config)
    ]
