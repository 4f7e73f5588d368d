"""PFX604: the class raised, hung or crashed while being built for a layout."""

from __future__ import annotations

import linecache
from typing import Any, ClassVar

from prefixlint.codes import NOT_VERIFIED_CODE
from prefixlint.introspect.checks.base import (
    Case,
    FactCheck,
    FailureCheck,
    Subject,
    config_value,
    first_line,
    model_frame,
)
from prefixlint.introspect.coverage.numbering import DraftListIndexed
from prefixlint.introspect.finding import Finding
from prefixlint.introspect.verdict import own


class ConstructionFailed(FailureCheck, FactCheck):
    """## What it does
    A build that raised in the model's own code, for a reason no earlier check of the table
    explains, is reported at the innermost frame of the model's file, once per site (the
    layouts it failed in are listed). At pp > 1 with one layer per stage it is a "not
    verified" note instead (PFX600): a small config's stage may lack a kind of layer every
    stage of a real checkpoint holds; not when no layer was built before the raise, nor
    when the unsplit model raised the same, nor when the model read an attribute of a
    `PPMissingLayer` (a layer another stage owns, used as if built).

    With a synthesised config, a failure of the kind a made-up value causes (a
    `ValueError`, an `AssertionError`, ...) is a PFX600 note (`verdict/gaps.py`) unless the
    evidence says it is the model's (`verdict/own.py`): every layout failed at one `raise`
    or `assert` statement of the model's file, and either no condition led there (a `raise`
    with no `if`/`while` around it in the model's innermost frames), or every condition
    reads only config attributes directly (`config.x`, `getattr(config, "x")`) and the same
    statement raised again with each of them changed to what a checkpoint could hold (each
    integer it is compared with and one past it, never below 1; a flag flipped). A test of
    a parameter, a local or `self` (which may hold a config value), a raise under `except`,
    a loop or `match`, and an error an operation raised (an index, a `None`) stay notes.
    Two more kinds of evidence make such a failure the model's (issue 40): the same config
    built every unsplit layout and only pipeline stages failed, in the model's own frames;
    or the class is an out-of-tree one and vLLM's own class of its architecture builds
    with the same config (unless the failure is a `raise`/`assert` on a config value, or
    reads a config attribute the config lacks). The hub (files downloaded offline) and an
    unset environment variable are notes of this machine, with their own advice.

    Importing the model's module: a module-level raise in its file, and an import of a
    module its own package lacks (`from .layerz import ...`), are PFX604 at that line; a
    top-level package that is not installed here (an optional dependency) is a note.

    A draft whose per-layer list (one entry per draft layer, as its checkpoint's config
    holds it: `coverage/numbering.py` builds it so) is indexed with a layer's global
    number raises `IndexError` at that subscript: PFX604 there.

    ## Details
    Reported at the innermost frame in the model's own file. A hang or a crash of the
    worker process is reported too, never a dead run.

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

    reads: ClassVar[tuple[type, ...]] = (DraftListIndexed,)

    def findings(self, facts: list[Any]) -> list[Finding]:
        return [self._indexed(f) for f in facts]

    def _indexed(self, fact: DraftListIndexed) -> Finding:
        message = (
            f"building the draft failed with `{fact.attr}` holding one entry per draft layer "
            f"({fact.entries}, as a draft checkpoint's config.json holds it): IndexError: "
            f"{fact.error}. vLLM numbers a draft's layers on from the target's, so a "
            "per-layer list of the draft's config is indexed with the layer's position in the "
            "draft (its number minus the target's layer count), not with its number"
        )
        return Finding(
            self.code,
            "error",
            message,
            *fact.site,
            layouts=[fact.layout],
            variants=[fact.variant],
            group=f"draft-numbering:{fact.attr}",
        )

    def judge(self, build: Any, subject: Subject) -> Finding | None:
        layout = build.layout
        site, what = failure_key(build, subject.class_site)
        # one finding per site: the layouts it failed in are said by the merge
        message = f"building the model failed: {what}"
        n_layers = config_value(subject.hf, "num_hidden_layers") or 0
        small_stage = layout.pp > 1 and isinstance(n_layers, int) and n_layers // layout.pp < 2
        small_stage = small_stage and _layers_built(build)
        # a layer another stage owns used as if built: more layers per stage would not help
        small_stage = small_stage and not own.stage_placeholder(build.error)
        if small_stage and (site, what) not in subject.unstaged_failures:
            # one layer per stage: a stage of a small config may lack a kind of layer a real
            # checkpoint's stages all hold (a MoE model whose stage 0 is the dense layer);
            # a failure the unsplit model has too is not the stage's
            message = (
                f"not verified at {layout.name}: the config's {n_layers} layers leave one per "
                f"stage, and the build failed ({what}); a config with more layers (`--config`) "
                "would tell"
            )
            return Finding(NOT_VERIFIED_CODE, "note", message, *site, group=message)
        return Finding(self.code, "error", message, *site, group=message)


def _layers_built(build: Any) -> bool:
    """Some module of a numbered layer (``layers.0``) was built before the failure: a stage
    that failed before any layer cannot blame what its layers lack."""
    return any(
        any(part.isdigit() for part in str(r.prefix or "").split("."))
        for r in build.recorder.records.values()
    )


def failure_key(build: Any, class_site: tuple[str, int]) -> tuple[tuple[str, int], str]:
    """Where a failed build failed (the model's frame, else the class) and what it raised,
    as ``judge`` says them."""
    file, line = model_frame(build.error_tb, build.recorder.external)
    what = f"{type(build.error).__name__}: {first_line(build.error) or _source(file, line)}"
    return ((file, line) if file else class_site), what.rstrip(": ")


def _source(file: str, line: int) -> str:
    """The statement's line in the model's file, for an error that says nothing itself (a
    bare ``assert``)."""
    text = linecache.getline(file, line).strip() if file else ""
    return f"`{text[:200]}`" if text else ""
