"""PFX701 on quantized synthetic layouts: what an FP8 checkpoint of the config holds beyond
the unquantized one, streamed through the model's own ``load_weights``.

The reference layout has no scales, so a loader that drops or mis-maps them passes it.
Here the model is built again under vLLM's own ``Fp8Config`` (per-tensor, static
activation scales) and the checkpoint names are derived from what vLLM's quantization
methods create on that build, never from a list per model: each parameter a quantized
method adds to a layer (``weight_scale``, ``input_scale``; ``w13_weight_scale`` of routed
experts) is named after the checkpoint layers whose weights the unquantized stream wrote
into the layer's matching weight (``experts.3.w1`` -> ``experts.3.w1.weight_scale``), and
the KV-cache scales of each attention layer vLLM's ``BaseKVCacheMethod`` creates are named
as real FP8 checkpoints name them: ``self_attn.k_scale`` (llm-compressor) or
``self_attn.k_proj.k_scale`` (ModelOpt, AutoFP8). A loader need only accept one KV form.
Only the added names are judged: a scale the loader drops or refuses, or a scale
parameter none reaches. A layout that cannot be made is a note with the reason.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from prefixlint.introspect.builds.layout import build_layout
from prefixlint.introspect.dryrun.layouts import normal
from prefixlint.introspect.dryrun.quant import OUT_OF_TIME, past
from prefixlint.introspect.dryrun.realquant import kv_cache_method, weight_sources
from prefixlint.introspect.dryrun.sites import Sites
from prefixlint.introspect.dryrun.streaming import Stream
from prefixlint.introspect.dryrun.weightfacts import Loading, ScalesDropped
from prefixlint.introspect.dryrun.weights import coverage_facts
from prefixlint.introspect.finding import describe_error

Layout = dict[str, tuple[tuple[int, ...], torch.dtype]]
# the KV-cache scales a checkpoint stores (vLLM fills ``q_scale``/``prob_scale`` itself)
KV_SCALES = ("k_scale", "v_scale")
# attention without a KV cache: no FP8 tool stores KV-cache scales for it
NO_KV_CACHE = ("encoder", "encoder_only")
KV_PROJECTIONS = ("k_proj", "v_proj", "qkv_proj")  # compressed-tensors' attention test
SCALE = ((), torch.float32)  # a per-tensor scale, as FP8 checkpoints store it
STOPPED = (
    "`load_weights` kept raising on the scales, so the load stopped before the scales "
    "after those it raised on: whether it drops them is not judged"
)


@dataclass
class Synthesised:
    """The quantized layout's own names (checkpoint name -> the parameter it is for) and
    what could not be named, with why."""

    tensors: dict[str, str] = field(default_factory=dict)
    fp8: set[str] = field(default_factory=set)  # weights stored as float8_e4m3fn
    kv: list[dict[str, str]] = field(default_factory=list)  # one per KV-scale naming
    gaps: list[str] = field(default_factory=list)
    # KV-cache scales named at a block with no key/value projection (GPTBigCode's fused
    # `c_attn`): compressed-tensors names KV scales only at attention modules holding
    # `k_proj`, `v_proj` or `qkv_proj` (its `is_attention_module`), ModelOpt at the
    # projections, so real checkpoints may not hold these names: their drop is contested
    unprojected: set[str] = field(default_factory=set)


def check(
    base: Any,
    model_config: Any,
    reference: tuple[Layout, Stream],
    sites: Sites,
    through: Callable[[Any, Layout], Stream],
    deadline: float | None = None,
) -> tuple[list[Loading], str]:
    """PFX701 facts on the quantized layouts, and why (part of) the check did not run.
    ``reference``: the unquantized layout streamed and its stream (complete);
    ``through``: streams a layout through a build's model as the dry-run does."""
    if past(deadline, need=base.seconds):
        return [], OUT_OF_TIME
    from vllm.model_executor.layers.quantization.fp8 import Fp8Config

    try:
        config = Fp8Config(activation_scheme="static")
    except Exception as e:  # another vLLM's signature
        return [], f"vLLM's `Fp8Config` cannot be made here: {describe_error(e)}"
    build = build_layout(base.plan, base.layout, quant_config=config)
    if build.error is not None:
        return [], f"the model does not build under `Fp8Config` here: {describe_error(build.error)}"
    layout, s = reference
    known = {normal(n) for n, _ in s.raised}  # the unquantized stream's to judge
    made = synthesise(base.model, build.model, s)
    if not made.tensors and not made.kv:
        return [], "no layer got a quantized method under `Fp8Config`"
    qsites = Sites(sites.cls, build.model, build.recorder)
    qsites.embedding = sites.embedding
    tried = []
    cut_short = False
    for kv in made.kv or [{}]:
        added = {**made.tensors, **kv}
        quantized = {
            k: ((v[0], torch.float8_e4m3fn) if k in made.fp8 else v) for k, v in layout.items()
        }
        quantized.update(dict.fromkeys(added, SCALE))
        qs = through(build, quantized)
        if qs.limit:
            return [], f"a weight loader needs real data on meta tensors ({qs.limit})"
        cut_short |= not qs.complete
        found = judge(qs, added, qsites, kv, known, made.unprojected)
        tried.append(found)
        if not found:
            break
    found = min(tried, key=len)
    gaps = made.gaps + ([STOPPED] if cut_short else [])
    more = f"; and {len(gaps) - 3} more" if len(gaps) > 3 else ""
    return found, "; ".join(gaps[:3]) + more


