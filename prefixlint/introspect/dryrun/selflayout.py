"""The checkpoint dry-run (PFX701/PFX702) for models transformers has no class for.

``dryrun/`` takes the checkpoint layout from the reference ``transformers`` class of the
architecture. Plugin, remote-code and vLLM-only architectures have none, so here the
layout comes, in order, from:

1. transformers' class for the config's *model type* (``model_type: llama`` under an
   architecture named ``MyLlamaForCausalLM``), when the config is not a made-up fallback;
2. the model itself: every parameter of the built model mapped back to the checkpoint
   tensors that fill it, through what the model declares about its checkpoint: the
   ``(fused, checkpoint, shard)`` entries of the stacked-params tables in its files (what
   its ``load_weights`` consumes), ``packed_modules_mapping``, vLLM's expert mapping for
   fused MoE (``get_moe_expert_mapping``) and the inverse of ``hf_to_vllm_mapper``
   (checked by mapping each name forward again).

The layout is then streamed through the model's ``load_weights`` and the model built under
``Fp8Config`` exactly as for a reference layout. What a self-derived layout cannot see is
said in every result: a checkpoint that names its tensors otherwise than the model's own
tables say (a loader that renames in code) is not the layout checked.
"""

from __future__ import annotations

import copy
import re
import traceback
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from torch import nn

from prefixlint.introspect import dryrun
from prefixlint.introspect.dryrun import renamed
from prefixlint.introspect.dryrun.divergence import Divergence
from prefixlint.introspect.dryrun.layouts import NotVerified, incomplete_experts, normal, reference
from prefixlint.introspect.dryrun.quant import layer_sources, past, quant_facts
from prefixlint.introspect.dryrun.quantfacts import LayerMisquantized
from prefixlint.introspect.dryrun.sites import Sites
from prefixlint.introspect.dryrun.streaming import stream
from prefixlint.introspect.dryrun.tables import (
    _forward,
    fused_kind,
    shard_sources,
    weights_mapper,
)
from prefixlint.introspect.dryrun.weightfacts import (
    BrokenLoader,
    LoaderRaises,
    Loading,
    NeverLoaded,
)
from prefixlint.introspect.dryrun.weights import (
    coverage_facts,
    loader_refusals,
    refused_modules,
)
from prefixlint.introspect.finding import Unverified, describe_error

SELF_DERIVED = (
    "checkpoint layout derived from the model itself (its parameters through its "
    "stacked-params tables, `packed_modules_mapping`, expert mapping and "
    "`hf_to_vllm_mapper`): a checkpoint that names tensors otherwise than these say "
    "(a loader that renames in code) is not seen"
)
_NO_REFERENCE = ("transformers has no reference class", "the reference `")


def applies(outcome: Any) -> bool:
    """The dry-run found no reference layout to check against (none, or none that builds
    on meta): a layout from the model's model type, or from the model itself, may do."""
    return outcome.status == "not verified" and outcome.reason.startswith(_NO_REFERENCE)


# -- 1. transformers' class for the config's model type --------------------------------------


def model_type_reference(hf_config: Any, arch: str) -> str | None:
    """transformers' class for the config's ``model_type`` of the architecture's kind
    (its suffix: ``ForCausalLM``, ``ForConditionalGeneration``, ``Model``, ...)."""
    from transformers.models.auto import modeling_auto

    model_type = getattr(hf_config, "model_type", None)
    if not isinstance(model_type, str) or not model_type:
        return None
    suffix = re.search(r"(For[A-Z]\w*|Model)$", arch)
    found = []
    for name in dir(modeling_auto):
        if not name.endswith("_MAPPING_NAMES"):
            continue
        value = getattr(modeling_auto, name).get(model_type)
        for candidate in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(candidate, str) and candidate not in found:
                found.append(candidate)
    if suffix is not None:
        same = [c for c in found if c.endswith(suffix.group(1))]
        if same:
            return same[0]
    return None


# -- 2. the model's own tables ----------------------------------------------------------------


