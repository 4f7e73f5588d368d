"""PFX702: the quantization dry-run: a layer a quantized checkpoint's config would treat
otherwise than its name says."""

from __future__ import annotations

from typing import Any, ClassVar

from prefixlint.codes import NOT_VERIFIED_CODE
from prefixlint.introspect.checks.base import Case, FactCheck, by_site_alike, more_like_it
from prefixlint.introspect.dryrun.quantfacts import (
    Cause,
    FusedPrecisionRefused,
    LayerMisquantized,
    MethodMismatch,
    PackedEntry,
    Stored,
    UnthreadedLayer,
)
from prefixlint.introspect.finding import Finding

# A ``packed_modules_mapping`` entry whose parts differ from (or list) the ones a layout
# derived from the model gave (``LayerMisquantized.own_tables``): those parts are
# prefixlint's reading of the model's tables (a class whose entry says the checkpoint holds
# the layer fused, ``'qkv': ['qkv']``, may be right), so not verified, a PFX600 note. An
# entry the table lacks stays a finding: the layer is fused either way, and looked up under
# its own name.
_DERIVED = (
    "; the parts are the ones the model's own tables give, which a real checkpoint "
    "(`--checkpoint`) confirms or not"
)


class Quantization(FactCheck):
    """## What it does
    Builds the model again under vLLM's real `Fp8Config` whose `ignored_layers` name the
    checkpoint's unquantized layers (or under `--checkpoint`'s own quantization config),
    and reports each layer whose quant method disagrees with what its checkpoint name
    asks, each fused layer whose parts `packed_modules_mapping` lacks, and each layer built
    without `quant_config` whose checkpoint layers the quantization config covers (a note
    under the synthetic config, which cannot tell whether a real checkpoint quantizes the
    layer; `check --introspect` folds it into the static PFX405 at the same line). In `dryrun/`
    (`quant.py`, `realquant.py`), reported at the line that built the layer.

    ## Details
    Using the checkpoint-name to module mapping PFX701 recorded, the model is built
    twice more under vLLM's real `Fp8Config`, whose `ignored_layers` name alternate
    kinds of checkpoint linear layers (so every layer is checked once ignored, once
    quantized). Every linear layer built with a quant config must get
    `UnquantizedLinearMethod` exactly when all the checkpoint layers it loads are
    ignored. A mismatch names the checkpoint layers, the module and its prefix, and the
    cause: a prefix that is not the module's path, a `packed_modules_mapping` without
    (or with a wrong) entry for a fused layer, or a renamed layer no `hf_to_vllm_mapper`
    entry covers. Layers built with `quant_config=None` (a model that opts a layer out)
    and fused MoE experts are not judged. With `--checkpoint`, the model is built once
    under the checkpoint's real quantization config (any method the installed vLLM
    builds here; one it cannot is a PFX600 note), and every layer with a weight
    quantization method (linear layers, heads, experts) must be quantized exactly when
    the checkpoint stores it quantized (tensors an unquantized layer has no parameter
    for, or a weight of a quantized dtype); a layer built without its `quant_config` and
    a kind of layer the method cannot quantize are named as causes too.

    ## Why is this bad?
    A layer looked up under the wrong name is quantized when the checkpoint holds it
    unquantized (or the reverse): loading fails or the output is wrong.

    ## Example
    `self.mlp = LlamaMLP(...)` built without `prefix`: its layers are named from `""`.

    ## Fix
    Give the layer the prefix of its path.
    """

    code = "PFX702"
    stages: ClassVar[tuple[str, ...]] = ("dry-runs",)
    examples: ClassVar[tuple[Case, ...]] = (
        Case("LlamaDecoderLayer", 'prefix=f"{prefix}.mlp",', "", "self.mlp = LlamaMLP("),
        # a layer never given the quantization config (issue 28)
        Case(
            "LlamaMLP",
            "            quant_config=quant_config,\n            reduce_results=reduce_results,",
            "            reduce_results=reduce_results,",
            "self.down_proj = RowParallelLinear(",
            "note",
        ),
    )
    # the dry-runs (``quant.py``, ``realquant.py``, ``checkpoint_run.py``) return these
    # typed facts (``dryrun/quantfacts.py``); this unit writes their words
    reads: ClassVar[tuple[type, ...]] = (
        FusedPrecisionRefused,
        UnthreadedLayer,
        LayerMisquantized,
        MethodMismatch,
    )

    def findings(self, facts: list[Any]) -> list[Finding]:
        """One finding per site and kind (the first layer's, with how many more say the
        same), the layout judged after it; a ``packed_modules_mapping`` entry judged
        against parts the model's own tables give is not verified (a PFX600 note)."""
        out = []
        for group in by_site_alike(facts):
            fact = group[0]
            finding = _finding(self.code, fact)
            finding.message += more_like_it(group)
            layout = getattr(fact, "layout", "")  # the checkpoint layout, where not the reference's
            if layout:
                finding.message += f" ({layout})"
            derived = isinstance(fact, LayerMisquantized) and fact.own_tables
            if derived and fact.entry in ("wrong", "listed"):
                said = f"not verified: {finding.message}{_DERIVED}"
                finding = Finding(NOT_VERIFIED_CODE, "note", said, *fact.site)
            out.append(finding)
        return out