def synthesise(plain: nn.Module, quantized: nn.Module, s: Stream) -> Synthesised:
    """The names an FP8 checkpoint adds, from the parameters vLLM's methods add to each
    layer of ``quantized`` that ``plain`` lacks, placed by what ``s`` (the unquantized
    stream into ``plain``) wrote where."""
    out = Synthesised()
    by_param: dict[str, set[str]] = {}
    for t in s.recorder.by_storage.values():
        if t.is_param and t.written:
            by_param.setdefault(t.name, set()).update(t.sources)
    for path in weight_sources(s, plain):
        _layer_scales(out, path, plain, quantized, by_param)
    out.kv = _kv_namings(quantized, weight_sources(s, plain), out)
    return out


def _layer_scales(
    out: Synthesised,
    path: str,
    plain: nn.Module,
    quantized: nn.Module,
    by_param: dict[str, set[str]],
) -> None:
    """The scales of one layer: each added parameter ``<p>weight_scale`` belongs to the
    weight ``<p>weight``, and each checkpoint layer written into that weight stores one
    per-tensor scale of the leaf (``weight_scale``)."""
    try:
        before = dict(plain.get_submodule(path).named_parameters(recurse=False))
        after = dict(quantized.get_submodule(path).named_parameters(recurse=False))
    except AttributeError:
        return
    weights = sorted((n for n in before if n.endswith("weight")), key=len, reverse=True)
    for name in sorted(set(after) - set(before)):
        owner = next((w for w in weights if name.startswith(w.removesuffix("weight"))), None)
        tags = by_param.get(f"{path}.{owner}", set()) if owner else set()
        layers = sorted({t.rpartition(".")[0] for t in tags})
        if not layers:
            continue
        # one scale per checkpoint layer, or per shard of a layer the checkpoint fuses too
        shards = len(getattr(quantized.get_submodule(path), "output_sizes", None) or [1])
        if after[name].numel() > len(layers) * shards:  # per channel, block or expert
            gap = _not_per_tensor(f"{normal(path)}.{name}", after[name], after[owner], layers)
            if gap not in out.gaps:
                out.gaps.append(gap)
            continue
        leaf = name.removeprefix(owner.removesuffix("weight"))
        out.tensors.update({f"{layer}.{leaf}": f"{path}.{name}" for layer in layers})
        if after[owner].dtype == torch.float8_e4m3fn:  # the checkpoint's weight is fp8 too
            out.fp8.update(t for t in tags if t.endswith(".weight"))


def _not_per_tensor(name: str, scale: torch.Tensor, weight: torch.Tensor, layers: list) -> str:
    """Why a scale gets no checkpoint name: one per expert where the checkpoint stores the
    experts stacked in fewer tensors (GraniteMoe's ``input_linear``), else per channel."""
    experts = weight.dim() == 3 and scale.dim() >= 1 and scale.shape[0] == weight.shape[0]
    if experts and len(layers) < weight.shape[0]:
        return (
            f"`{name}` has one scale per expert, but the checkpoint stacks the experts in "
            f"{len(layers)} tensor(s): no per-expert name to give it"
        )
    return f"`{name}` is not a per-tensor scale"


