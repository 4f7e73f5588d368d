"""PFX702: the model built again under vLLM's real ``Fp8Config`` with ``ignored_layers``
naming whole kinds of checkpoint layers; every linear layer's method is compared with
what the checkpoint names that PFX701 saw reach it demand. Returns typed facts
(``quantfacts.py``); the PFX702 unit writes their words."""

from __future__ import annotations

import time
from typing import Any

from torch import nn

from prefixlint.introspect.builds.layout import build_layout
from prefixlint.introspect.dryrun.quantfacts import (
    Cause,
    FusedPrecisionRefused,
    LayerMisquantized,
    PackedEntry,
    UnthreadedLayer,
)
from prefixlint.introspect.dryrun.sites import Sites
from prefixlint.introspect.dryrun.streaming import Stream
from prefixlint.introspect.dryrun.weights import module_leaf
from prefixlint.introspect.finding import describe_error

QuantFact = FusedPrecisionRefused | UnthreadedLayer | LayerMisquantized

OUT_OF_TIME = "skipped: the builds used most of this target's time budget (raise `--timeout`)"


def past(deadline: float | None, need: float = 0.0) -> bool:
    """The deadline has passed, or would before a step of ``need`` seconds ends."""
    return deadline is not None and time.monotonic() + need > deadline


def layer_sources(stream: Stream, model: nn.Module) -> dict[str, list[str]]:
    """vLLM linear module path -> the checkpoint layers (names without the tensor's last
    component) whose tensors were written into its parameters, in the order of the
    regions they fill (q, k, v)."""
    from vllm.model_executor.layers.linear import LinearBase

    linear = {path for path, m in model.named_modules() if isinstance(m, LinearBase)}
    return written_layers(stream, linear, unwritten=True)


def written_layers(
    stream: Stream, modules: set[str], unwritten: bool = False
) -> dict[str, list[str]]:
    """Module path (of ``modules``) -> the checkpoint layers whose tensors were written
    into its parameters, in the order of the regions they fill; with ``unwritten``, also
    the layers that reached a parameter without writing into it (last)."""
    first: dict[str, dict[str, int]] = {}
    for t in stream.recorder.by_storage.values():
        path = t.name.rpartition(".")[0]
        if not (t.is_param and path in modules and t.sources):
            continue
        where = first.setdefault(path, {})
        for lo, _, tags in t.writes:
            for tag in tags:
                layer = tag.rpartition(".")[0]
                where[layer] = min(where.get(layer, lo), lo)
        if unwritten:
            for tag in t.sources:
                where.setdefault(tag.rpartition(".")[0], 1 << 62)
    return {path: sorted(w, key=lambda k: (w[k], k)) for path, w in first.items()}


def ignore_sets(sources: dict[str, list[str]]) -> list[set[str]]:
    """Two ``ignored_layers`` lists that split the kinds of linear layers between them, so
    that each layer is checked once ignored and once quantized."""
    kinds: dict[str, set[str]] = {}
    for path, layers in sources.items():
        kinds.setdefault(module_leaf(path), set()).update(layers)
    names = sorted(kinds)
    first = set().union(*(kinds[k] for k in names[0::2])) if names else set()
    second = set().union(*(kinds[k] for k in names[1::2])) if names[1:] else set()
    return [first, second]


