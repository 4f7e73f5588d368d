"""PFX701/PFX702 against a real checkpoint (``--checkpoint``), without loading a weight.

The synthetic dry-run (``dryrun/``) takes the checkpoint layout from the transformers
reference class and judges quantization under a made-up ``Fp8Config``. Here the layout is
the checkpoint's own (``checkpoint.py``: names, shapes and dtypes from the safetensors
headers), streamed as tagged meta tensors through the model's ``load_weights``
(``dryrun.streaming.stream``). A checkpoint with a ``quantization_config`` is streamed through the
model built under that very config (``realquant.py``), and each linear layer's method is
judged against what the checkpoint stores for it; an unquantized checkpoint is streamed
through the unquantized build, and quantization is then judged as the synthetic dry-run
does. Reported: checkpoint tensors never consumed, parameters never written, shapes that
do not fit, values cast between dtypes of other kinds, layers whose method disagrees with
the checkpoint. What did not run is said, with the reason.
"""

from __future__ import annotations

import re
from typing import Any

from prefixlint.introspect.dryrun import (
    DryRun,
    _as_served,
    _base_build,
    _note,
    _served_as_embedding,
    _stream_context,
    realquant,
    unbuilt,
)
from prefixlint.introspect.dryrun.quant import OUT_OF_TIME, layer_sources, quant_facts
from prefixlint.introspect.dryrun.quant import past as _past
from prefixlint.introspect.dryrun.quantfacts import FusedPrecisionRefused, PartlyLoaded
from prefixlint.introspect.dryrun.sites import Sites
from prefixlint.introspect.dryrun.streaming import Stream, stream
from prefixlint.introspect.dryrun.weightfacts import (
    Loading,
    NeverLoaded,
    UnwrittenElements,
    UnwrittenShard,
)
from prefixlint.introspect.dryrun.weights import coverage_facts
from prefixlint.introspect.finding import describe_error
from prefixlint.introspect.targets.checkpoint import CheckpointError, read


def run(
    cls: type | None,
    model_config: Any,
    builds: list[Any],
    source: str,
    enabled: bool = True,
    deadline: float | None = None,
) -> DryRun:
    """The dry-run of ``source`` (a local checkpoint folder, or a manifest folder the
    command line wrote for a hub id) for one target; the tp=1 build is reused."""
    if not enabled:
        return DryRun("off")
    base = _base_build(model_config, builds)
    if base is None:
        return unbuilt(cls, builds)
    class_site = Sites(cls, base.model, base.recorder).class_site
    if _past(deadline):
        return _not_verified(OUT_OF_TIME, class_site)
    try:
        checkpoint = read(source)
    except CheckpointError as e:
        return _not_verified(f"the checkpoint cannot be read: {e}", class_site)
    layout, unknown = realquant.torch_layout(checkpoint)
    if unknown:
        return _not_verified(
            f"checkpoint {checkpoint.describe()} holds dtypes this torch does not know "
            f"({', '.join(unknown)}): a newer torch reads them",
            class_site,
        )
    if not callable(getattr(base.model, "load_weights", None)):
        return _not_verified("the model has no `load_weights`", class_site)
    parts = [f"checkpoint {checkpoint.describe()} streamed through `load_weights`"]
    target, config, quant = base, model_config, None
    if checkpoint.quantization:
        if _past(deadline, need=base.seconds):
            return _not_verified(OUT_OF_TIME, class_site)
        quant = realquant.quantized_build(base.plan, checkpoint)
        if quant.build is None and quant.mixed_precision:
            return _mixed_precision(cls, base, quant)
        if quant.build is None:
            why = f"quantization `{quant.method}` of checkpoint {checkpoint.describe()}: "
            return _not_verified(why + quant.reason, class_site)
        target, config = quant.build, quant.model_config
    sites = Sites(cls, target.model, target.recorder)
    sites.embedding = _served_as_embedding(config)
    with _as_served(target.model, config):
        # vLLM's own loaders raise AttributeError on a name with no parameter (a scale
        # for an unquantized layer): with the checkpoint's real names, the real load does
        s = stream(target.model, layout, _stream_context(target, config), (AttributeError,))
    if s.limit:
        reason = f"a weight loader needs real data on meta tensors ({s.limit})"
        site = (s.limit_error and sites.frame(s.limit_error)) or sites.loader("")
        return DryRun("not verified", reason, facts=[_note(f"checkpoint dry-run: {reason}", site)])
    if not s.complete:
        facts = coverage_facts(s, layout, sites)
        # the real checkpoint's own names: each raise is what the engine's load meets
        reason = "`load_weights` raised on too many kinds of names to check the rest"
        return DryRun("not verified", reason, facts=facts)
    findings, facts, sources = _judged(
        cls, s, layout, sites, (base, target, quant, model_config), parts, deadline
    )
    mapping = {layer: path for path, layers in sources.items() for layer in layers}
    return DryRun("verified", "; ".join(parts), [], mapping, facts=findings + facts)