def _expert_entries(model: nn.Module) -> list[tuple[str, str, int, str]]:
    try:
        from vllm.model_executor.utils import get_moe_expert_mapping

        return list(get_moe_expert_mapping(model))
    except Exception:
        return []


@dataclass
class Layout:
    tensors: dict[str, tuple[tuple[int, ...], Any]] = field(default_factory=dict)
    unknown: dict[str, str] = field(default_factory=dict)  # module path -> why not derived
    # a part split from a fused parameter -> (the parameter's checkpoint name, its shape)
    fused: dict[str, tuple[str, Any]] = field(default_factory=dict)


def checkpoint_name(mapper: Any, name: str, fused: str | None = None) -> str | None:
    """The checkpoint name ``hf_to_vllm_mapper`` maps to ``name`` (or, for a shard of a
    fused parameter, to the fused ``fused``: the mapper's stacked entries): each entry's
    inverse (and pairs of them), kept when mapping forward gives ``name`` back; ``name``
    itself when the mapper leaves it alone; None when no name maps to it."""
    if mapper is None:
        return name
    wanted = {name, fused} - {None}
    candidates = [name]
    for _ in range(2):
        more = []
        for candidate in candidates:
            more.extend(_inverses(mapper, candidate))
        candidates += [c for c in more if c not in candidates]
    for candidate in candidates[1:] + candidates[:1]:
        if _forward(mapper, candidate) in wanted:
            return candidate
    return None


def _inverses(mapper: Any, name: str) -> list[str]:
    out = []
    for orig, new in (getattr(mapper, "orig_to_new_prefix", None) or {}).items():
        if isinstance(new, str) and name.startswith(new):
            out.append(orig + name[len(new) :])
    for orig, new in (getattr(mapper, "orig_to_new_suffix", None) or {}).items():
        if isinstance(new, str) and new and name.endswith(new):
            out.append(name[: -len(new)] + orig)
    for orig, new in (getattr(mapper, "orig_to_new_substr", None) or {}).items():
        if isinstance(new, str) and new and new in name:
            out.append(name.replace(new, orig, 1))
    return out


def _expert_tensors(
    name: str, shape: tuple[int, ...], entries: list[tuple[str, str, int, str]]
) -> dict[str, tuple[int, ...]] | None:
    """The per-expert checkpoint tensors of a fused expert parameter (``...experts.
    [routed_experts.]w13_weight`` -> ``...experts.0.gate_proj.weight``, ...), by vLLM's
    expert mapping; None when ``name`` is no expert parameter it covers."""
    leaf = name.rsplit(".", 1)[-1]
    mine = []
    for param, weight, expert, shard in entries:
        owner, _, stem = param.rstrip(".").rpartition(".")
        if stem and leaf.startswith(stem) and f".{owner}." in f".{name}":
            mine.append((owner, stem, weight, expert, shard))
    if not mine or len(shape) < 2:
        return None
    owner = mine[0][0].split(".")
    parts = name.split(".")
    starts = [  # the owner as whole components (``experts``, not ``routed_experts``)
        i for i in range(len(parts) - len(owner)) if parts[i : i + len(owner)] == owner
    ]
    if not starts:
        return None
    head = ".".join([*parts[: starts[-1]], ""]) if starts[-1] else ""
    rest = leaf[len(mine[0][1]) :]
    shards = sorted({shard for *_, shard in mine})
    experts = {expert for *_, expert, _ in mine}
    if len(experts) != shape[0]:
        return None  # not one tensor per expert of this parameter (redundant experts...)
    per = shape[1] // len(shards) if shape[1] % len(shards) == 0 else None
    if per is None:
        return None
    out = {}
    for _, _, weight, _, _ in mine:
        tensor_shape = (per, *shape[2:])
        out[f"{head}{weight.rstrip('.')}.{rest}"] = tensor_shape
    return out