def quant_facts(
    cls: type | None,
    model_config: Any,
    base: Any,
    sources: dict[str, list[str]],
    sites: Sites,
    deadline: float | None = None,
) -> tuple[list[QuantFact], str]:
    """Build under vLLM's Fp8Config for each ignore set and compare each linear layer's
    method with the checkpoint layers it loads. Returns the PFX702 facts and a reason when
    the check could not run (or not before ``deadline``: each build takes about as long
    as the first)."""
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod
    from vllm.model_executor.layers.quantization.fp8 import Fp8Config

    out: list[QuantFact] = []
    seen_unthreaded: set[str] = set()  # one fact per layer over both ignore sets
    for ignored in ignore_sets(sources):
        if past(deadline, need=base.seconds):
            return out, OUT_OF_TIME
        config = Fp8Config(ignored_layers=sorted(ignored))
        build = build_layout(base.plan, base.layout, quant_config=config)
        if build.error is not None:
            if "same" in str(build.error) and "precision" in str(build.error).lower():
                refused = describe_error(build.error)
                out.append(FusedPrecisionRefused(sites.packed_mapping(), refused))
                continue
            return out, f"building under `Fp8Config` failed: {describe_error(build.error)}"
        for path, layers in sorted(sources.items()):
            skipped = set(layers) & ignored
            if skipped and skipped != set(layers):
                continue  # a layer fed by several kinds: no single expectation
            try:
                module = build.model.get_submodule(path)
            except AttributeError:
                continue
            method = getattr(module, "quant_method", None)
            if method is None:
                continue
            if getattr(module, "quant_config", None) is None:
                if not skipped and path not in seen_unthreaded:
                    seen_unthreaded.add(path)
                    router = _router(model_config, module)
                    out.append(UnthreadedLayer(sites.module(path), path, tuple(layers), router))
                continue
            actual = isinstance(method, UnquantizedLinearMethod)
            if actual != bool(skipped):
                out.append(_quant_mismatch(cls, path, module, layers, bool(skipped), sites))
    return out, ""


# A layer built without ``quant_config`` (``UnthreadedLayer``) gets vLLM's
# ``UnquantizedLinearMethod`` whatever the checkpoint holds. A note: the config is
# prefixlint's, and vLLM's own models leave many such layers out on purpose (routers, one
# output per expert; gates of one output; convolutions and projections of state-space
# mixers; vision and audio towers and projectors): on vLLM 0.32's zoo, 73 such findings at
# 48 sites, every one of those kinds (docs/precision.md). The static PFX405 judges the
# omission at its line, and `check --introspect` folds this into it; with ``--checkpoint``
# the real quantization config decides (``realquant.py``: an error where the checkpoint
# stores the layer quantized).


def _router(model_config: Any, module: nn.Module) -> bool:
    """A replicated linear layer with one output per expert of the model's config."""
    from vllm.model_executor.layers.linear import ReplicatedLinear

    if not isinstance(module, ReplicatedLinear):
        return False
    config = getattr(model_config, "hf_text_config", None) or model_config.hf_config
    experts = {
        getattr(config, name, None)
        for name in ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
    }
    return getattr(module, "output_size", None) in experts - {None}


def packed_entry(packed: Any, leaf: str, leaves: list[str]) -> PackedEntry:
    """The model's ``packed_modules_mapping`` entry for the fused layer ``leaf`` against
    the checkpoint's parts ``leaves``."""
    entry = packed.get(leaf)
    return PackedEntry(leaf, tuple(leaves), None if entry is None else tuple(entry))


def _quant_mismatch(
    cls: type | None, path: str, module: nn.Module, layers: list[str], ignored: bool, sites: Sites
) -> LayerMisquantized:
    prefix = getattr(module, "prefix", path)
    leaf = module_leaf(path)
    leaves = list(dict.fromkeys(module_leaf(n) for n in layers))
    packed = getattr(cls, "packed_modules_mapping", None) or {}
    site, cause = sites.module(path), Cause("skipped")
    if prefix != path:
        site, cause = sites.prefix_root(path), Cause("prefix")
    elif len(layers) > 1 and leaves != [leaf]:
        entry = packed_entry(packed, leaf, leaves)
        cause = Cause("packed", entry)
        if entry.state != "listed":  # the model's entry misses the parts: it is the cause
            site = sites.packed_mapping()
    elif layers != [path]:
        cause = Cause("renamed", name=layers[0], to=path)
    return LayerMisquantized(site, path, prefix, tuple(layers), ignored, cause)


# -- entry point ------------------------------------------------------------------------------
