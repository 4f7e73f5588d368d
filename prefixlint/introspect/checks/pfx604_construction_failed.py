"""PFX604: the class raised, hung or crashed while being built for a layout."""

from __future__ import annotations

from typing import Any, ClassVar

from prefixlint.introspect.checks.base import (
    Case,
    FailureCheck,
    Subject,
    config_value,
    first_line,
    model_frame,
)
from prefixlint.introspect.finding import Finding


class ConstructionFailed(FailureCheck):
    """## What it does
    A build that raised in the model's own code, for a reason no earlier check of the table
    explains, is reported at the innermost frame of the model's file. At pp > 1 with one
    layer per stage it is a "not verified" note instead (PFX600): a small config's stage
    may lack a kind of layer every stage of a real checkpoint holds.

    ## Why is this bad?
    vLLM cannot build the model for that layout.

    ## Example
    `raise RuntimeError(...)` in `__init__`.

    ## Fix
    Fix the raising line; with a real checkpoint's config (`--config`) when the synthesised
    one is at fault.
    """

    code = "PFX604"
    examples: ClassVar[tuple[Case, ...]] = (
        Case(
            "LlamaForCausalLM",
            "        self.config = config\n",
            '        self.config = config\n        raise RuntimeError("planted")\n',
            'raise RuntimeError("planted")',
            tp=(1, 2),
            pp=(2,),
        ),
    )

    def judge(self, build: Any, subject: Subject) -> Finding | None:
        error, layout = build.error, build.layout
        file, line = model_frame(build.error_tb, build.recorder.external)
        first = first_line(error)
        message = f"building the model failed for {layout.name}: {type(error).__name__}: {first}"
        site = (file, line) if file else subject.class_site
        n_layers = config_value(subject.hf, "num_hidden_layers") or 0
        if layout.pp > 1 and isinstance(n_layers, int) and n_layers // layout.pp < 2:
            # one layer per stage: a stage of a small config may lack a kind of layer a real
            # checkpoint's stages all hold (a MoE model whose stage 0 is the dense layer)
            message = (
                f"not verified at {layout.name}: the config's {n_layers} layers leave one per "
                f"stage, and the build failed ({type(error).__name__}: {first}); a config with "
                "more layers (`--config`) would tell"
            )
            return Finding("PFX600", "note", message, *site, group=message)
        return Finding(self.code, "error", message, *site, group=message)
