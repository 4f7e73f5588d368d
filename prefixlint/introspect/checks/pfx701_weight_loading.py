"""PFX701: the checkpoint dry-run: tensors the loader never loads, parameters it never
writes, a loader that raises."""

from __future__ import annotations

from typing import ClassVar

from prefixlint.introspect.checks.base import Case, Check


class WeightLoading(Check):
    """## What it does
    Streams the reference checkpoint of the config (the transformers class's names, the
    model type's class, or a layout derived from the model's own tables; with
    `--checkpoint` the real one's headers) through the model's own `load_weights` on meta
    tensors that remember their source, and reports what stayed undone. The stream and
    its judgement live in `dryrun/` (`streaming.py`, `weights.py`; `selflayout.py` and
    `checkpoint_run.py` for the other layouts), each reported at the model's line.

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