def _finding(code: str, fact: Any) -> Finding:
    if isinstance(fact, FusedPrecisionRefused):
        return Finding(code, "error", _refused(fact), *fact.site)
    if isinstance(fact, UnthreadedLayer):
        # a note: folded into PFX405 by `check --introspect` (its "kind")
        return Finding(code, "note", _unthreaded(fact), *fact.site, facts={"kind": "unthreaded"})
    packed = fact.cause.packed
    facts = {
        "kind": "quant-mismatch",
        "leaf": packed.leaf if packed is not None else fact.path.rsplit(".", 1)[-1],
        "entry": packed.state if packed is not None else "",  # the table's part in it
    }
    said = _misquantized(fact) if isinstance(fact, LayerMisquantized) else _mismatch(fact)
    return Finding(code, "error", said, *fact.site, facts=facts)


def _refused(fact: FusedPrecisionRefused) -> str:
    if not fact.method:
        return (
            "a fused layer mixes checkpoint layers the checkpoint ignores with ones it "
            "quantizes; `packed_modules_mapping` does not match the checkpoint: "
            f"vLLM: {fact.error}"
        )
    return (
        "a fused layer mixes checkpoint layers the checkpoint leaves unquantized with ones "
        f"it quantizes, and vLLM's `{fact.method}` refuses it: `packed_modules_mapping` "
        f"fuses what the checkpoint keeps apart: vLLM: {fact.error}"
    )


def _unthreaded(fact: UnthreadedLayer) -> str:
    """A note: the config is prefixlint's, and vLLM's own models leave many such layers
    out on purpose (``dryrun/quant.py``); with ``--checkpoint`` the real config decides."""
    names = ", ".join(f"`{n}`" for n in fact.layers)
    what = (
        f"`{fact.path}` was built without `quant_config`, so it stays unquantized although "
        f"the quantization config covers {names}"
    )
    if fact.router:
        why = (
            "a router, one output per expert, which vLLM's MoE models build unquantized on purpose"
        )
    else:
        why = "a checkpoint that quantizes it would have no parameter for its scales"
    return f"{what} (a note: {why}; a synthetic config cannot tell whether one does)"


def packed_entry_wrong(entry: PackedEntry) -> str | None:
    """How the model's ``packed_modules_mapping`` keeps the fused layer from the
    checkpoint's parts; None when its entry lists exactly those parts."""
    leaf, parts = entry.leaf, list(entry.parts)
    if entry.entry is None:
        return f"`packed_modules_mapping` has no entry `{leaf!r}: {parts}`"
    if entry.state == "listed":
        return None
    return f"`packed_modules_mapping[{leaf!r}]` is {list(entry.entry)}, not {parts}"


