"""PFX702: the quantization dry-run: a layer a quantized checkpoint's config would treat
otherwise than its name says."""

from __future__ import annotations

from typing import ClassVar

from prefixlint.introspect.checks.base import Case, Check


class Quantization(Check):
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
