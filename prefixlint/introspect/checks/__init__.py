"""Phase 2's checks, one unit per file (``pfxNNN_<name>.py``): a class whose docstring is
its documentation and whose ``examples`` (``base.Case``) ``tests/test_introspect_checks.py``
runs, as ``tests/test_rules.py`` runs the rules'. ``CHECKS`` is the one ordered table;
``check_build`` runs its failure, build and target checks over a target's builds.

Exports: ``CHECKS``, ``check_build``, ``findings_of`` (typed facts of the later stages to
their units' findings); ``base`` (``Case``, the check kinds, ``Findings``,
``View``, ``class_site``, ``config_value``); ``packed`` (PFX606's other direction) and
``pfx608_engine_start`` (called by the pipeline where vLLM validates).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prefixlint.introspect.checks.base import (
    BuildCheck,
    Check,
    FactCheck,
    FailureCheck,
    Findings,
    Subject,
    TargetCheck,
    View,
)
from prefixlint.introspect.checks.pfx600_not_verified import NotVerified
from prefixlint.introspect.checks.pfx601_prefix_path import PrefixPath
from prefixlint.introspect.checks.pfx602_duplicate_name import DuplicateLayerName, DuplicateLeafName
from prefixlint.introspect.checks.pfx603_heads_not_divisible import HeadsNotDivisible
from prefixlint.introspect.checks.pfx604_construction_failed import (
    ConstructionFailed,
    failure_key,
)
from prefixlint.introspect.checks.pfx605_pipeline_stage import PipelineStage
from prefixlint.introspect.checks.pfx606_interface import PackedMappingKeys, PipelineInterface
from prefixlint.introspect.checks.pfx607_per_rank_heads import PerRankHeads
from prefixlint.introspect.checks.pfx608_engine_start import EngineStart
from prefixlint.introspect.checks.pfx609_output_mismatch import OutputMismatch
from prefixlint.introspect.checks.pfx701_weight_loading import WeightLoading
from prefixlint.introspect.checks.pfx702_quantization import Quantization
from prefixlint.introspect.checks.pfx703_lora import LoraTargets
from prefixlint.introspect.finding import Finding

# The order matters for failures only: the first failure check that answers judges the
# build (a duplicate name explains a raise before the head counts, the head counts before
# "construction failed").
CHECKS: tuple[Check, ...] = (
    DuplicateLayerName(),
    HeadsNotDivisible(),
    ConstructionFailed(),
    PrefixPath(),
    DuplicateLeafName(),
    PipelineStage(),
    PerRankHeads(),
    PipelineInterface(),
    PackedMappingKeys(),
    EngineStart(),
    OutputMismatch(),
    WeightLoading(),
    Quantization(),
    LoraTargets(),
    NotVerified(),
)


def check_build(
    cls: type | None,
    model_config: Any,
    builds: list[Any],
    complete: bool = True,
    draft: Any = None,
) -> list[Finding]:
    """Every check of ``CHECKS`` over a target's builds, one finding per construction site.
    ``complete``: every construction site ran in some build (a packed key no build made is
    then a finding; otherwise it is not verified). ``draft``: a speculative draft's
    ``DraftPolicy``, which the checks consult."""
    out = Findings()
    subject = Subject.of(cls, model_config, complete)
    subject.draft = draft
    subject.unstaged_failures = {
        failure_key(b, subject.class_site)
        for b in builds
        if b.error is not None and b.layout.pp == 1
    }
    for build in builds:
        if build.error is not None:
            for check in CHECKS:
                finding = check.judge(build, subject) if isinstance(check, FailureCheck) else None
                if finding is not None:
                    out.add(finding, build)
                    break
            continue
        view = View(build)
        for check in CHECKS:
            if isinstance(check, BuildCheck):
                check.check(view, subject, out)
    built = [b for b in builds if b.error is None]
    for check in CHECKS:
        if isinstance(check, TargetCheck):
            check.check(built, subject, out)
    return out.finish()


def findings_of(facts: Iterable[object], checks: tuple[Check, ...] = CHECKS) -> list[Finding]:
    """The findings of a stage's typed facts, as stubtest dispatches each comparison: every
    fact goes to the one ``FactCheck`` that reads its class, each unit called once with its
    own facts (in their order), the units in the table's order. A fact no unit reads is a
    programming error."""
    readers = [c for c in checks if isinstance(c, FactCheck)]
    grouped: dict[int, list[object]] = {}
    for fact in facts:
        unit = next((i for i, c in enumerate(readers) if isinstance(fact, c.reads)), None)
        if unit is None:
            raise TypeError(f"no phase-2 check reads {type(fact).__name__}")
        grouped.setdefault(unit, []).append(fact)
    out: list[Finding] = []
    for unit, own in sorted(grouped.items()):
        out += readers[unit].findings(own)
    return out
