"""The model built under a real checkpoint's quantization config, and each layer judged.

vLLM makes the quantization config itself: a ``ModelConfig`` of the checkpoint's own
config.json resolves the method (``quantization_config.quant_method``, with vLLM's
overrides), and ``VllmConfig`` builds it through vLLM's registry
(``get_quantization_config(method).from_config(...)``, its capability and dtype checks,
``maybe_update_config``): ``fp8`` with ``ignored_layers``, ``compressed-tensors`` with
``ignore`` and its config groups, ``modelopt`` with its exclusions, ``awq``/``gptq`` with
``modules_to_not_convert``, whatever the installed vLLM supports. Each linear layer's
method is then compared with what the checkpoint stores for the layers that reach it:
a layer is stored quantized when it holds a tensor an unquantized vLLM linear layer has
no parameter for (``weight_scale``, ``qweight``), or a weight of a quantized dtype.

A method vLLM cannot build here (no kernel for this CPU, a missing package) is "not
verified" with vLLM's reason, never a finding.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from prefixlint.introspect.builds.layout import BuildPlan, build_layout
from prefixlint.introspect.dryrun.quant import packed_entry, written_layers
from prefixlint.introspect.dryrun.quantfacts import (
    CastWrite,
    Cause,
    MethodMismatch,
    Site,
    Stored,
)
from prefixlint.introspect.dryrun.sites import Sites
from prefixlint.introspect.dryrun.streaming import Stream
from prefixlint.introspect.dryrun.weights import module_leaf
from prefixlint.introspect.finding import describe_error
from prefixlint.introspect.targets.checkpoint import Checkpoint

# safetensors dtype names -> torch attribute names (the format's table; a dtype this
# torch lacks is named in a note)
SAFETENSORS_DTYPES = {
    "BOOL": "bool",
    "U8": "uint8",
    "I8": "int8",
    "I16": "int16",
    "U16": "uint16",
    "I32": "int32",
    "U32": "uint32",
    "I64": "int64",
    "U64": "uint64",
    "F16": "float16",
    "BF16": "bfloat16",
    "F32": "float32",
    "F64": "float64",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
    "F8_E8M0": "float8_e8m0fnu",
    "F4": "float4_e2m1fn_x2",
}


def torch_layout(
    checkpoint: Checkpoint,
) -> tuple[dict[str, tuple[tuple[int, ...], torch.dtype]], list[str]]:
    """name -> (shape, torch dtype), and the dtypes this torch does not know."""
    out = {}
    unknown: list[str] = []
    for name, (shape, dtype) in checkpoint.tensors.items():
        value = getattr(torch, SAFETENSORS_DTYPES.get(dtype, ""), None)
        if not isinstance(value, torch.dtype):
            if dtype not in unknown:
                unknown.append(dtype)
            continue
        out[name] = (shape, value)
    return out, unknown


def dtype_kind(dtype: torch.dtype) -> str:
    """What a value of the dtype means: wide floats are one kind (a loader casts between
    them freely), integers another (packed or quantized codes), and each narrow float
    (fp8, fp4, e8m0) its own."""
    if dtype.is_floating_point and dtype.itemsize >= 2:
        return "float"
    if not dtype.is_floating_point and not dtype.is_complex:
        return "int"
    return str(dtype).removeprefix("torch.")


# -- the build --------------------------------------------------------------------------------


@dataclass
class QuantBuild:
    method: str = ""  # vLLM's name of the method (``ModelConfig.quantization``)
    build: Any = None  # build.Build, or None with ``reason``
    model_config: Any = None
    reason: str = ""
    error: BaseException | None = None  # the build's, when it failed
    described: str = ""  # the config's ignore lists, for the report

    @property
    def mixed_precision(self) -> bool:
        """vLLM refused a fused layer whose checkpoint parts it quantizes differently
        ("... must have the same precision"): the model fuses what the checkpoint keeps
        apart, a finding, not a gap of this machine."""
        text = str(self.error or "")
        return "same" in text and "precision" in text.lower()


def _dtype(checkpoint: Checkpoint) -> str:
    """The checkpoint's own activation dtype (``dtype``/``torch_dtype``), else bfloat16."""
    for key in ("dtype", "torch_dtype"):
        value = checkpoint.config.get(key)
        if isinstance(value, str) and value in ("bfloat16", "float16", "float32"):
            return value
    return "bfloat16"