def _kv_namings(
    quantized: nn.Module, sources: dict[str, list[str]], out: Synthesised
) -> list[dict[str, str]]:
    """The KV-cache scales of each attention layer with vLLM's KV-cache method, in each
    naming real checkpoints use: at the checkpoint's attention block (``self_attn.k_scale``)
    and at its key and value projections (``self_attn.k_proj.k_scale``) where it has them.
    The block's checkpoint name is the parent of the layers loaded into its siblings."""
    kv_cache = kv_cache_method()
    if kv_cache is None:
        return []
    block: dict[str, str] = {}
    projections: dict[str, str] = {}
    every_block_projects = True
    for path, m in quantized.named_modules():
        if not isinstance(getattr(m, "quant_method", None), kv_cache):
            continue
        if getattr(m, "attn_type", "decoder") in NO_KV_CACHE:
            continue  # an encoder's attention caches nothing (NomicBert, EmbeddingGemma2)
        parent = path.rpartition(".")[0]
        held = [
            layer
            for p, layers in sources.items()
            if p.startswith(f"{parent}.") and p.count(".") == path.count(".")
            for layer in layers
        ]
        parents = Counter(layer.rpartition(".")[0] for layer in held)
        if not parents:
            gap = f"no checkpoint layer names the attention block of `{normal(path)}`"
            if gap not in out.gaps:
                out.gaps.append(gap)
            continue
        ckpt = parents.most_common(1)[0][0]
        projected = {f"{ckpt}.{p}" for p in KV_PROJECTIONS} & set(held)
        for which in KV_SCALES:
            block[f"{ckpt}.{which}"] = f"{path}.{which}"
            projections[f"{ckpt}.{which[0]}_proj.{which}"] = f"{path}.{which}"
            if not projected:
                out.unprojected.add(f"{ckpt}.{which}")
        every_block_projects &= {f"{ckpt}.k_proj", f"{ckpt}.v_proj"} <= set(held)
    if not every_block_projects:
        projections = {}  # a block without key and value projections: that naming is out
    return [n for n in (block, projections) if n]


def judge(
    s: Stream,
    added: dict[str, str],
    sites: Sites,
    kv: dict[str, str],
    known: frozenset[str] | set[str] = frozenset(),
    unprojected: frozenset[str] | set[str] = frozenset(),
) -> list[Loading]:
    """PFX701 on the added names only: those the loader refuses, those it drops (one
    fact per loader line), and scale parameters none reaches although each of their
    tensors was loaded elsewhere (the unquantized stream judged the rest). ``known``: the
    kinds of names the unquantized stream raised on; any other raise is the scales'
    doing, even where the loader's frames still held an unquantized tensor. A stream the
    raises cut short judges only its raises: a scale never fed is not a scale dropped."""
    raised = {normal(n) for n, _ in s.raised}
    s.raised = [(n, e) for n, e in s.raised if n in added or normal(n) not in known]
    contested = _contested_raises(s, sites, unprojected)
    if not s.complete:
        return _with_layout(_one_per_line(coverage_facts(s, {}, sites) + contested), kv)
    lost = [n for n in added if n not in s.recorder.consumed]
    dropped = [n for n in lost if normal(n) not in raised]
    # judged: scale parameters never written, but for a tensor's own finding; a shard of
    # one written in part shares the weight's mapping entry, which the unquantized stream
    # judged
    judged = set(added.values()) - {added[n] for n in lost}
    for key, t in list(s.recorder.by_storage.items()):
        if not (t.is_param and t.name in judged and not t.written):
            del s.recorder.by_storage[key]
    s.complete = True  # what raised on other names is the unquantized stream's to judge
    found = coverage_facts(s, {}, sites)
    by_line: dict[tuple[str, int], list[str]] = {}
    for name in dropped:
        by_line.setdefault(sites.loader(name), []).append(name)
    for site, names in by_line.items():
        found.append(_dropped(names, added, unprojected, site))
    return _with_layout(_one_per_line(found + contested), kv)


def _contested_raises(
    s: Stream, sites: Sites, unprojected: frozenset[str] | set[str]
) -> list[Loading]:
    """The raises on KV-cache scales real checkpoints may not hold (``unprojected``), taken
    out of ``s.raised``: ``contested`` (the unit's warning), one per name as any raise."""
    mine = [(n, e) for n, e in s.raised if n in unprojected]
    if not mine:
        return []
    s.raised = [(n, e) for n, e in s.raised if n not in unprojected]
    found = coverage_facts(Stream(s.recorder, raised=mine), {}, sites)  # raises only
    for f in found:
        f.contested = True
    return found


def _with_layout(found: list[Loading], kv: dict[str, str]) -> list[Loading]:
    """The facts were seen on an FP8 layout, with this KV-cache scale naming."""
    for f in found:
        f.fp8_kv = next(iter(kv)) if kv else ""
    return found


def _one_per_line(found: list[Loading]) -> list[Loading]:
    """One fact per line: the scales of one layer (``k_scale``, ``v_scale``) meet the
    same line of the loader, which one fix mends."""
    first: dict[tuple[str, int], Loading] = {}
    for f in found:
        site = f.site  # type: ignore[attr-defined]
        if site in first:
            first[site].more_scales += 1
        else:
            first[site] = f
    return list(first.values())


def _dropped(
    names: list[str],
    added: dict[str, str],
    unprojected: frozenset[str] | set[str],
    site: tuple[str, int],
) -> ScalesDropped:
    """The drop of one loader line; ``contested`` where every name dropped is a KV-cache
    scale of a block real FP8 tools may not name (``Synthesised.unprojected``)."""
    kinds = sorted({normal(n) for n in names})
    params = sorted({normal(added[n]) for n in names})
    contested = set(names) <= set(unprojected)
    return ScalesDropped(names, kinds, params, site, contested=contested)
