"""``check_introspect.merge_classes``: the findings of a file's classes merged by what they
are (their data), never by their words (issue 37)."""

from __future__ import annotations

from dataclasses import asdict

from prefixlint.check_introspect import merge_classes
from prefixlint.diagnostic import Diagnostic, Position, Severity
from prefixlint.introspect import to_diagnostics
from prefixlint.introspect.checks.pfx600_not_verified import NotVerified
from prefixlint.introspect.coverage.sites import UNEXECUTED_SITE
from prefixlint.introspect.finding import Unverified


def _at(code: str, line: int, message: str, file: str = "m.py", **data: object) -> Diagnostic:
    pos = Position(line, 1)
    severity = Severity.NOTE if code == "PFX600" else Severity.ERROR
    return Diagnostic(code, message, severity, file, pos, pos, data=dict(data))


def test_one_finding_per_code_and_place_the_full_path_kept() -> None:
    inner = _at("PFX601", 5, "a much longer message about `layers.0`", path="layers.0")
    outer = _at("PFX601", 5, "short `model.layers.0`", path="model.layers.0")
    other = _at("PFX601", 9, "x", path="layers.1")
    assert merge_classes([inner, outer, other], set()) == [outer, other]
    assert merge_classes([outer, inner], set()) == [outer]


def test_notes_are_one_when_their_facts_are() -> None:
    lora = _at("PFX600", 3, "not verified: LoRA", note="a1")
    same = _at("PFX600", 3, "other words, same fact", note="a1")
    dryrun = _at("PFX600", 3, "not verified: LoRA", note="b2")
    bare = [_at("PFX600", 3, "no facts"), _at("PFX600", 3, "no facts")]  # each stands alone
    merged = merge_classes([lora, same, dryrun, *bare], set())
    assert len(merged) == 4 and lora in merged and dryrun in merged and same not in merged
    # without facts, a note's group says which are one (one per code, site and group)
    grouped = [_at("PFX600", 3, "a", group="g"), _at("PFX600", 3, "b", group="g")]
    assert len(merge_classes([*grouped, _at("PFX600", 3, "c", group="h")], set())) == 2


def test_an_unexecuted_site_another_class_ran_is_dropped(tmp_path) -> None:
    file = tmp_path / "m.py"
    file.write_text("x = 1\n")
    note = _at("PFX600", 1, "not verified: no build", str(file), group=UNEXECUTED_SITE)
    assert merge_classes([note], set()) == [note]
    assert merge_classes([note], {(str(file.resolve()), 1)}) == []


def test_the_unit_s_notes_carry_their_fact_to_the_parent() -> None:
    facts = [
        Unverified("LoRA dry-run", "no vLLM", ("m.py", 3)),
        Unverified("checkpoint dry-run", "no vLLM", ("m.py", 3)),
        Unverified("LoRA dry-run", "no vLLM", ("m.py", 3)),
    ]
    found = NotVerified().findings(facts)
    result = {"arch": "A", "target": "m.py", "findings": [asdict(f) for f in found]}
    merged = merge_classes(to_diagnostics(result), set())
    assert sorted(d.message for d in merged) == [
        "not verified: LoRA dry-run: no vLLM",
        "not verified: checkpoint dry-run: no vLLM",
    ]