def derive(cls: type | None, model: nn.Module) -> Layout:
    """The checkpoint the model's own tables describe, as name -> (shape, dtype)."""
    out = Layout()
    mapper = weights_mapper(cls)
    modules = dict(model.named_modules())
    sources = shard_sources(model, cls)
    experts = _expert_entries(model)
    for name, param in model.named_parameters():
        path, _, leaf = name.rpartition(".")
        module = modules.get(path)
        shape = tuple(param.shape)
        tensors: dict[str, tuple[int, ...]] = {}
        fused_name = None
        expert = _expert_tensors(name, shape, experts) if experts else None
        kind = fused_kind(module) if module is not None else None
        dim = getattr(param, "output_dim", None)
        module_leaf = path.rsplit(".", 1)[-1]
        if expert is not None:
            tensors = expert
        elif kind is not None and module_leaf in sources and isinstance(dim, int):
            sizes = list(module.output_sizes)  # type: ignore[union-attr]
            if param.dim() <= dim or sum(sizes) != shape[dim]:
                out.unknown[path] = f"`{path}.{leaf}` is not split along its output sizes"
                continue
            owner = path[: len(path) - len(module_leaf)]
            fused_name = name
            for part, index in sources[module_leaf]:
                part_shape = list(shape)
                part_shape[dim] = sizes[index]
                tensors[f"{owner}{part}.{leaf}"] = tuple(part_shape)
        elif re.search(r"(^|\.)w(13|2|1|3)_\w+$", name) and param.dim() == 3:
            out.unknown[path] = "fused experts vLLM's expert mapping does not describe"
            continue
        else:
            tensors = {name: shape}
        whole = checkpoint_name(mapper, fused_name) if fused_name else None
        for tensor, tensor_shape in tensors.items():
            ckpt = checkpoint_name(mapper, tensor, fused_name)
            if ckpt is None:
                out.unknown[path] = f"no checkpoint name `hf_to_vllm_mapper` maps to `{tensor}`"
                break
            out.tensors[ckpt] = (tensor_shape, param.dtype)
            if whole:
                out.fused[ckpt] = (whole, (shape, param.dtype))
    return out


# -- the dry-run over such a layout ------------------------------------------------------------


def _suffixed(facts: list[Any], what: str) -> None:
    """Every fact of the dry-run says which layout it was seen on (its unit writes it; the
    PFX702 facts carry it already, frozen)."""
    for fact in facts:
        if isinstance(fact, Loading):
            fact.layout = what


def _distinct(notes: list[Any]) -> list[Any]:
    """Each note once: a layout tried again says the same of the same site."""
    out: list[Any] = []
    for note in notes:
        if note not in out:
            out.append(note)
    return out


# a loader that cannot place a name (or shape) raises these; others are its own code failing
_LOOKUP_ERRORS = (KeyError, IndexError, ValueError, AssertionError)
# the share of the names derived from the model its loader must take for the layout to
# be the one it reads: below, it reads names renamed in code (a draft's target names)
TAKEN_SHARE = 0.9


def _broken_loader(s: Any, sites: Any) -> list[Loading]:
    """A ``load_weights`` whose own code fails: a ``TypeError`` raised in the model's own
    frame (a wrong call), not a name it refuses (a lookup error, or an error raised inside
    vLLM's loader on a name). No checkpoint layout would load through it. One fact per
    line, however many tensors raise there."""
    out: dict[tuple[str, int], BrokenLoader] = {}
    for name, error in s.raised:
        if isinstance(error, _LOOKUP_ERRORS) or not isinstance(error, TypeError):
            continue
        frames = list(traceback.walk_tb(error.__traceback__))
        if not frames or not sites.model_file(frames[-1][0].f_code.co_filename):
            continue  # raised inside a library, on what the model handed it
        site = (frames[-1][0].f_code.co_filename, frames[-1][1])
        if site in out:
            out[site].more = True
            continue
        out[site] = BrokenLoader(name, describe_error(error), site)
    return list(out.values())


def _reference_layouts(model_config: Any, cls: type | None, base: Any) -> tuple[Any, str] | None:
    """transformers' reference for the config's model type: (layouts, reference model)
    and where it came from; None without one (or when it does not build on meta)."""
    from vllm.config import set_current_vllm_config

    hf = model_config.hf_config
    arch = (getattr(hf, "architectures", None) or [getattr(cls, "__name__", "")])[0]
    name = model_type_reference(hf, arch.removesuffix("__prefixlint"))
    if name is None:
        return None
    config = copy.copy(hf)
    config.architectures = [name]
    try:
        with set_current_vllm_config(base.vllm_config):
            return reference(config, None), name
    except NotVerified:
        return None


