"""Facts about vLLM's layers, derived from vLLM's code (its index summaries), not from
lists of names: which callables reduce their output across tensor-parallel ranks."""

from __future__ import annotations

import weakref
from dataclasses import dataclass

from prefixlint.static.index import FunctionSig
from prefixlint.static.resolve import Resolver, Symbol
from prefixlint.static.vllm_source import is_vllm

# vLLM's constructor flag of a layer that all-reduces its own output (``RowParallelLinear``,
# ``FusedMoE``, ``FusedMoEFactory``, ...): passing False defers the reduction to the caller.
REDUCE_FLAG = "reduce_results"


@dataclass(frozen=True)
class Reduction:
    """How a layer's output is reduced: always (``flag`` None), or unless ``flag`` is
    passed False, reducing by ``default`` when it is not passed."""

    flag: str | None
    default: bool = True


def _is_vllm(symbol: Symbol) -> bool:
    return is_vllm(symbol.module.module or "")


def reduction(resolver: Resolver, symbol: Symbol) -> Reduction | None:
    """Whether what ``symbol`` builds all-reduces its output, as vLLM's code says: a vLLM
    class, or a class built on one, whose constructor takes ``reduce_results`` (the
    signature's default when it is not passed); a vLLM factory function taking it that
    builds a module; a vLLM class whose ``forward`` (the one that runs) all-reduces."""
    if symbol.function is not None:
        sig = symbol.function
        if _is_vllm(symbol) and symbol.function.returns_module is not False:
            return _flagged(sig)
        return None
    if symbol.cls is None:
        return None
    mro, _ = resolver.class_mro(symbol)
    owner = next((e for e in mro if e.cls is not None and "__init__" in e.cls.methods), None)
    if owner is not None and any(_is_vllm(e) for e in mro):
        flagged = _flagged(owner.cls.methods["__init__"])  # type: ignore[union-attr]
        if flagged is not None:
            return flagged
    runs = next((e for e in mro if e.cls is not None and "forward" in e.cls.methods), None)
    if runs is not None and _is_vllm(runs) and runs.cls.forward_all_reduces:  # type: ignore[union-attr]
        return Reduction(None)
    return None


def _flagged(sig: FunctionSig) -> Reduction | None:
    param = sig.param(REDUCE_FLAG)
    if param is None:
        return None
    return Reduction(REDUCE_FLAG, param.default in (None, "True"))


# vLLM's base class of the layers whose cache the engine allocates and manages per layer
# (``Attention``, ``MLAAttention``, the Mamba mixers): the paged KV cache lives in them.
CACHE_LAYER_BASE = "AttentionLayerBase"


def owns_engine_cache(resolver: Resolver, symbol: Symbol) -> bool:
    """A vLLM layer the engine allocates a cache for (a subclass of ``AttentionLayerBase``)."""
    if symbol.cls is None:
        return False
    mro, _ = resolver.class_mro(symbol)
    return any(e.name == CACHE_LAYER_BASE and _is_vllm(e) for e in mro) or any(
        b.rsplit(".", 1)[-1] == CACHE_LAYER_BASE and _is_vllm(e)
        for e in mro
        for b in e.cls.bases  # type: ignore[union-attr]
    )


_BUILDS_CACHE: weakref.WeakKeyDictionary[Resolver, dict[tuple[str, str], bool]] = (
    weakref.WeakKeyDictionary()
)


def builds_engine_cache(resolver: Resolver, symbol: Symbol) -> bool:
    """A vLLM class that owns an engine cache or builds one, through the classes its body
    names (``Qwen3Model`` -> ``Qwen3DecoderLayer`` -> ``Qwen3Attention`` -> ``Attention``):
    a model built from it keeps its decoder's attention in vLLM's paged layers. Asked
    once per class and resolver."""
    if symbol.cls is None or not _is_vllm(symbol):
        return False
    known = _BUILDS_CACHE.setdefault(resolver, {})
    key = (symbol.module.path, symbol.name)
    if key not in known:
        known[key] = _builds(resolver, symbol, set())
    return known[key]


def _builds(resolver: Resolver, symbol: Symbol, seen: set[tuple[str, str]]) -> bool:
    """``builds_engine_cache`` by a walk that visits each class once (``seen``)."""
    key = (symbol.module.path, symbol.name)
    if symbol.cls is None or not _is_vllm(symbol) or key in seen or len(seen) > 400:
        return False
    seen.add(key)
    if owns_engine_cache(resolver, symbol):
        return True
    for name in (*symbol.cls.bases, *symbol.cls.mentions):
        found = resolver.resolve(symbol.module, name)
        if isinstance(found, Symbol) and _builds(resolver, found, seen):
            return True
    return False


# The protocol vLLM checks every model class against (``interfaces_base.VllmModel``).
MODEL_PROTOCOL = ("vllm.model_executor.models.interfaces_base", "VllmModel")
EMBED_METHOD = "embed_input_ids"  # its name in the releases this project is tested on


def embed_method(resolver: Resolver) -> str:
    """The name of the model method that embeds token ids, as vLLM's ``VllmModel``
    protocol declares it (``embed_input_ids``; ``get_input_embeddings`` in releases
    before the rename): the method besides ``forward`` that takes ``input_ids``."""
    summary = resolver.loader.by_name(MODEL_PROTOCOL[0])
    protocol = summary.classes.get(MODEL_PROTOCOL[1]) if summary is not None else None
    for name, sig in protocol.methods.items() if protocol is not None else ():
        if name not in ("__init__", "forward") and sig.param("input_ids") is not None:
            return name
    return EMBED_METHOD
