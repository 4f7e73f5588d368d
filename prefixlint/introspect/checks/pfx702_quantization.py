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
