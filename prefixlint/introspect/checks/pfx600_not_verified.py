"""PFX600: phase 2 could not build or check the target; nothing was verified."""

from __future__ import annotations

import hashlib
from typing import Any, ClassVar

from prefixlint.introspect.checks.base import Case, FactCheck
from prefixlint.introspect.coverage.sites import UNEXECUTED_SITE
from prefixlint.introspect.finding import Finding, Unverified

_INIT = "        self.config = config\n"


class NotVerified(FactCheck):
    """## What it does
    Says, as a note, what phase 2 could not check and why: a build that failed outside the
    model (config synthesis, a missing package or kernel, a CUDA-only path), a construction
    site no build ran, a dry-run that could not run. The reasons come from
    `verdict/gaps.py` (a build's failure), `coverage/sites.py` (unexecuted sites) and
    `dryrun/` (a layout no loader took); `ConstructionFailed` gives one for a stage too
    small to tell. The stages return what they could not check as `Unverified` facts
    (what, why, the fix); this unit alone words them.

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
    reads: ClassVar[tuple[type, ...]] = (Unverified,)

    def findings(self, facts: list[Any]) -> list[Finding]:
        return [self.note(f) for f in facts]

    def note(self, fact: Unverified) -> Finding:
        """The note of one fact, in the sentence its ``kind`` says."""
        words = getattr(self, f"_{fact.kind}")(fact)
        group = UNEXECUTED_SITE if fact.kind == "site" else ""
        message = f"not verified: {words}"
        # which note it is, for the code that merges notes (``check_introspect``): a digest
        # of the fact's own fields, never of the words
        fields = (fact.kind, fact.what, fact.cause, fact.advice, fact.tried, fact.category)
        identity = repr((*fields, fact.synthesised, fact.layouts)).encode()
        facts = {"note": hashlib.sha256(identity).hexdigest()[:16]}
        layouts = list(fact.layouts)
        return Finding(self.code, "note", message, *fact.site, layouts, group=group, facts=facts)

    @staticmethod
    def _stage(fact: Unverified) -> str:
        words = f"{fact.what}: {fact.cause}" if fact.what else fact.cause
        return f"{words}; {fact.advice}" if fact.advice else words

    @staticmethod
    def _build(fact: Unverified) -> str:
        where = f" for {', '.join(fact.layouts)}" if fact.layouts else ""
        if fact.category == "config-gap":
            blame = "the synthesised config" if fact.synthesised else "the config"
        else:
            blame = "this machine"
        return (
            f"building `{fact.what}`{where} failed because of {blame}, not the model "
            f"({fact.cause}); {fact.advice}"
        )

    @staticmethod
    def _site(fact: Unverified) -> str:
        return (
            f"no build executed this construction site (`{fact.what}(...)`), so phase 2 did "
            f"not check the prefix it passes; {fact.cause} ({fact.tried} variants tried). A "
            "config that builds it (`--config`) would"
        )