def _supported_dtype(method: str, wanted: str) -> str:
    """``wanted`` if the method computes in it, else the first it does (vLLM refuses a
    quantized model in another activation dtype)."""
    try:
        from vllm.model_executor.layers.quantization import get_quantization_config

        supported = get_quantization_config(method).get_supported_act_dtypes()
    except Exception:
        return wanted
    names = [str(d).removeprefix("torch.") for d in supported]
    return wanted if wanted in names or not names else names[0]


def _config_folder(checkpoint: Checkpoint, hf_config: Any) -> str:
    """The build's config (the checkpoint's own config.json, or ``--config``) with the
    checkpoint's quantization config, naming the class under test (an out-of-tree copy
    is registered under its own name)."""
    try:
        data = json.loads(hf_config.to_json_string(use_diff=False))
    except Exception:  # a config transformers cannot write back: the checkpoint's own
        data = json.loads(json.dumps(checkpoint.config))
    data["quantization_config"] = checkpoint.quantization
    data["architectures"] = list(getattr(hf_config, "architectures", None) or [])
    folder = tempfile.mkdtemp(prefix="prefixlint-quantized-")
    Path(folder, "config.json").write_text(json.dumps(data), encoding="utf-8")
    return folder


def quantized_build(plan: BuildPlan, checkpoint: Checkpoint) -> QuantBuild:
    """The model built on meta (tp=1) under the checkpoint's quantization config, as
    vLLM makes it from the checkpoint's config.json; ``plan``: the model's own builds'."""
    from prefixlint.introspect.builds.modelconfig import load_model_config
    from prefixlint.introspect.builds.parallel import Layout

    out = QuantBuild(method=checkpoint.quant_method)
    folder = _config_folder(checkpoint, plan.model_config.hf_config)
    dtype = _dtype(checkpoint)
    try:
        quantized = load_model_config(folder, dtype=dtype)
        out.method = str(quantized.quantization or out.method)
        other = _supported_dtype(out.method, dtype)
        if other != dtype:
            quantized = load_model_config(folder, dtype=other)
    except Exception as e:
        out.reason = f"vLLM refuses the checkpoint's quantization config: {describe_error(e)}"
        return out
    out.model_config = quantized
    result = build_layout(plan.replanned(quantized), Layout())  # the same runner
    if result.error is not None:
        out.error = result.error
        why = describe_error(result.error)
        out.reason = f"vLLM cannot build `{out.method}` layers on this machine: {why}"
        return out
    out.build = result
    out.described = _ignore_lists(result.vllm_config.quant_config)
    return out


def _ignore_lists(quant_config: Any) -> str:
    """The quantization config's lists of layers it leaves unquantized, as vLLM read them."""
    for attr in ("ignored_layers", "ignore", "exclude_modules", "modules_to_not_convert"):
        value = getattr(quant_config, attr, None)
        if isinstance(value, (list, tuple, set)):
            shown = ", ".join(f"`{v}`" for v in list(value)[:4])
            more = f" and {len(value) - 4} more" if len(value) > 4 else ""
            return f"`{attr}` {shown or 'empty'}{more}"
    return ""


# -- parameters vLLM defaults -----------------------------------------------------------------


def kv_cache_method() -> type | None:
    """vLLM's method of the attention's KV-cache scales."""
    try:
        from vllm.model_executor.layers.quantization.kv_cache import BaseKVCacheMethod
    except ImportError:
        return None
    return BaseKVCacheMethod


def drop_defaulted(stream: Stream, model: nn.Module) -> list[str]:
    """Take out of the judged parameters those vLLM's quantization method fills itself
    when the checkpoint has none: the KV-cache scales of ``BaseKVCacheMethod`` ("if the
    q and k/v scales appear in the checkpoint, they are overwritten"). Kept where the
    checkpoint holds one of the same kind (then every layer's must be written)."""
    kv_cache = kv_cache_method()
    if kv_cache is None:
        return []
    owners = {
        path
        for path, module in model.named_modules()
        if isinstance(getattr(module, "quant_method", None), kv_cache)
    }
    targets = [
        (key, t)
        for key, t in stream.recorder.by_storage.items()
        if t.is_param and t.name.rpartition(".")[0] in owners
    ]
    written_kinds = {module_leaf(t.name) for _, t in targets if t.written}
    dropped = []
    for key, t in targets:
        if not t.written and module_leaf(t.name) not in written_kinds:
            del stream.recorder.by_storage[key]
            dropped.append(t.name)
    return dropped


# -- each layer's method ------------------------------------------------------------------------