def run(
    cls: type | None,
    model_config: Any,
    builds: list[Any],
    synthesised: bool,
    why: str,
    deadline: float | None = None,
) -> Any:
    """The dry-run against transformers' class of the config's model type (for a config
    that was given: a synthesised one's model type may be prefixlint's choice), else
    against the model's own layout; ``why``: why the architecture's reference did not do."""
    base = dryrun._base_build(model_config, builds)
    if base is None:
        return dryrun.unbuilt(cls, builds)
    sites = Sites(cls, base.model, base.recorder)
    sites.embedding = dryrun._served_as_embedding(model_config)
    if not callable(getattr(base.model, "load_weights", None)):
        note = dryrun._note("checkpoint dry-run: the model has no `load_weights`", sites.class_site)
        return dryrun.DryRun("not verified", "the model has no `load_weights`", facts=[note])
    given = not synthesised
    found = _reference_layouts(model_config, cls, base) if given else None
    if found is not None:
        (layouts, _), name = found
        what = f"checkpoint layout of transformers' `{name}`, the class of the config's model type"
        return _judge_reference(cls, model_config, base, sites, layouts, what, deadline)
    derived = derive(cls, base.model)
    if not derived.tensors:
        said = f"checkpoint dry-run: {why}; no layout derives from the model"
        return dryrun.DryRun("not verified", why, facts=[dryrun._note(said, sites.class_site)])
    return _judge_self(cls, model_config, base, sites, derived, deadline)


def _stream(base: Any, model_config: Any, layout: dict[str, Any]) -> Any:
    with dryrun._as_served(base.model, model_config):
        return stream(base.model, layout, dryrun._stream_context(base, model_config))


def _judge_reference(
    cls: type | None,
    model_config: Any,
    base: Any,
    sites: Any,
    layouts: list[dict[str, Any]],
    what: str,
    deadline: float | None,
) -> Any:
    """``dryrun.run`` from its layouts on, for a reference of the config's model type."""
    tried = []
    for layout in layouts:
        incomplete, partial_why = incomplete_experts(layout)
        streamed = {k: v for k, v in layout.items() if k not in incomplete}
        s = _stream(base, model_config, streamed)
        found = coverage_facts(s, streamed, sites)
        tried.append((s, found, partial_why, streamed))
        if not found and not s.limit:
            break
    s, facts, partial_why, streamed = min(tried, key=lambda t: (not t[0].complete, len(t[1])))
    findings: list[Any] = []  # notes (``Unverified``)
    if partial_why:
        said = f"checkpoint dry-run, in part: {partial_why}"
        findings.append(dryrun._note(said, sites.class_site))
    if s.limit:
        return _limited(s, sites, (findings, facts), what)
    if not s.complete:
        judged, broken = loader_refusals(
            facts, s, streamed, sites, lambda part: _stream(base, model_config, part)
        )
        reason = dryrun.refused_reason(broken)
        _suffixed(judged, what)
        return dryrun.DryRun("not verified", reason, facts=_distinct(findings) + judged)
    partial = [what] + ([partial_why] if partial_why else [])
    found = (findings, facts)
    return _quantized(cls, model_config, base, sites, s, found, partial, what, deadline)


def _limited(s: Any, sites: Any, found: tuple[list[Any], list[Loading]], what: str) -> Any:
    findings, facts = found
    reason = f"a weight loader needs real data on meta tensors ({s.limit})"
    site = (s.limit_error and sites.frame(s.limit_error)) or sites.loader("")
    findings.append(dryrun._note(f"checkpoint dry-run: {reason}", site))
    _suffixed(facts, what)
    return dryrun.DryRun("not verified", reason, facts=_distinct(findings) + facts)


