"""PFX605: a pipeline stage builds layers it does not own, or misses the head it needs."""

from __future__ import annotations

from typing import Any, ClassVar

from torch import nn

from prefixlint.introspect.checks.base import (
    BuildCheck,
    Case,
    Findings,
    Subject,
    View,
    config_value,
    has_params,
)
from prefixlint.introspect.finding import Finding

# A stage that builds the embedding, the head or the final norm it never uses spends
# memory and nothing else: vLLM's own qwen2_moe.py builds all three on every stage, and
# vLLM's pipeline-parallel test runs Qwen1.5-MoE so and matches one GPU's outputs. A note
# (docs/precision.md), not a warning that fails `--fail-on warning` on vLLM's own files.
MEMORY_ONLY = "note"
_TOWERS = ("vision", "visual", "audio", "tower", "vit", "qformer", "encoder", "experts")
_ALL_STAGES = """        self.start_layer, self.end_layer = 0, config.num_hidden_layers
        self.layers = nn.ModuleList(
            [
                layer_type(vllm_config=vllm_config, prefix=f"{prefix}.layers.{i}")
                for i in range(config.num_hidden_layers)
            ]
        )"""
_MAKE_LAYERS = """        self.start_layer, self.end_layer, self.layers = make_layers(
            config.num_hidden_layers,
            lambda prefix: layer_type(vllm_config=vllm_config, prefix=prefix),
            prefix=f"{prefix}.layers",
        )"""


class PipelineStage(BuildCheck):
    """## What it does
    At pp > 1 checks every stage: layers outside the stage's range must be
    `PPMissingLayer` and the last stage must hold `lm_head` (errors); the embedding off the
    first stage (and the last, for a tied head), `lm_head` or the final norm off the last
    are notes: they cost memory, and nothing breaks (vLLM's own `qwen2_moe.py` builds all
    three on every stage and passes vLLM's pipeline-parallel test).

    ## Details
    At pp > 1 every stage is checked (pp 2 and 4: first, middle and last stages): layers
    outside the stage's range must be `PPMissingLayer` (as `make_layers` builds them)
    and the last stage must hold `lm_head` (errors); the embedding with parameters on a
    stage other than the first (and the last, for a tied head), `lm_head` on a stage
    other than the last, the final norm off the last stage are warnings: they cost
    memory, nothing breaks. Encoder towers (vision, audio) are not split across stages
    and are not checked.

    ## Why is this bad?
    A stage that builds every layer holds the whole model's weights on each GPU; a last
    stage without a head computes no logits.

    ## Example
    `nn.ModuleList([Layer(...) for i in range(n)])` instead of `make_layers`.

    ## Fix
    Build the decoder layers with `make_layers` and the head under `is_last_rank`.
    """

    code = "PFX605"
    examples: ClassVar[tuple[Case, ...]] = (
        Case(
            "LlamaModel",
            _MAKE_LAYERS,
            _ALL_STAGES,
            "layer_type(vllm_config=vllm_config, prefix=f",
            pp=(2,),
        ),
    )

    def check(self, view: View, subject: Subject, out: Findings) -> None:
        layout = view.layout
        try:
            from vllm.distributed.utils import get_pp_indices
        except ImportError:
            return
        n_layers = config_value(subject.hf, "num_hidden_layers")
        if layout.pp <= 1 or not n_layers:
            return
        start, end = get_pp_indices(n_layers, layout.pp_rank, layout.pp)
        first, last = layout.pp_rank == 0, layout.pp_rank == layout.pp - 1
        stage = f"pipeline stage {layout.pp_rank} of {layout.pp}"

        def add(module: nn.Module | None, what: str, group: str, severity: str = "error") -> None:
            file, line = view.site_of(module, subject.cls)
            finding = Finding(self.code, severity, f"{stage} {what}", file, line, group=group)
            out.add(finding, view.build)

        for name, module in _decoder_lists(view.model, n_layers):
            for i, layer in enumerate(module):
                if not start <= i < end and has_params(layer):
                    add(
                        layer,
                        f"owns layers {start}-{end - 1} but builds `{name}.{i}` with parameters; "
                        "build other stages' layers as `PPMissingLayer` (`make_layers` does)",
                        "layers",
                    )
                    break
        _check_stage_ends(view, subject.hf, first, last, add)


def _decoder_lists(model: nn.Module, n_layers: int) -> list[tuple[str, nn.ModuleList]]:
    """The decoder's layer lists: those of a module that keeps ``start_layer`` (what
    ``make_layers`` returns), else lists of the layer count outside encoder towers (vision
    and audio towers are not split across stages; a list of experts is not layers)."""
    lists = [
        (name, m)
        for name, m in model.named_modules()
        if isinstance(m, nn.ModuleList) and len(m) == n_layers
    ]
    owners = {name for name, m in model.named_modules() if hasattr(m, "start_layer")}
    kept = [(n, m) for n, m in lists if (n.rsplit(".", 1)[0] if "." in n else "") in owners]
    if kept or owners:
        return kept
    return [(n, m) for n, m in lists if not any(w in n.lower() for w in _TOWERS)]


def _check_stage_ends(view: View, hf: Any, first: bool, last: bool, add: Any) -> None:
    head = getattr(view.model, "lm_head", None)
    pooling = getattr(type(view.model), "is_pooling_model", False)  # no logits to compute
    if last and head is not None and not has_params(head) and not pooling:
        add(None, "is the last and has no `lm_head` parameters: it computes the logits", "no-head")
    if not last and has_params(head) and not isinstance(head, nn.Identity):
        add(
            head,
            "is not the last but builds `lm_head` with parameters; only the last stage "
            "computes logits (build `PPMissingLayer` elsewhere). It costs a vocabulary-sized "
            "matrix of memory on this stage; nothing breaks",
            "head",
            MEMORY_ONLY,
        )
    tied = bool(config_value(hf, "tie_word_embeddings"))
    for name, module in view.model.named_modules():
        top = name.count(".") <= 1
        embeds = type(module).__name__ == "VocabParallelEmbedding" and top
        if embeds and not first and has_params(module) and not (last and tied):
            add(
                module,
                f"is not the first but builds the embedding `{name}` with parameters; "
                "only the first stage embeds tokens (and the last, for a tied head). It costs "
                "a vocabulary-sized matrix of memory on this stage; nothing breaks",
                "embedding",
                MEMORY_ONLY,
            )
        norm = name.split(".")[-1] in ("norm", "final_layernorm", "ln_f", "norm_f")
        if norm and name.count(".") == 1 and not last and has_params(module):
            add(
                module,
                f"is not the last but builds the final norm `{name}` with parameters; "
                "only the last stage applies it (a little memory; nothing breaks)",
                "norm",
                MEMORY_ONLY,
            )