def unquantized_leaves(model: nn.Module) -> set[str]:
    """The parameter names an unquantized vLLM linear layer holds (``weight``, ``bias``),
    read off the unquantized build."""
    from vllm.model_executor.layers.linear import LinearBase

    return {
        leaf
        for module in model.modules()
        if isinstance(module, LinearBase)
        for leaf, _ in module.named_parameters(recurse=False)
    } or {"weight", "bias"}


# what a quantization format stores beside a layer's values: scales (``weight_scale``,
# ``input_scale``, ``weight_scale_inv``, AWQ's ``scales``) and zero points (``qzeros``,
# ``weight_zero_point``); a tensor of another name is the layer's values, whatever its name
# (transformers 5 saves fused experts as ``experts.gate_up_proj``, no ``.weight``)
SCALE_MARKS = ("scale", "zero")


def stored_quantized(
    layout: dict[str, tuple[tuple[int, ...], torch.dtype]], layer: str, plain: set[str]
) -> tuple[bool, Stored]:
    """Whether the checkpoint stores ``layer`` quantized, and what it holds for it: read
    from the tensors' dtypes (fp8, fp4, integer codes) and from scale tensors beside them,
    never from a tensor's name alone."""
    start = f"{layer}."
    held = {n[len(start) :]: dtype for n, (_, dtype) in layout.items() if n.startswith(start)}
    scales = sorted(k for k in held if any(m in module_leaf(k) for m in SCALE_MARKS))
    narrow = sorted(k for k, d in held.items() if dtype_kind(d) != "float")
    extra = sorted(k for k in held if k not in plain and (k in scales or k in narrow))
    values = sorted(k for k in held if k not in extra)
    stored = Stored(tuple((_name(held[k]), k) for k in values), tuple(extra))
    return bool(scales or narrow), stored


@dataclass
class Judged:
    facts: list[MethodMismatch] = field(default_factory=list)
    paths: set[str] = field(default_factory=set)  # mismatched vLLM modules
    layers: set[str] = field(default_factory=set)  # their checkpoint layers


def _unquantized_methods() -> tuple[type, ...]:
    """vLLM's methods of layers that hold plain weights (linear, embedding, experts)."""
    out: list[type] = []
    for module, name in (
        ("vllm.model_executor.layers.linear", "UnquantizedLinearMethod"),
        ("vllm.model_executor.layers.vocab_parallel_embedding", "UnquantizedEmbeddingMethod"),
        ("vllm.model_executor.layers.fused_moe", "UnquantizedFusedMoEMethod"),
    ):
        try:
            out.append(getattr(__import__(module, fromlist=[name]), name))
        except (ImportError, AttributeError):
            continue
    return tuple(out)


def weight_sources(stream: Stream, model: nn.Module) -> dict[str, list[str]]:
    """Each module with a weight quantization method (linear layers, embeddings and heads,
    routed experts; not the attention's KV-cache method), or with weights and no method
    at all (torch's ``nn.Linear``: never quantized) -> the checkpoint layers whose tensors
    were written into its parameters, in the order of the regions they fill."""
    kv_cache = kv_cache_method()
    judged = {
        path
        for path, m in model.named_modules()
        if not (kv_cache and isinstance(getattr(m, "quant_method", None), kv_cache))
        and (
            getattr(m, "quant_method", None) is not None
            or next(m.parameters(recurse=False), None) is not None
        )
    }
    return written_layers(stream, judged)


def unplaced_layers(
    cls: type | None,
    stream: Stream,
    layout: dict[str, tuple[tuple[int, ...], torch.dtype]],
    model: nn.Module,
    placed: dict[str, list[str]],
) -> dict[str, list[str]]:
    """Checkpoint layers none of whose tensors reached the model (an unquantized layer
    has no parameter for ``qweight``), placed where the model's own declarations send
    them: ``hf_to_vllm_mapper``, then ``packed_modules_mapping`` for a fused layer. Only
    layers that land on a module with a weight quantization method count."""
    from prefixlint.introspect.dryrun.divergence import vllm_name as _mapped

    packed = getattr(cls, "packed_modules_mapping", None) or {}
    fused_of = {part: fused for fused, parts in packed.items() for part in parts}
    known = {layer for layers in placed.values() for layer in layers}
    kv_cache = kv_cache_method()
    out: dict[str, list[str]] = {}
    loose = {n.rpartition(".")[0] for n in layout if n not in stream.recorder.consumed}
    for layer in sorted(loose - known):
        mapped = _mapped(cls, layer)
        head, _, leaf = mapped.rpartition(".")
        path = f"{head}.{fused_of[leaf]}" if leaf in fused_of and head else mapped
        try:
            module = model.get_submodule(path)
        except AttributeError:
            continue
        method = getattr(module, "quant_method", None)
        if method is not None and not (kv_cache and isinstance(method, kv_cache)):
            out.setdefault(path, []).append(layer)
    return out