def _judged(
    cls: type | None,
    s: Any,
    layout: dict[str, Any],
    sites: Sites,
    built: tuple[Any, Any, Any, Any],
    parts: list[str],
    deadline: float | None,
) -> tuple[list[Any], list[Any], dict[str, Any]]:
    """What a complete stream of the checkpoint left undone (PFX701 facts, and the
    findings not yet facts), and each layer's quantization
    judged (against the checkpoint's own config, else a synthetic ``Fp8Config``); ``parts``
    gets what was done. ``built``: the tp=1 build, the one streamed, the quantized build (or
    None) and the target's model config."""
    base, target, quant, base_config = built
    findings: list[Any] = []  # notes (``Unverified``) of what did not run
    realquant.drop_defaulted(s, target.model)
    scales = realquant.fold_shard_scales(s, target.model)
    sources = layer_sources(s, target.model)
    judged = realquant.Judged()
    if quant is not None:
        plain = realquant.unquantized_leaves(base.model)
        judged = realquant.method_facts(cls, s, layout, sites, plain, quant)
        _fold(s, judged)
        lists = f", {quant.described}" if quant.described else ""
        parts.append(
            f"built under its quantization config (vLLM's `{quant.method}`{lists}) and each "
            "layer's quantization method judged against what the checkpoint stores"
        )
    judged_layout = {k: v for k, v in layout.items() if k.rpartition(".")[0] not in judged.layers}
    facts = coverage_facts(s, judged_layout, sites)
    realquant.name_folded_scales(facts, scales)
    facts = _one_per_module(facts)
    _point_at_skips(facts, sites, s.recorder.consumed)
    facts += realquant.dtype_facts(s, layout, sites, judged.paths)
    facts += _partly_loaded(s, sites)
    facts += judged.facts
    if quant is None:
        found, skipped = quant_facts(cls, base_config, base, sources, sites, deadline)
        facts += found
        if skipped:
            findings.append(_note(f"quantization dry-run: {skipped}", sites.class_site))
            parts.append(f"in part: the quantization dry-run did not run ({skipped})")
        else:
            parts.append(
                "no quantization config: each linear layer judged under a synthetic "
                "`Fp8Config` as without a checkpoint"
            )
    return findings, facts, sources


def _mixed_precision(cls: type | None, base: Any, quant: realquant.QuantBuild) -> DryRun:
    """PFX702 at ``packed_modules_mapping``: vLLM refuses to build a fused layer whose
    checkpoint parts the checkpoint quantizes differently."""
    sites = Sites(cls, base.model, base.recorder)
    refused = describe_error(quant.error)
    fact = FusedPrecisionRefused(sites.packed_mapping(), refused, quant.method)
    reason = f"quantization `{quant.method}`: the model cannot be built under it (a finding)"
    return DryRun("verified", reason, facts=[fact])


