"""PFX701's words for what a real checkpoint's dry-run (``--checkpoint``) observes beyond
the stream's coverage (``dryrun/realquant.py``, ``dryrun/checkpoint_run.py``): a quantized
tensor cast into a parameter of another kind of dtype, a tensor only part of which is
loaded. ``WeightLoading`` (``pfx701_weight_loading.py``) reads these facts (``READS``) and
hands them here."""

from __future__ import annotations

from typing import Any

from prefixlint.codes import CHECKPOINT_COVERAGE_CODE
from prefixlint.introspect.checks.base import by_site_alike, more_like_it
from prefixlint.introspect.dryrun.quantfacts import CastWrite, PartlyLoaded
from prefixlint.introspect.finding import Finding

READS: tuple[type, ...] = (CastWrite, PartlyLoaded)


def findings(facts: list[Any]) -> list[Finding]:
    """One error per site and kind (the first layer's, with how many more say the same);
    ``facts`` names the tensor (``subject``: a draft's shared head softens it)."""
    out = []
    for group in by_site_alike(facts):
        fact = group[0]
        if isinstance(fact, CastWrite):
            said = (
                f"checkpoint tensor `{fact.tensor}` ({fact.dtype}) is written into "
                f"`{fact.param}` ({fact.param_dtype}): the stored values are cast, not "
                "dequantized"
            )
            kind = "cast"
        else:
            where = ", ".join(f"`{n}`" for n in fact.into) or "the model"
            said = (
                f"only {fact.loaded} of the {fact.held} elements of checkpoint tensor "
                f"`{fact.tensor}` are loaded (into {where}): the parameter is smaller than "
                "the checkpoint's tensor, and `load_weights` drops the rest silently"
            )
            kind = "partly-loaded"
        facts_of = {"kind": kind, "tensor": fact.tensor, "subject": fact.tensor}
        finding = Finding(CHECKPOINT_COVERAGE_CODE, "error", said, *fact.site, facts=facts_of)
        finding.message += more_like_it(group)
        out.append(finding)
    return out