def method_facts(
    cls: type | None,
    stream: Stream,
    layout: dict[str, tuple[tuple[int, ...], torch.dtype]],
    sites: Sites,
    plain: set[str],
    quant: QuantBuild,
) -> Judged:
    """PFX702: each layer whose method (quantized or not) is not what the checkpoint
    stores for the layers that reach it. What follows from the mismatch (its scales never
    written, the checkpoint's scales never loaded, values cast) is part of its fact."""
    unquantized = _unquantized_methods()
    out = Judged()
    sources = weight_sources(stream, sites.model)
    for path, layers in unplaced_layers(cls, stream, layout, sites.model, sources).items():
        sources.setdefault(path, []).extend(layers)
    for path, layers in sorted(sources.items()):
        stored = {layer: stored_quantized(layout, layer, plain) for layer in layers}
        kinds = {q for q, _ in stored.values()}
        if len(kinds) != 1:
            continue  # a fused layer of quantized and unquantized parts: vLLM refuses that
        module = sites.model.get_submodule(path)
        method = getattr(module, "quant_method", None)
        quantized = method is not None and not isinstance(method, unquantized)
        (expected,) = kinds
        if quantized == expected:
            continue
        out.paths.add(path)
        out.layers.update(layers)
        site, cause = _cause(cls, path, module, layers, sites, expected, quant)
        unwritten = sorted(
            module_leaf(t.name)
            for t in stream.recorder.by_storage.values()
            if t.is_param and not t.written and t.name.rpartition(".")[0] == path
        )
        out.facts.append(
            MethodMismatch(
                site,
                path,
                matched_prefix(module, path)[0],
                tuple((layer, held) for layer, (_, held) in stored.items()),
                type(module.quant_method).__name__ if quantized else "",
                quant.method,
                tuple(unwritten),
                cause,
            )
        )
    return out


def _cause(
    cls: type | None,
    path: str,
    module: nn.Module,
    layers: list[str],
    sites: Sites,
    stored: bool,
    quant: QuantBuild,
) -> tuple[Site, Cause]:
    """The model's line responsible, and why: the module built without the quantization
    config, a kind of layer the method never quantizes, a prefix that is not its path, a
    fused layer's ``packed_modules_mapping`` entry (missing or wrong), a renamed layer."""
    prefix, path = matched_prefix(module, path)
    leaf = module_leaf(path)
    leaves = list(dict.fromkeys(module_leaf(n) for n in layers))
    packed = getattr(cls, "packed_modules_mapping", None) or {}
    kind = type(module)
    if stored and getattr(module, "quant_method", None) is None:
        package = kind.__module__.partition(".")[0]
        return sites.module(path), Cause("built-as", name=kind.__name__, package=package)
    if stored and getattr(module, "quant_config", None) is None and _takes_quant_config(module):
        return sites.module(path), Cause("unthreaded")
    if stored and _no_method_for(module, prefix, quant):
        return sites.module(path), Cause("no-method", name=kind.__name__)
    if prefix != path:
        return sites.prefix_root(path), Cause("prefix")
    if len(layers) > 1 and leaves != [leaf] and getattr(module, "output_sizes", None):
        entry = packed_entry(packed, leaf, leaves)
        if entry.state != "listed":
            return sites.packed_mapping(), Cause("packed", entry)
    if layers != [path] and len(layers) == 1:
        return sites.module(path), Cause("renamed", name=layers[0], to=path)
    if not stored and quant.described:
        return sites.module(path), Cause("unmatched", lists=quant.described)
    return sites.module(path), Cause("skipped")


def matched_prefix(module: nn.Module, path: str) -> tuple[str, str]:
    """The prefix vLLM's quantization config matches for ``module``, and the path of the
    module that prefix names. Routed experts are matched by their fused MoE layer's name
    (``RoutedExperts(layer_name, ...)`` under ``FusedMoE``: ``mlp.experts``, not
    ``mlp.experts.routed_experts``), which ``is_layer_skipped`` looks up in every
    ``ignored_layers`` entry that names ``experts``."""
    prefix = getattr(module, "prefix", path)
    name = vars(module).get("layer_name")
    owner = path.rpartition(".")[0]
    if isinstance(name, str) and name != prefix and name == owner:
        return name, owner
    return prefix, path


