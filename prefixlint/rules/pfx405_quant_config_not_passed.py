"""PFX405 quant-config-not-passed."""

from __future__ import annotations

import libcst as cst

from prefixlint.diagnostic import Severity
from prefixlint.static.decoder_classes import DecoderClasses, is_tower
from prefixlint.static.layer_configs import (
    QUANT_CONFIG,
    Reach,
    builds_layer,
    callee_symbols,
    config_fix,
    cut_off,
    is_router,
    omitted,
    quantized_layer,
    vocabulary_layer,
)
from prefixlint.static.model_classes import other_vllm
from prefixlint.static.prefix_sites import Site, dotted_name, is_layer_site
from prefixlint.static.resolve import Symbol
from prefixlint.static.rule import (
    CONTRACT,
    PREFIX_CALLS,
    FileContext,
    Invalid,
    LintRule,
    example,
)
from prefixlint.static.vllm_facts import owns_engine_cache

_RANK = {Severity.NOTE: 0, Severity.WARNING: 1, Severity.ERROR: 2}

# The context manager vLLM's multimodal models build their towers under.
TOWER_MARK = "_mark_tower_model"


class QuantConfigNotPassed(LintRule):
    """
    ## What it does
    Checks that a layer whose constructor takes `quant_config` (vLLM's parallel linear
    layers, `FusedMoE`, `Attention`, the vocabulary layers, and the model's own blocks
    that take one) gets it, where the constructing code has one in reach: a
    `quant_config` parameter or local, `self.quant_config`, or `vllm_config`.

    ## Why is this bad?
    Without it the layer builds unquantized, whatever the checkpoint says: an FP8, AWQ or
    GPTQ checkpoint then fails to load (`weight_scale` or `qweight` tensors with no
    parameter) or, worse, its quantized tensors are read into a BF16 layer. The model
    runs fine on an unquantized checkpoint, so the bug ships. It is an error for a linear
    or MoE layer, or a block that builds them, on the text decoder's path. It is a note
    where vLLM's own convention keeps the layer unquantized on purpose: an MoE router
    (`GateLinear`), a layer whose `params_dtype` the model fixes, a vision or audio tower
    or its projector (by its name, or built under vLLM's `_mark_tower_model`), an
    embedding (only compressed-tensors schemes that name one quantize it), the LM head
    (quantized only by the configs that opt in; 41 of vLLM's model files build it
    without). It is a warning for `Attention` (a checkpoint's KV-cache scales are not
    loaded), a layer that gets no
    `prefix` either (built as a plain, unnamed layer), a class off the decoder's path,
    and other layers. Passing `quant_config=None` says the layer stays unquantized on
    purpose and is never reported.

    ## Example
    ```python
    self.o_proj = RowParallelLinear(hidden, hidden, bias=False, prefix=f"{prefix}.o_proj")
    ```

    Use instead:
    ```python
    self.o_proj = RowParallelLinear(
        hidden, hidden, bias=False, quant_config=quant_config, prefix=f"{prefix}.o_proj"
    )
    ```
    """

    code = "PFX405"
    triggers = (PREFIX_CALLS,)
    applies_to = CONTRACT

    VALID = [
        example(
            """
class Attn(nn.Module):
    def __init__(self, hidden, quant_config=None, prefix: str = ""):
        super().__init__()
        self.o_proj = RowParallelLinear(hidden, hidden, quant_config=quant_config,
                                        prefix=f"{prefix}.o_proj")
        self.gate = RowParallelLinear(hidden, 4, quant_config=None, prefix=f"{prefix}.gate")
"""
        ),
        example(
            """
class Head(nn.Module):
    def __init__(self, hidden, prefix: str = ""):
        super().__init__()
        # no quantization config in reach: nothing to pass
        self.o_proj = RowParallelLinear(hidden, hidden, prefix=f"{prefix}.o_proj")
"""
        ),
    ]
    INVALID = [
        Invalid(
            example(
                """
class Attn(nn.Module):
    def __init__(self, hidden, quant_config=None, prefix: str = ""):
        super().__init__()
        self.o_proj = RowParallelLinear(
            hidden, hidden, bias=False, prefix=f"{prefix}.o_proj"
        )
"""
            ),
            line=5,
            contains="`RowParallelLinear`",
            fixed="""
class Attn(nn.Module):
    def __init__(self, hidden, quant_config=None, prefix: str = ""):
        super().__init__()
        self.o_proj = RowParallelLinear(
            hidden, hidden, bias=False, prefix=f"{prefix}.o_proj", quant_config=quant_config
        )
""",
        ),
        Invalid(
            example(
                """
class Model(nn.Module):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        config = vllm_config.model_config.hf_config
        self.lm_head = ParallelLMHead(
            config.vocab_size,
            config.hidden_size,
            prefix=maybe_prefix(prefix, "lm_head"),
        )
"""
            ),
            line=6,
            # a note (vLLM builds many heads so): no fix, ``--fix`` changes only what is shown
            contains="vllm_config.quant_config",
        ),
    ]

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self._decoder = DecoderClasses()

    def visit_Call(self, node: cst.Call, callee: str | None) -> None:
        self._decoder.note_call(self, callee)

    def visit_Name(self, node: cst.CSTNode, name: str) -> None:
        self._decoder.note_name(self, name)

    def visit_FunctionDef(self, node: cst.FunctionDef, class_node: cst.ClassDef | None) -> None:
        self._decoder.note_function(self, node)

    def leave_Module(self) -> None:
        reach = Reach()
        decoder: set[str] | None = None
        for site in self.ctx.prefixes.sites:
            if is_layer_site(site) and not omitted(site, QUANT_CONFIG):
                decoder = self._cut_off(site, reach, decoder)
                continue
            if not is_layer_site(site):
                continue
            expression = reach.expression(site, QUANT_CONFIG, self._attributes(site))
            if expression is None:
                continue
            if decoder is None:
                decoder = self._decoder.compute(self)
            severity, why = self._judge(site, decoder)
            self.report(
                site.call,
                f"`{site.callee}` is built without `quant_config` while `{expression}` is in "
                f"reach{why}",
                severity=severity,
                site=site,
                fix=lambda site=site, e=expression: config_fix(site, QUANT_CONFIG, e),
            )

    def _cut_off(self, site: Site, reach: Reach, decoder: set[str] | None) -> set[str] | None:
        """A class of this file that takes no ``quant_config``, built where one is in
        reach: the layers it builds can never get it (the third blind corpus's miss)."""
        inner = [
            s
            for s in cut_off(self.ctx.prefixes.sites, site, QUANT_CONFIG)
            if reach.expression(s, QUANT_CONFIG, self._attributes(s)) is None
        ]
        expression = reach.expression(site, QUANT_CONFIG, self._attributes(site)) if inner else None
        if expression is None:
            return decoder
        decoder = self._decoder.compute(self) if decoder is None else decoder
        # As severe as the worst of the layers left without it, judged where they are
        # built (a router, a tower's projector: vLLM's convention), never above the block.
        severity, why = self._judge(site, decoder)
        worst = max((self._judge(s, decoder) for s in inner), key=lambda j: _RANK[j[0]])
        if _RANK[worst[0]] < _RANK[severity]:
            severity, why = worst
        if self._unquantized_on_purpose(site.callee):
            severity, why = (
                Severity.NOTE,
                (
                    f" (a note: `{site.callee}` passes `quant_config=None` to a layer it builds, "
                    "so it keeps its layers unquantized on purpose)"
                ),
            )
        layers = ", ".join(sorted({f"`{s.callee}`" for s in inner}))
        advice = (
            ""
            if severity is Severity.NOTE
            else f"; give `{site.callee}` a `quant_config` parameter and pass it on"
        )
        self.report(
            site.call,
            f"`{site.callee}` takes no `quant_config`, so the {layers} it builds never get one, "
            f"while `{expression}` is in reach here{why}{advice}{other_vllm(self.ctx)}",
            severity=severity,
            site=site,
        )
        return decoder

    def _unquantized_on_purpose(self, callee: str) -> bool:
        """The class passes ``quant_config=None`` to a layer it builds: its author chose."""
        return any(
            s.scope.class_node is not None
            and s.scope.class_node.name.value == callee
            and any(
                a.keyword is not None
                and a.keyword.value == QUANT_CONFIG
                and isinstance(a.value, cst.Name)
                and a.value.value == "None"
                for a in s.call.args
            )
            for s in self.ctx.prefixes.sites
        )

    def _attributes(self, site: Site) -> set[str]:
        cls = site.scope.class_node
        summary = self.ctx.summary.classes.get(cls.name.value) if cls is not None else None
        return summary.attributes if summary is not None else set()

    def _judge(self, site: Site, decoder: set[str]) -> tuple[Severity, str]:
        """The severity, by what the callee is and where it is built, and why."""
        resolver, summary = self.ctx.resolver, self.ctx.summary
        symbols = callee_symbols(resolver, summary, site)
        if not symbols:
            return Severity.WARNING, " (a warning: what it builds cannot be read)"
        if any(owns_engine_cache(resolver, s) for s in symbols):
            return Severity.WARNING, (
                " (a warning: its KV-cache quantization method is never resolved, so a "
                "checkpoint's KV-cache scales are not loaded and its KV-cache scheme is ignored)"
            )
        vocabulary = {vocabulary_layer(resolver, s) for s in symbols}
        if "head" in vocabulary:
            # 41 of vLLM 0.32's model files build their head without it: vLLM's own
            # convention, as for embeddings; a default-shown warning there was noise
            return Severity.NOTE, (
                " (a note: an LM head is quantized only by the configs that opt in, such "
                "as GPTQ's and AWQ's `lm_head` quantization, and vLLM builds many heads "
                "without `quant_config`)"
            )
        if "embedding" in vocabulary:
            return Severity.NOTE, (
                " (a note: an embedding is quantized only by compressed-tensors schemes that "
                "name it, and vLLM builds most embeddings without `quant_config`)"
            )
        direct = any(quantized_layer(resolver, s) for s in symbols)
        if not direct and not any(
            builds_layer(resolver, s, lambda s: quantized_layer(resolver, s)) for s in symbols
        ):
            return Severity.WARNING, (
                " (a warning: it builds no layer a quantized checkpoint is known to quantize)"
            )
        what = "it builds" if direct else "the linear or MoE layers it builds stay"
        broken = (
            f": {what} unquantized, so a quantized checkpoint's tensors for it "
            "(`weight_scale`, `qweight`) have no parameter, or are read into a BF16 layer"
        )
        convention = self._by_convention(site, symbols, decoder)
        if convention is not None:
            return Severity.NOTE, f"{broken} (a note: {convention})"
        if site.prefix_arg is None:
            return Severity.WARNING, (
                f"{broken} (a warning: it gets no `prefix` either, so the model builds it as "
                "a plain layer no quantization config can name, as vLLM builds some auxiliary "
                "projections such as MTP's `eh_proj`)"
            )
        top = next((a for a in site.anchors if isinstance(a, cst.ClassDef)), None)
        if top is not None and top.name.value not in decoder:
            return Severity.WARNING, (
                f"{broken} (a warning: `{top.name.value}` is not on the text decoder's path)"
            )
        return Severity.ERROR, broken

    def _by_convention(self, site: Site, symbols: list[Symbol], decoder: set[str]) -> str | None:
        """Why vLLM's own convention leaves this layer unquantized on purpose, or None."""
        if all(is_router(s) for s in symbols):
            return (
                "an MoE router gate; vLLM builds its routers unquantized and quantized "
                "checkpoints keep them in full precision"
            )
        if any(a.keyword is not None and a.keyword.value == "params_dtype" for a in site.call.args):
            return "its `params_dtype` is chosen by the model, which keeps its weights as they are"
        top = next((a for a in site.anchors if isinstance(a, cst.ClassDef)), None)
        tower = (
            top.name.value
            if top is not None and top.name.value not in decoder and is_tower(top.name.value)
            else next((s.name for s in symbols if is_tower(s.name)), None)
        )
        if tower is not None or any(_marks_tower(a) for a in site.anchors):
            shown = (
                f"`{tower}` is" if tower is not None else "it is built under `_mark_tower_model`:"
            )
            return (
                f"{shown} a vision or audio tower or its projector, which vLLM leaves "
                "unquantized in many models"
            )
        return None


def _marks_tower(node: cst.CSTNode) -> bool:
    """``with self._mark_tower_model(vllm_config, ...):``, vLLM's own mark of the
    multimodal towers a model builds."""
    if not isinstance(node, cst.With):
        return False
    return any(
        isinstance(item.item, cst.Call) and (dotted_name(item.item.func) or "").endswith(TOWER_MARK)
        for item in node.items
    )
