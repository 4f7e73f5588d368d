"""PFX701: what the stream left undone, as typed facts (``weightfacts.py``): checkpoint
tensors never loaded, parameters (or shards of stacked parameters) never written, a
``load_weights`` that raises on a name. The PFX701 unit writes their words. Names the
loader refuses that the model's own tables declare (``tables.declared_parts``) are its
error, never "another format"."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from prefixlint.introspect.dryrun.divergence import Divergence, explained_drop
from prefixlint.introspect.dryrun.layouts import normal
from prefixlint.introspect.dryrun.sites import Sites
from prefixlint.introspect.dryrun.streaming import Stream
from prefixlint.introspect.dryrun.tables import declared_parts, fused_kind
from prefixlint.introspect.dryrun.weightfacts import (
    LoaderRaises,
    Loading,
    NeverLoaded,
    RefusedDeclared,
    Unwritten,
    UnwrittenElements,
    UnwrittenShard,
)
from prefixlint.introspect.finding import describe_error


def _shards(module: nn.Module, param: torch.Tensor) -> list[tuple[str, int, int]] | None:
    """(label, start, end) along the output dim for the shards of a stacked parameter."""
    sizes = getattr(module, "output_sizes", None)
    dim = getattr(param, "output_dim", None)
    if not isinstance(sizes, (list, tuple)) or len(sizes) < 2 or dim is None:
        return None
    if param.dim() <= dim or sum(sizes) != param.shape[dim]:
        return None
    qkv = "QKV" in type(module).__name__ and len(sizes) == 3
    labels = ["q", "k", "v"] if qkv else [str(i) for i in range(len(sizes))]
    out, start = [], 0
    for label, size in zip(labels, sizes, strict=True):
        out.append((label, start, start + size))
        start += size
    return out


def shard_facts(stream: Stream, target: Any, sites: Sites) -> list[Loading]:
    """What of a written parameter stays unwritten: its shards no write covers (with the
    shards more than one checkpoint layer wrote instead), else its elements."""
    path = target.name.rpartition(".")[0]
    try:
        module = sites.model.get_submodule(path)
    except AttributeError:
        return []
    covered = stream.recorder.covered(target)
    rows = getattr(module, "org_vocab_size", None)
    if covered is not None and isinstance(rows, int) and 0 < rows < covered.shape[0]:
        covered = covered[:rows]  # vocabulary padding rows are never in a checkpoint
    shards = _shards(module, target.tensor) if covered is not None else None
    if covered is None or covered.all():
        return []
    if shards is None:
        missing = int((~covered).sum())
        return [UnwrittenElements(target.name, sites.module(path), missing, covered.numel())]
    dim = target.tensor.output_dim
    row = target.tensor.stride(dim)
    base = target.tensor.storage_offset()
    writers: dict[str, set[str]] = {}
    for label, lo, hi in shards:
        flat = (base + lo * row, base + hi * row)
        writers[label] = {
            t for wlo, whi, tags in target.writes if wlo < flat[1] and whi > flat[0] for t in tags
        }
    out: list[Loading] = []
    for label, lo, hi in shards:
        if covered.narrow(dim, lo, hi - lo).all():
            continue
        site = sites.module(path)
        misrouted = []
        for other, names in writers.items():
            if len(names) < 2 or dim != 0:
                continue
            misrouted.append((other, sorted(names)))
            site = _wrong_entry(sites, path, other, names) or site
        out.append(UnwrittenShard(target.name, label, site, misrouted))
    return out


def _owner(sites: Sites, path: str, label: str) -> str | None:
    """The checkpoint layer that should fill shard ``label`` of the stacked module."""
    packed = getattr(sites.cls, "packed_modules_mapping", None) or {}
    parts = packed.get(module_leaf(path)) if isinstance(packed, dict) else None
    if label.isdigit():
        return parts[int(label)] if parts and int(label) < len(parts) else None
    return next((p for p in parts or () if p.startswith(f"{label}_")), f"{label}_proj")


def _wrong_entry(sites: Sites, path: str, label: str, names: set[str]) -> tuple[str, int] | None:
    """The mapping line that sends a checkpoint layer into shard ``label`` it does not own."""
    leaves = sorted({n.rsplit(".", 2)[-2] for n in names if n.count(".") >= 1})
    owner = _owner(sites, path, label)
    culprits = [leaf for leaf in leaves if leaf != owner] or leaves
    for leaf in culprits:
        found = sites.mapping_line(leaf, module_leaf(path), label)
        if found:
            return found
    return None


def module_leaf(path: str) -> str:
    return path.rsplit(".", 1)[-1]


def coverage_facts(
    stream: Stream, reference: dict[str, Any], sites: Sites, divergence: Divergence | None = None
) -> list[Loading]:
    """What the stream left undone, as PFX701 facts. ``divergence`` (synthesised configs
    only): the parts not judged, and it collects the tensors vLLM has no place for in a
    module it otherwise fills."""

    def explained(name: str) -> bool:
        why = divergence and explained_drop(sites.cls, sites.model, name, stream)
        if why and divergence is not None:
            divergence.add(why)
        return bool(why)

    out, declared = _raise_facts(stream, sites, explained)
    if not stream.complete:
        return out
    # what stays random in the fused modules declared names fill is part of their fact
    folded = {normal(p) for _, _, _, p in declared.values()}
    raised = {normal(n) for n, _ in stream.raised}
    targets = [
        t
        for t in stream.recorder.by_storage.values()
        if t.is_param and not (divergence and divergence.covers(t.name))
    ]
    unwritten = {t.name: t for t in targets if not t.written}
    # With every parameter written, a dropped tensor has no place it was meant for in the
    # built model: an unused head or statistic, most likely on purpose (the unit's policy).
    nothing_random = not unwritten and not _partial(stream, sites)
    for name in sorted(reference):
        if name in stream.recorder.consumed or normal(name) in raised:
            continue
        if name not in unwritten and explained(name):
            continue
        if nothing_random and _declared_drop(sites.cls, name):
            continue
        skips = unwritten.pop(name, None) is not None  # its parameter stays random
        out.append(NeverLoaded(name, sites.loader(name), skips, nothing_random and not skips))
    for name in sorted(unwritten):
        path = name.rpartition(".")[0]
        if normal(path) in folded:
            continue
        why = divergence and _optional_bias(stream, reference, name)
        if why and divergence is not None:
            divergence.add(why)
            continue
        # vLLM's embedding adapter keeps the head; its pooler never computes logits
        head = sites.embedding and name.startswith("lm_head.")
        out.append(Unwritten(name, sites.module(path), embedding_head=head))
    for t in targets:
        if t.written and normal(t.name.rpartition(".")[0]) not in folded:
            out.extend(shard_facts(stream, t, sites))
    return out


def _raise_facts(
    stream: Stream, sites: Sites, explained: Callable[[str], bool]
) -> tuple[list[Loading], dict[str, tuple[str, str, str, str]]]:
    """The names ``load_weights`` raised on, and those of them the model's own tables
    declare: in a complete stream, one fact for those (never explained away by a config
    read differently), one per name for the rest."""
    declared = declared_names([n for n, _ in stream.raised], sites) if stream.complete else {}
    out: list[Loading] = [
        _raised(name, error, sites)
        for name, error in stream.raised
        if name not in declared and not (stream.complete and explained(name))
    ]
    refused = [(n, e) for n, e in stream.raised if n in declared]
    return out + refused_facts(refused, declared, sites), declared


def _declared_drop(cls: type | None, name: str) -> bool:
    """The class's own ``hf_to_vllm_mapper`` maps the name to None: the model says it does
    not load it (Qwen2.5-Omni's thinker maps ``talker.`` and ``token2wav.`` to None). Only
    asked when every parameter is written; with one left random it is still reported."""
    fn = getattr(getattr(cls, "hf_to_vllm_mapper", None), "_map_name", None)
    if callable(fn):
        with contextlib.suppress(Exception):
            return fn(name) is None
    return False


def _optional_bias(stream: Stream, reference: dict[str, Any], name: str) -> str | None:
    """An unwritten ``bias`` of a module whose weight was written from checkpoint layers
    none of which has a bias in the reference: vLLM builds the bias, transformers does
    not, for this config (Phi-3.5-MoE's biases: vLLM always, transformers on
    ``attention_bias``)."""
    path, _, leaf = name.rpartition(".")
    if leaf != "bias":
        return None
    weight = next(
        (t for t in stream.recorder.by_storage.values() if t.name == f"{path}.weight"), None
    )
    if weight is None or not weight.sources:
        return None
    layers = {tag.rpartition(".")[0] for tag in weight.sources}
    if any(f"{layer}.bias" in reference for layer in layers):
        return None
    return f"vLLM builds `{path}` with a bias, transformers without"


def _partial(stream: Stream, sites: Sites) -> bool:
    return any(
        shard_facts(stream, t, sites)
        for t in stream.recorder.by_storage.values()
        if t.is_param and t.written
    )


def _raised(name: str, error: BaseException, sites: Sites) -> LoaderRaises:
    leaf = name.rsplit(".", 2)[-2] if name.count(".") >= 1 else name
    site = sites.frame(error) or sites.loader(name)
    entry = sites.mapping_line(leaf) if isinstance(error, ValueError) else None
    if entry is not None and "shard" in str(error).lower():
        site = entry
    return LoaderRaises(name, describe_error(error), site)


def declared_names(names: list[str], sites: Sites) -> dict[str, tuple[str, str, str, str]]:
    """The checkpoint names among ``names`` that the model's own tables say its checkpoint
    holds: a part (``gate_proj``) that a table stacks into a fused module built beside it
    (``gate_up_proj``). Name -> (part, fused leaf, the table, the fused module's path)."""
    parts = declared_parts(sites.model, sites.cls) if names else {}
    if not parts:
        return {}
    built = [p for p, m in sites.model.named_modules() if fused_kind(m)]
    out = {}
    for name in names:
        bits = name.split(".")
        leaf, owner = (bits[-2], ".".join(bits[:-2])) if len(bits) >= 2 else ("", "")
        for fused, tables in parts.get(leaf, {}).items():
            want = f"{owner}.{fused}" if owner else fused
            # the model's paths may add or drop a wrapper's prefix (``language_model.``)
            path = next(
                (p for p in built if p == want or p.endswith(f".{want}") or want.endswith(f".{p}")),
                None,
            )
            if path is not None:
                out[name] = (leaf, fused, " and ".join(tables), path)
                break
    return out


def refused_facts(
    refused: list[tuple[str, BaseException]],
    declared: dict[str, tuple[str, str, str, str]],
    sites: Sites,
) -> list[Loading]:
    """One fact per line of the loader that raised: the names it refused are the ones
    its own tables say the checkpoint holds, so a real checkpoint does not load either."""
    groups: dict[tuple[str, int], list[tuple[str, BaseException]]] = {}
    for name, error in refused:
        groups.setdefault(sites.frame(error) or sites.loader(name), []).append((name, error))
    out: list[Loading] = []
    for site, items in groups.items():
        parts: dict[str, tuple[str, str, str, tuple[str, int] | None]] = {}
        for name, _ in items:  # one per checkpoint part, however many tensors
            part, fused, table, _ = declared[name]
            if part not in parts:
                parts[part] = (part, fused, table, sites.mapping_line(part, fused))
        fused_paths = sorted({declared[n][3] for n, _ in items})
        said = describe_error(items[0][1])
        out.append(RefusedDeclared(site, list(parts.values()), items[0][0], said, fused_paths))
    return out


def refused_modules(stream: Stream, sites: Sites) -> set[str]:
    """The fused modules (layer numbers left out) a complete stream refused names for that
    the model's own tables declare: what reached them is not what the checkpoint holds,
    so the quantization dry-run does not judge them (their PFX701 says why)."""
    raised = [n for n, _ in stream.raised]
    declared = declared_names(raised, sites) if stream.complete else {}
    return {normal(path) for *_, path in declared.values()}


def loader_refusals(
    facts: list[Loading],
    stream: Stream,
    layout: dict[str, Any],
    sites: Sites,
    restream: Callable[[dict[str, Any]], Stream],
) -> tuple[list[Loading], bool]:
    """The facts of a stream that raised on too many kinds of names. When every name it
    raised on is one the model's own tables declare, and the layout without every
    declared name loads whole (``restream``), the loader is broken for exactly those
    names: ``RefusedDeclared`` in place of its raises (True). Otherwise the layout may be
    another format than the loader's: ``layout_refused`` (False)."""
    raised = [n for n, _ in stream.raised]
    declared = declared_names(raised, sites)
    if not raised or len(declared) < len(raised):
        return layout_refused(facts), False
    everything = declared_names(sorted(layout), sites)
    rest = restream({k: v for k, v in layout.items() if k not in everything})
    if not rest.complete or rest.raised or rest.limit:
        return layout_refused(facts), False
    kept = [f for f in facts if not isinstance(f, LoaderRaises)]
    return kept + refused_facts(stream.raised, declared, sites), True


def layout_refused(facts: list[Loading]) -> list[Loading]:
    """A loader that raised on more kinds of names than the stream retries refuses the
    layout as a whole: far more often a checkpoint format other than the one prefixlint
    derived (remote code's own names, a Mistral-format loader) than a loader broken for
    every kind of tensor, which any real checkpoint would expose at once. On vLLM's
    registry all six such loaders read another format (docs/precision.md): its raises
    are marked ``refused_layout`` (the unit says "not verified", never the model's
    defect)."""
    for f in facts:
        if isinstance(f, LoaderRaises):
            f.refused_layout = True
    return facts
