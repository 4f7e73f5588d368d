"""PFX702: the model built again under vLLM's real ``Fp8Config`` with ``ignored_layers``
naming whole kinds of checkpoint layers; every linear layer's method is compared with
what the checkpoint names that PFX701 saw reach it demand."""

from __future__ import annotations

import time
from typing import Any

from torch import nn

from prefixlint.codes import QUANTIZATION_MISMATCH_CODE
from prefixlint.introspect.builds.layout import build_layout
from prefixlint.introspect.dryrun.sites import Sites
from prefixlint.introspect.dryrun.streaming import Stream
from prefixlint.introspect.dryrun.weights import module_leaf
from prefixlint.introspect.finding import Finding, describe_error

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


def quant_findings(
    cls: type | None,
    model_config: Any,
    base: Any,
    sources: dict[str, list[str]],
    sites: Sites,
    deadline: float | None = None,
) -> tuple[list[Finding], str]:
    """Build under vLLM's Fp8Config for each ignore set and compare each linear layer's
    method with the checkpoint layers it loads. Returns findings and a reason when the
    check could not run (or not before ``deadline``: each build takes about as long as
    the first)."""
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod
    from vllm.model_executor.layers.quantization.fp8 import Fp8Config

    out: list[Finding] = []
    seen_unthreaded: set[str] = set()  # one finding per layer over both ignore sets
    for ignored in ignore_sets(sources):
        if past(deadline, need=base.seconds):
            return out, OUT_OF_TIME
        config = Fp8Config(ignored_layers=sorted(ignored))
        build = build_layout(base.plan, base.layout, quant_config=config)
        if build.error is not None:
            if "same" in str(build.error) and "precision" in str(build.error).lower():
                msg = (
                    "a fused layer mixes checkpoint layers the checkpoint ignores with ones it "
                    "quantizes; `packed_modules_mapping` does not match the checkpoint: "
                    f"vLLM: {describe_error(build.error)}"
                )
                out.append(
                    Finding(QUANTIZATION_MISMATCH_CODE, "error", msg, *sites.packed_mapping())
                )
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
                    out.append(unthreaded(model_config, path, module, layers, sites))
                continue
            actual = isinstance(method, UnquantizedLinearMethod)
            if actual != bool(skipped):
                out.append(_quant_mismatch(cls, path, module, layers, bool(skipped), sites))
    return out, ""


def unthreaded(
    model_config: Any, path: str, module: nn.Module, layers: list[str], sites: Sites
) -> Finding:
    """A linear layer built without ``quant_config`` (so vLLM gives it
    ``UnquantizedLinearMethod`` whatever the checkpoint holds) whose checkpoint layers the
    synthetic quantization config covers. A note: the config is prefixlint's, and vLLM's
    own models leave many such layers out on purpose (routers, one output per expert;
    gates of one output; convolutions and projections of state-space mixers; vision and
    audio towers and projectors): on vLLM 0.32's zoo, 73 such findings at 48 sites, every
    one of those kinds (docs/precision.md). The static PFX405
    judges the omission at its line, and `check --introspect` folds this into it; with
    ``--checkpoint`` the real quantization config decides (``realquant.py``: an error
    where the checkpoint stores the layer quantized)."""
    names = ", ".join(f"`{n}`" for n in layers)
    what = (
        f"`{path}` was built without `quant_config`, so it stays unquantized although the "
        f"quantization config covers {names}"
    )
    if _router(model_config, module):
        why = (
            "a router, one output per expert, which vLLM's MoE models build unquantized on purpose"
        )
    else:
        why = "a checkpoint that quantizes it would have no parameter for its scales"
    message = f"{what} (a note: {why}; a synthetic config cannot tell whether one does)"
    return Finding(QUANTIZATION_MISMATCH_CODE, "note", message, *sites.module(path))


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


def packed_entry_wrong(packed: Any, leaf: str, leaves: list[str]) -> str | None:
    """How the model's ``packed_modules_mapping`` keeps the fused layer ``leaf`` from the
    checkpoint's parts ``leaves``; None when its entry lists exactly those parts."""
    entry = packed.get(leaf)
    if entry is None:
        return f"`packed_modules_mapping` has no entry `{leaf!r}: {leaves}`"
    if list(entry) == leaves:
        return None
    return f"`packed_modules_mapping[{leaf!r}]` is {list(entry)}, not {leaves}"


def _quant_mismatch(
    cls: type | None, path: str, module: nn.Module, layers: list[str], ignored: bool, sites: Sites
) -> Finding:
    prefix = getattr(module, "prefix", path)
    names = ", ".join(f"`{n}`" for n in layers)
    if ignored:
        what = f"`{path}` is quantized although the checkpoint lists {names} in `ignored_layers`"
    else:
        what = f"`{path}` is left unquantized although the checkpoint quantizes {names}"
    leaf = module_leaf(path)
    leaves = list(dict.fromkeys(module_leaf(n) for n in layers))
    packed = getattr(cls, "packed_modules_mapping", None) or {}
    site = sites.module(path)
    group = ""  # a missing entry: PFX606's defect too (packed.without_duplicates)
    if prefix != path:
        site = sites.prefix_root(path)
        why = (
            f"its prefix `{prefix}` is not its path, and the quantization config matches the prefix"
        )
    elif len(layers) > 1 and leaves != [leaf]:
        wrong = packed_entry_wrong(packed, leaf, leaves)
        if wrong is None:  # the model's entry lists the parts: the cause is not there
            why = (
                f"`packed_modules_mapping[{leaf!r}]` lists {leaves}, yet vLLM's "
                "`is_layer_skipped` decides otherwise for this prefix"
            )
        else:
            why, site = wrong, sites.packed_mapping()
            group = f"packed:{leaf}" if packed.get(leaf) is None else ""
    elif layers != [path]:
        name = layers[0]
        why = (
            f"the checkpoint calls it `{name}` and no `hf_to_vllm_mapper` entry renames that "
            f"to `{path}`"
        )
    else:
        why = "vLLM's `is_layer_skipped` decides otherwise for this prefix"
    message = f"{what} (prefix `{prefix}`): {why}"
    return Finding(QUANTIZATION_MISMATCH_CODE, "error", message, *site, group=group)


# -- entry point ------------------------------------------------------------------------------
