"""Every rule's VALID and INVALID examples, run by one parametrized test (Fixit's shape)."""

from __future__ import annotations

import pytest

from prefixlint.codes import FIXABLE
from prefixlint.diagnostic import Severity
from prefixlint.rules import ALL_RULES
from prefixlint.static.fix import apply_fixes
from prefixlint.static.rule import Invalid, LintRule, example
from prefixlint.static.testing import lint_source

VALID_CASES = [
    pytest.param(rule, code, id=f"{rule.code}-valid-{i}")
    for rule in ALL_RULES
    for i, code in enumerate(rule.VALID)
]
INVALID_CASES = [
    pytest.param(rule, case, id=f"{rule.code}-invalid-{i}")
    for rule in ALL_RULES
    for i, case in enumerate(rule.INVALID)
]


@pytest.mark.parametrize(("rule", "code"), VALID_CASES)
def test_valid(rule: type[LintRule], code: str) -> None:
    found = [d for d in lint_source(code, [rule]) if d.code == rule.code]
    assert found == [], f"{rule.code} fired on valid code: {[d.message for d in found]}"


@pytest.mark.parametrize(("rule", "case"), INVALID_CASES)
def test_invalid(rule: type[LintRule], case: Invalid) -> None:
    found = [d for d in lint_source(case.code, [rule]) if d.code == rule.code]
    assert found, f"{rule.code} did not fire"
    if case.line is not None:
        assert case.file_line() in [d.location.row for d in found], [d.location for d in found]
    if case.contains is not None:
        assert any(case.contains in d.message for d in found), [d.message for d in found]
    # fixes only from findings that are shown: a note (fine by design) never carries one
    assert all(d.fix is None for d in found if d.severity is Severity.NOTE)
    if case.fixed is not None:  # Fixit's expected_replacement: the finding's own fix
        assert all(d.fix is not None for d in found), [d.no_fix for d in found]
        fixed, _ = apply_fixes(case.code, found)
        want = example(case.fixed) if case.header_lines else case.fixed
        assert fixed == want


@pytest.mark.parametrize("rule", [r for r in ALL_RULES if r.code in FIXABLE], ids=lambda r: r.code)
def test_fixable_rule_has_fixed_examples(rule: type[LintRule]) -> None:
    assert any(case.fixed is not None for case in rule.INVALID)


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_rule_is_documented(rule: type[LintRule]) -> None:
    doc = rule.documentation()
    for heading in ("## What it does", "## Why is this bad?", "## Example", "Use instead:"):
        assert heading in doc, f"{rule.code} docstring lacks {heading!r}"
    assert rule.VALID and rule.INVALID, f"{rule.code} needs VALID and INVALID examples"
    assert rule.code.startswith("PFX") and rule.name == rule.name.lower()


def test_codes_are_unique() -> None:
    codes = [r.code for r in ALL_RULES]
    assert len(codes) == len(set(codes))


def test_every_static_code_has_one_rule() -> None:
    from prefixlint.codes import CODES, INTERNAL_ERROR_CODE, STATIC

    # PFX000 is prefixlint's own failure on a file: no rule reports it
    static = [c for c, entry in CODES.items() if entry.phase == STATIC and c != INTERNAL_ERROR_CODE]
    assert static == [r.code for r in ALL_RULES]
    for rule in ALL_RULES:
        assert CODES[rule.code].doc == f"rule:{rule.__module__}:{rule.__name__}"


def test_prefix_mismatch_severity_follows_the_evidence() -> None:
    """PFX302: an error when the mapper maps the prefix's name to the attribute's, a warning
    when only ``load_weights`` bridges them, a note when no ``quant_config`` reaches the
    module (no consumer sees the divergence yet)."""
    from prefixlint.rules.pfx302_prefix_attribute_mismatch import PrefixAttributeMismatch
    from prefixlint.static.rule import example

    def severity(code: str) -> list[str]:
        found = lint_source(code, [PrefixAttributeMismatch])
        return [d.severity.value for d in found if d.code == "PFX302"]

    mapper, loader = PrefixAttributeMismatch.INVALID[:2]
    assert severity(mapper.code) == ["error"]
    assert severity(loader.code) == ["warning"]
    no_quant = example(
        """
class Block(nn.Module):
    def __init__(self, prefix: str = ""):
        super().__init__()
        self.mamba = RowParallelLinear(8, 8, prefix=f"{prefix}.mixer")
"""
    )
    assert severity(no_quant) == ["note"]
    with_quant = no_quant.replace("8, 8, prefix", "8, 8, quant_config=qc, prefix")
    assert severity(with_quant) == ["error"]


def test_sampling_in_a_class_with_its_own_sampler_is_a_note() -> None:
    """PFX404: ``torch.multinomial`` in a model is a leftover (a warning), unless the class
    has taken sampling over on purpose, on evidence: it sets ``prefer_model_sampler``
    (vllm-omni's runner calls ``model.sample`` only then), or its ``sample(logits,
    sampling_metadata)`` uses vLLM's sampler API (as vLLM's own ``hy_v3_mtp.py``) or hands
    the step to an inner model's hook. A ``sample`` over a sampler of its own, left over
    from generation code, is no such evidence."""
    from prefixlint.rules.pfx404_generation_leftover import GenerationLeftover
    from prefixlint.static.rule import example

    leftover = example(
        """
class TalkerForConditionalGeneration(nn.Module):
    def compute_logits(self, hidden_states):
        return torch.multinomial(hidden_states.softmax(-1), 1)
"""
    )

    def with_hook(hook: str, head: str = "") -> str:
        return head + leftover.replace("    def compute_logits", hook + "\n    def compute_logits")

    generation = with_hook(
        "    def sample(self, logits, sampling_metadata=None, top_k=50):\n"
        "        return self.sampler(logits, top_k)\n",
        "class Sampler(nn.Module):\n    def forward(self, logits, top_k):\n"
        "        return logits.topk(top_k)\n",
    )
    vllm_hook = with_hook(
        "    def sample(self, logits, sampling_metadata: SamplingMetadata):\n"
        "        return self.sampler(logits, sampling_metadata)\n",
        "from vllm.v1.sample.metadata import SamplingMetadata\n",
    )
    flagged = with_hook("    prefer_model_sampler = True\n")
    inner = with_hook(
        "    def sample(self, logits, sampling_metadata):\n"
        "        return self.language_model.sample(logits, sampling_metadata)\n"
    )

    def found(code: str) -> list[tuple[str, bool]]:
        return [
            (d.severity.value, "own sampler" in d.message)
            for d in lint_source(code, [GenerationLeftover])
            if d.code == "PFX404"
        ]

    assert found(leftover) == [("warning", False)]
    assert found(generation) == [("warning", False)]
    for deliberate in (vllm_hook, flagged, inner):
        assert found(deliberate) == [("note", True)], deliberate