def _quantized(
    cls: type | None,
    model_config: Any,
    base: Any,
    sites: Any,
    s: Any,
    found: tuple[list[Any], list[Loading]],
    partial: list[str],
    what: str,
    deadline: float | None,
    keep: Any = None,
    back: dict[str, str] | None = None,
) -> Any:
    """The quantization dry-run on the stream's checkpoint-name mapping; ``keep``: which
    of its findings the layout can back; ``back``: checkpoint layers the loader took under
    a name it renames in code -> the layer as the model names it, which the quantization
    dry-run uses (what the loader renames is its own affair, not the ignore list's).
    ``found``: the findings and the PFX701 facts so far."""
    findings, facts = found
    refused = refused_modules(s, sites)
    sources = {k: v for k, v in layer_sources(s, base.model).items() if normal(k) not in refused}
    if back:
        sources = {
            path: [back.get(layer, layer) for layer in layers] for path, layers in sources.items()
        }
    mapping = {layer: path for path, layers in sources.items() for layer in layers}
    quant, skipped = quant_facts(cls, model_config, base, sources, sites, deadline)
    # the PFX702 unit says the layout after its words, as ``_suffixed`` does here
    facts += [replace(f, layout=what) for f in quant if keep is None or keep(f)]
    if skipped:
        findings.append(dryrun._note(f"quantization dry-run: {skipped}", sites.class_site))
        partial.append(f"the quantization dry-run did not run ({skipped})")
    _suffixed(facts, what)
    reason = f"in part: {'; '.join(partial)}"
    return dryrun.DryRun("verified", reason, mapping=mapping, facts=_distinct(findings) + facts)


def _backed(f: Loading) -> bool:
    """What of the stream the model's own layout can back: something left random. A name
    it refused or dropped with nothing left random is nothing (the loader may read the
    tensor under another name); the unit judges the rest (``own_layout``)."""
    if isinstance(f, LoaderRaises):
        return False
    return not isinstance(f, NeverLoaded) or f.skips_param


def _on_own_layout(f: Loading) -> Loading:
    f.own_layout = True
    return f


def _judge_self(
    cls: type | None,
    model_config: Any,
    base: Any,
    sites: Any,
    derived: Layout,
    deadline: float | None,
) -> Any:
    """The model's own layout, judged for what it can back. The names come from the
    model, so a loader that refuses or drops one may read it under another name (renamed
    in code): raises on names and dropped names are not findings, and the layout is only
    taken as the one the loader reads when it takes ``TAKEN_SHARE`` of the names. Then
    what is left unwritten is judged by the PFX701 unit (``own_layout``), a ``load_weights`` whose
    own code fails is an error, and of the quantization dry-run only what ``packed_modules_mapping``
    decides (a prefix that is not its path is PFX601's, judged there)."""
    layout = derived.tensors
    s = _stream(base, model_config, layout)
    broken = _broken_loader(s, sites)
    if broken:
        return dryrun.DryRun("not verified", "`load_weights` itself fails", facts=broken)
    if s.limit:
        return _limited(s, sites, ([], []), SELF_DERIVED)
    derived_count = len(layout)
    layout, s, taken, probed, probed_names, left_out = _taken_layout(
        cls, model_config, base, derived, s, deadline
    )
    share = taken / max(derived_count, 1)
    refused = sorted({n for n, _ in s.raised} | (set(layout) - s.recorder.consumed) | set(left_out))
    shown = ", ".join(f"`{n}`" for n in refused[:3]) + (
        f" and {len(refused) - 3} more" if len(refused) > 3 else ""
    )
    if not s.complete or share < TAKEN_SHARE:
        reason = (
            f"the model's loader takes {taken} of the {derived_count} checkpoint names its "
            f"own parameters give (not {shown}): it reads names renamed in code, which a "
            "layout derived from the model cannot see"
        )
        note = dryrun._note(f"checkpoint dry-run: {reason}", sites.loader(""))
        return dryrun.DryRun("not verified", reason, facts=[note])
    divergence = None
    if derived.unknown:
        divergence = Divergence(paths=set(derived.unknown))
    kept = [_on_own_layout(f) for f in coverage_facts(s, layout, sites, divergence) if _backed(f)]
    partial = [SELF_DERIVED]
    notes = _partial_notes(partial, probed, refused, shown, derived, sites)

    def packed(f: Any) -> bool:
        # the table's entry for a fused layer, whatever the names around it; a fused layer
        # mixing ignored and quantized parts follows from the names it was fed (here the
        # model's own, which its loader may not all take)
        return isinstance(f, LayerMisquantized) and f.entry != ""  # missing, wrong or listed

    # 1:1 renamings only: a fused tensor read whole is its own checkpoint layer
    counts = Counter(probed_names.values())
    whole = {short for short, n in counts.items() if n > 1}
    back = {
        short.rpartition(".")[0]: name.rpartition(".")[0]
        for name, short in probed_names.items()
        if short not in whole
    }
    found = (notes, kept)
    outcome = _quantized(
        cls, model_config, base, sites, s, found, partial, SELF_DERIVED, deadline, packed, back
    )
    # the parts are the model's own tables' reading: the PFX702 unit softens an entry
    # that names other parts into a note (not verified)
    outcome.facts = [
        replace(f, own_tables=True) if isinstance(f, LayerMisquantized) else f
        for f in outcome.facts
    ]
    return outcome


