"""PFX600: phase 2 could not build or check the target; nothing was verified."""

from __future__ import annotations

from typing import ClassVar

from prefixlint.introspect.checks.base import Case, Check

_INIT = "        self.config = config\n"


class NotVerified(Check):
    """## What it does
    Says, as a note, what phase 2 could not check and why: a build that failed outside the
    model (config synthesis, a missing package or kernel, a CUDA-only path), a construction
    site no build ran, a dry-run that could not run. The reasons come from
    `verdict/gaps.py` (a build's failure), `coverage/sites.py` (unexecuted sites) and
    `dryrun/` (a layout no loader took); `ConstructionFailed` gives one for a stage too
    small to tell.

    ## Details
    A note, never a finding against the model: the build failed for a reason outside the
    model under check (config synthesis, a missing package or kernel, a CUDA-only path,
    no torch/vLLM in this environment). The message says why and what would fix it (for
    example `--config path/to/config.json`). It does not fail the run unless `--strict`
    is given.

    ## Why is this bad?
    It is not: it says where a pass would be a guess, with the fix (`--config`, a GPU
    machine, a package).

    ## Example
    A model that imports `cutlass` (a CUDA-only package) at construction.

    ## Fix
    What the note names.
    """

    code = "PFX600"
    examples: ClassVar[tuple[Case, ...]] = (
        Case(
            "LlamaForCausalLM",
            _INIT,
            _INIT + "        import cutlass  # noqa\n",
            "class LlamaForCausalLM",
            "note",
            tp=(1, 2),
        ),
    )