def _takes_quant_config(module: nn.Module) -> bool:
    """The layer records the config it was given (vLLM's linear layers do)."""
    return "quant_config" in vars(module)


def _no_method_for(module: nn.Module, prefix: str, quant: QuantBuild) -> bool:
    """vLLM's config has no method at all for this kind of layer (not a skipped prefix)."""
    config = getattr(quant.build.vllm_config, "quant_config", None) if quant.build else None
    if config is None:
        return False
    try:
        return config.get_quant_method(module, prefix=prefix) is None
    except Exception:
        return False


def dtype_facts(
    stream: Stream,
    layout: dict[str, tuple[tuple[int, ...], torch.dtype]],
    sites: Sites,
    skip: set[str],
) -> list[CastWrite]:
    """PFX701: a checkpoint tensor of one kind of dtype written into a parameter of
    another (fp8 values cast into a bfloat16 weight): the loaded numbers are wrong. A
    write that combines the tensor with another of its layer (a weight and its scale) is
    a dequantization, which is fine."""
    out = []
    for t in stream.recorder.by_storage.values():
        path = t.name.rpartition(".")[0]
        if not t.is_param or path in skip:
            continue
        tag = _cast_source(t, layout)
        if tag is None:
            continue
        dtypes = (_name(layout[tag][1]), _name(t.tensor.dtype))
        out.append(CastWrite(sites.module(path), tag, dtypes[0], t.name, dtypes[1]))
    return out


def _cast_source(target: Any, layout: dict[str, tuple[tuple[int, ...], torch.dtype]]) -> str | None:
    """The first checkpoint tensor written alone into ``target`` with a dtype of another
    kind than the parameter's."""
    kind = dtype_kind(target.tensor.dtype)
    for _, _, tags in target.writes:
        for tag in sorted(tags):
            if tag not in layout or dtype_kind(layout[tag][1]) == kind:
                continue
            layer = tag.rpartition(".")[0]
            if not any(o != tag and o.rpartition(".")[0] == layer for o in tags):
                return tag
    return None


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


# -- per-shard scales ---------------------------------------------------------------------------


def fold_shard_scales(stream: Stream, model: nn.Module) -> dict[str, list[str]]:
    """A fused layer's per-tensor scales hold one slot per shard (``weight_scale`` of a
    ``qkv_proj``: q, k, v). Where the weight's shard is never written, its scales' slot
    is not either, by the same mapping entry: those scales are taken out of the judged
    parameters and named in the shard's finding (module path -> their names)."""
    from prefixlint.introspect.dryrun.weights import _shards

    by_module: dict[str, list[Any]] = {}
    for t in stream.recorder.by_storage.values():
        if t.is_param:
            by_module.setdefault(t.name.rpartition(".")[0], []).append(t)
    folded: dict[str, list[str]] = {}
    for path, targets in by_module.items():
        weight = next((t for t in targets if module_leaf(t.name) == "weight"), None)
        covered = stream.recorder.covered(weight) if weight is not None else None
        if weight is None or covered is None:
            continue
        try:
            module = model.get_submodule(path)
        except AttributeError:
            continue
        shards = _shards(module, weight.tensor)
        if not shards:
            continue
        dim = weight.tensor.output_dim
        missing = {
            i for i, (_, lo, hi) in enumerate(shards) if not covered.narrow(dim, lo, hi - lo).all()
        }
        if not missing:
            continue
        for t in targets:
            slots = stream.recorder.covered(t) if t is not weight else None
            if slots is None or tuple(slots.shape) != (len(shards),) or slots.all():
                continue
            if {i for i in range(len(shards)) if not slots[i]} <= missing:
                del stream.recorder.by_storage[_key_of(stream, t)]
                folded.setdefault(path, []).append(module_leaf(t.name))
    return folded


def _key_of(stream: Stream, target: Any) -> int:
    return next(k for k, t in stream.recorder.by_storage.items() if t is target)


def name_folded_scales(facts: list[Any], folded: dict[str, list[str]]) -> None:
    """Say, in the fact of the weight's shard, which scales miss the same slot."""
    from prefixlint.introspect.dryrun.weightfacts import UnwrittenShard

    for path, leaves in folded.items():
        for f in facts:
            if isinstance(f, UnwrittenShard) and f.param == f"{path}.weight" and f.shard:
                f.slots = sorted(leaves)
                break