def _taken_layout(
    cls: type | None, model_config: Any, base: Any, derived: Layout, s: Any, deadline: Any
) -> tuple[dict[str, Any], Any, int, list[str], dict[str, str], list[str]]:
    """The layout the loader takes: the derived one, or, when the loader renames in code,
    the names it takes asked of it (renamed.py); the names it takes in no form are left
    out, so that one refused name does not stop the load of the others (they are said as
    not taken). Returns the layout, its stream, how many derived names it takes, what the
    probe said, the renamings and the names left out."""
    layout = derived.tensors
    derived_count = len(layout)
    first = renamed.taken(s, layout)
    taken, probed, left_out = len(first), [], []
    probed_names: dict[str, str] = {}
    if s.complete and taken / max(derived_count, 1) >= TAKEN_SHARE:
        return layout, s, taken, probed, probed_names, left_out
    other, names, said = renamed.probe(
        layout,
        first,
        lambda part: _stream(base, model_config, part),
        lambda: past(deadline),
        cls,
        derived.fused,
    )
    wanted = first | set(names.values())
    other = {k: v for k, v in other.items() if k in wanted}
    again = _stream(base, model_config, other) if names else None
    took = renamed.taken(again, other) if again is not None and not again.limit else set()
    # counted in derived names: a fused tensor read whole stands for its parts
    count = sum(1 for n in layout if names.get(n, n) in took)
    if again is not None and count > taken:
        left_out = sorted(set(layout) - first - set(names))
        layout, s, taken, probed = other, again, count, said
        probed_names = names
    return layout, s, taken, probed, probed_names, left_out


def _partial_notes(
    partial: list[str],
    probed: list[str],
    refused: list[str],
    shown: str,
    derived: Layout,
    sites: Any,
) -> list[Unverified]:
    """The notes of a self-derived dry-run that checked part of the layout; ``partial``
    gets what each covers."""
    kept: list[Unverified] = []
    if probed:
        said = "; ".join(probed)
        partial.append(f"names its loader renames in code, asked of the loader: {said}")
        kept.append(
            dryrun._note(
                "checkpoint dry-run, in part: the model's loader takes some of the names its "
                f"own parameters give only in another form ({said}), as a loader that "
                "renames them in code does: the layout checked holds the names it took",
                sites.loader(""),
            )
        )
    if refused:
        partial.append(f"{len(refused)} name(s) not taken ({shown})")
        kept.append(
            dryrun._note(f"checkpoint dry-run, in part: not taken: {shown}", sites.loader(""))
        )
    if derived.unknown:
        said = "; ".join(list(dict.fromkeys(derived.unknown.values()))[:3])
        partial.append(f"{len(derived.unknown)} module(s) not derived")
        kept.append(
            dryrun._note(f"checkpoint dry-run, in part: not derived: {said}", sites.class_site)
        )

    return kept
