"""PFX701: the checkpoint dry-run: tensors the loader never loads, parameters it never
writes, a loader that raises."""

from __future__ import annotations

from typing import Any, ClassVar

from prefixlint.introspect.checks import pfx701_checkpoint
from prefixlint.introspect.checks.base import Case, FactCheck
from prefixlint.introspect.finding import Finding


class WeightLoading(FactCheck):
    """## What it does
    Streams the reference checkpoint of the config (the transformers class's names, the
    model type's class, or a layout derived from the model's own tables; with
    `--checkpoint` the real one's headers) through the model's own `load_weights` on meta
    tensors that remember their source, and reports what stayed undone. The stream and
    its judgement live in `dryrun/` (`streaming.py`, `weights.py`; `selflayout.py` and
    `checkpoint_run.py` for the other layouts), each reported at the model's line.

    ## Details
    The reference `transformers` class of the same config is built on the meta device;
    its `state_dict()` as `save_pretrained` writes it (tied copies dropped,
    transformers' weight conversions reverted) is what a checkpoint holds. Each tensor
    is streamed, as a meta tensor of the reference shape, through the model's own
    `load_weights` (mapper, stacked-params mapping, tie branch, skips included), and
    every write into a parameter is recorded with the region it covers. Reported: a
    tensor never loaded (at the `load_weights` that drops it), a parameter or a shard of
    a stacked parameter never written (at the line that built the module, or at the
    mapping entry that sends another tensor into its shard), and a `load_weights` that
    raises on a name. Where there is no reference class (remote code, a vLLM-only
    architecture, a plugin), the layout comes from the class of the config's model type,
    else from the model itself (its parameters back through its stacked-params tables,
    mappers and `packed_modules_mapping`); a loader that renames in code is asked which
    names it takes (its own constant renamings undone, a shared segment left out, a
    fused tensor read whole). On such a layout a parameter left unwritten is a PFX600
    note (not verified), the head's skip a warning, a `load_weights` whose own code
    fails an error. Where a weight loader needs real data, or refuses the whole layout,
    a PFX600 note says so; names the model's own tables declare (a part its mapper's
    stacked entries, written or built, a stacked-params table or
    `packed_modules_mapping` stack into a fused layer it builds) are never another
    layout: a loader that refuses them while every other name loads is an error at its
    line. Runs on the tp=1 build; `--no-dryrun` turns it off. With `--checkpoint` (a
    folder or hub id), the checkpoint's own tensors, read from its safetensors headers,
    are streamed instead, through the model built under its quantization config; a
    quantized tensor written into a parameter of another kind of dtype (fp8 values cast
    into a bfloat16 weight) is reported too.

    ## Why is this bad?
    A tensor never loaded leaves a parameter random; a loader that raises stops the load.

    A loader that refuses names the model's own tables say its checkpoint holds (a part
    that its mapper's stacked entries or `packed_modules_mapping` stack into a fused layer
    it builds) is broken, not fed another format: an error at its line, naming the parts
    and the table that declares each (`weights.declared_names`).

    ## Example
    A decoder layer that stores its MLP as `self.ffn` while checkpoints name it `mlp`.
    A mapper without its `".gate_proj": (".gate_up_proj", 0)` entry, or assigned again
    below in the class body without its stacked entries, while `packed_modules_mapping`
    still says `"gate_up_proj": ["gate_proj", "up_proj"]`.

    ## Fix
    Map the checkpoint's names in `load_weights` (or `hf_to_vllm_mapper`), or name the
    attribute as the checkpoint does; keep one `hf_to_vllm_mapper` per class, with every
    stacked entry.
    """

    code = "PFX701"
    stages: ClassVar[tuple[str, ...]] = ("dry-runs",)
    examples: ClassVar[tuple[Case, ...]] = (
        Case(
            "LlamaDecoderLayer",
            "        self.mlp = LlamaMLP(",
            "        self.ffn = LlamaMLP(",
            "self.gate_up_proj = MergedColumnParallelLinear(",
            at_cls="LlamaMLP",
        ),
        Case(
            "LlamaModel",
            '            ".gate_proj": (".gate_up_proj", 0),\n',
            "",
            "return loader.load_weights(weights, mapper=self.hf_to_vllm_mapper)",
        ),
    )
    # a real checkpoint's casts and partial loads (``pfx701_checkpoint.py``)
    reads: ClassVar[tuple[type, ...]] = pfx701_checkpoint.READS

    def findings(self, facts: list[Any]) -> list[Finding]:
        return pfx701_checkpoint.findings(facts)