def _fold(s: Stream, judged: realquant.Judged) -> None:
    """What a method mismatch makes follow is part of its PFX702: the module's own
    parameters left unwritten, the checkpoint tensors of its layers left unloaded (or
    refused)."""
    for key, t in list(s.recorder.by_storage.items()):
        if t.is_param and not t.written and t.name.rpartition(".")[0] in judged.paths:
            del s.recorder.by_storage[key]
    s.raised = [(n, e) for n, e in s.raised if n.rpartition(".")[0] not in judged.layers]


def _one_per_module(facts: list[Loading]) -> list[Loading]:
    """A quantized layer holds several parameters per shard (``weight_packed`` and its
    ``weight_scale``); one wrong mapping entry leaves the same shard of each unwritten.
    One fact per module, shard and line, naming the other parameters (``also``)."""
    first: dict[tuple[str, str, str, int], UnwrittenShard | UnwrittenElements] = {}
    out: list[Loading] = []
    for f in facts:
        if not isinstance(f, (UnwrittenShard, UnwrittenElements)):
            out.append(f)
            continue
        path, _, leaf = f.param.rpartition(".")
        key = (path, f.shard if isinstance(f, UnwrittenShard) else "", *f.site)
        if key in first:
            first[key].also.append(leaf)
            continue
        first[key] = f
        out.append(f)
    return out


def _partly_loaded(s: Stream, sites: Sites) -> list[PartlyLoaded]:
    """PFX701: a checkpoint tensor only part of which reaches the model. vLLM's sharded
    loaders narrow a checkpoint tensor to the shard the parameter has room for, so a
    parameter narrower than the checkpoint's tensor (a size read from another config
    attribute) loads silently truncated."""
    out = []
    for name, (loaded, held) in sorted(s.recorder.partly_read().items()):
        into = sorted(t.name for t in s.recorder.by_storage.values() if name in t.sources)
        path = into[0].rpartition(".")[0] if into else ""
        out.append(PartlyLoaded(sites.module(path), name, loaded, held, tuple(into)))
    return out


def _point_at_skips(facts: list[Loading], sites: Sites, consumed: set[str]) -> None:
    """A tensor the model's ``load_weights`` never loads is reported at the line of that
    function that names it (``if not n.startswith("lm_head.")``), not at its ``def``,
    where the function has one. Only names no loaded tensor shares count (a line that
    quotes ``"model."`` handles every tensor, not this one)."""
    for f in facts:
        if not isinstance(f, NeverLoaded) or f.site != sites.loader(f.tensor):
            continue
        found = _naming_line(*f.site, f.tensor, consumed)
        if found is not None:
            f.site = (f.site[0], found)


def _naming_line(file: str, start: int, name: str, consumed: set[str]) -> int | None:
    """The first line of the function at ``file:start`` that quotes ``name`` or one of
    its leading parts (``"lm_head."``, ``"lm_head"``) that no consumed tensor has,
    longest first."""
    import linecache

    parts = name.split(".")
    wanted = [
        part
        for part in (".".join(parts[:i]) for i in range(len(parts), 0, -1))
        if not any(c == part or c.startswith(f"{part}.") for c in consumed)
    ]
    patterns = [re.compile(rf"[\"']{re.escape(w)}\.?[\"']") for w in wanted]
    head = linecache.getline(file, start)
    depth = len(head) - len(head.lstrip())
    body = start  # after the decorators and the signature, however many lines
    while body < start + 40:
        text = linecache.getline(file, body).split("#")[0].rstrip()
        body += 1
        if text.endswith(":") and not text.lstrip().startswith("@"):
            break
    lines = []
    for n in range(body, body + 400):
        text = linecache.getline(file, n)
        if not text:
            break
        if text.strip() and len(text) - len(text.lstrip()) <= depth:
            break  # the function ended
        lines.append((n, text))
    for pattern in patterns:
        for n, text in lines:
            if pattern.search(text):
                return n
    return None


def _not_verified(reason: str, site: tuple[str, int]) -> DryRun:
    return DryRun("not verified", reason, facts=[_note(f"checkpoint dry-run: {reason}", site)])