def _prefix(fact: LayerMisquantized | MethodMismatch) -> str:
    return (
        f"its prefix `{fact.prefix}` is not its path, and the quantization config matches "
        "the prefix"
    )


def _misquantized(fact: LayerMisquantized) -> str:
    """Under the synthetic ``Fp8Config``."""
    names = ", ".join(f"`{n}`" for n in fact.layers)
    if fact.ignored:
        what = (
            f"`{fact.path}` is quantized although the checkpoint lists {names} in `ignored_layers`"
        )
    else:
        what = f"`{fact.path}` is left unquantized although the checkpoint quantizes {names}"
    cause = fact.cause
    why = "vLLM's `is_layer_skipped` decides otherwise for this prefix"
    if cause.kind == "prefix":
        why = _prefix(fact)
    elif cause.kind == "packed" and cause.packed is not None:
        leaf, parts = cause.packed.leaf, list(cause.packed.parts)
        why = packed_entry_wrong(cause.packed) or (
            f"`packed_modules_mapping[{leaf!r}]` lists {parts}, yet vLLM's "
            "`is_layer_skipped` decides otherwise for this prefix"
        )
    elif cause.kind == "renamed":
        why = (
            f"the checkpoint calls it `{cause.name}` and no `hf_to_vllm_mapper` entry "
            f"renames that to `{cause.to}`"
        )
    return f"{what} (prefix `{fact.prefix}`): {why}"


def _stored(held: Stored) -> str:
    """What a checkpoint stores for a layer: its values' dtypes and names, and its scales."""
    what = ", ".join(f"{dtype} `{name}`" for dtype, name in held.values)
    what += f" with {', '.join(f'`{k}`' for k in held.extra)}" if held.extra else ", no scales"
    return what.lstrip(", ")


def _mismatch(fact: MethodMismatch) -> str:
    """Under a real checkpoint's quantization config (``--checkpoint``)."""
    alike: dict[Stored, list[str]] = {}
    for layer, held in fact.holds:
        alike.setdefault(held, []).append(f"`{layer}`")
    holds = "; ".join(f"{', '.join(names)}: {_stored(held)}" for held, names in alike.items())
    if fact.quantized_as:
        what = (
            f"`{fact.path}` is quantized ({fact.quantized_as}) although the checkpoint "
            "stores it unquantized"
        )
    else:
        what = f"`{fact.path}` is left unquantized although the checkpoint stores it quantized"
    verb = "stays" if len(fact.unwritten) == 1 else "stay"
    shown = ", ".join(f"`{u}`" for u in fact.unwritten)
    tail = f"; its {shown} {verb} unwritten" if fact.unwritten else ""
    why = _real_cause(fact, fact.cause)
    return f"{what} ({holds}) under `{fact.method}` (prefix `{fact.prefix}`): {why}{tail}"


def _real_cause(fact: MethodMismatch, cause: Cause) -> str:
    if cause.kind == "built-as":
        return (
            f"it is built as {cause.package}'s `{cause.name}`, which no quantization config reaches"
        )
    if cause.kind == "unthreaded":
        return "it is built without the `quant_config`"
    if cause.kind == "no-method":
        return f"vLLM's `{fact.method}` has no quantized method for a `{cause.name}`"
    if cause.kind == "prefix":
        return _prefix(fact)
    if cause.kind == "packed" and cause.packed is not None:
        return packed_entry_wrong(cause.packed) or ""
    if cause.kind == "renamed":
        return (
            f"the checkpoint calls it `{cause.name}` and the quantization config matches "
            f"that name; no `hf_to_vllm_mapper` entry renames it to `{cause.to}`"
        )
    if cause.kind == "unmatched":
        return (
            f"no entry of the checkpoint's {cause.lists} matches `{fact.prefix}` as vLLM "
            "matches it, so vLLM quantizes it and its scales are never loaded"
        )
    return "vLLM's quantization config decides otherwise for this prefix"
