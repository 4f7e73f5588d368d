"""``checks.findings_of``: the later stages' typed facts reach the one unit that reads each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

from prefixlint.introspect.checks import findings_of
from prefixlint.introspect.checks.base import FactCheck
from prefixlint.introspect.finding import Finding


@dataclass(frozen=True)
class _Dropped:
    name: str
    site: tuple[str, int]


@dataclass(frozen=True)
class _Raised:
    site: tuple[str, int]


class _DroppedCheck(FactCheck):
    code = "PFX701"
    reads: ClassVar[tuple[type, ...]] = (_Dropped,)

    def findings(self, facts: list[Any]) -> list[Finding]:
        names = ", ".join(f.name for f in facts)  # one call with every fact it reads
        return [Finding(self.code, "error", names, *facts[0].site)]


class _RaisedCheck(FactCheck):
    code = "PFX604"
    reads: ClassVar[tuple[type, ...]] = (_Raised,)

    def findings(self, facts: list[Any]) -> list[Finding]:
        return [Finding(self.code, "error", "raised", *f.site) for f in facts]


def test_each_fact_reaches_the_unit_that_reads_its_class() -> None:
    facts = [_Raised(("m.py", 3)), _Dropped("a", ("m.py", 9)), _Dropped("b", ("m.py", 9))]
    found = findings_of(facts, (_DroppedCheck(), _RaisedCheck()))
    assert [(f.code, f.line, f.message) for f in found] == [
        ("PFX701", 9, "a, b"),
        ("PFX604", 3, "raised"),
    ]


def test_a_fact_no_unit_reads_is_a_programming_error() -> None:
    with pytest.raises(TypeError, match="_Raised"):
        findings_of([_Raised(("m.py", 1))], (_DroppedCheck(),))
    assert findings_of([], (_DroppedCheck(),)) == []


def test_every_unit_declares_stages_the_pipeline_runs_in_order() -> None:
    """Each unit says which stages' results it reads; the pipeline runs the stages the
    units name, in the order ``checks.base.STAGES`` gives."""
    from prefixlint.introspect.builds import pipeline
    from prefixlint.introspect.checks import CHECKS
    from prefixlint.introspect.checks.base import STAGES

    run = [stage.__name__.strip("_").replace("_", "-") for stage in pipeline.STAGES]
    assert run == list(STAGES)
    for check in CHECKS:
        assert check.stages and set(check.stages) <= set(STAGES), type(check).__name__
    dry_runs = {c.code for c in CHECKS if "dry-runs" in c.stages}
    assert dry_runs == {"PFX600", "PFX701", "PFX702", "PFX703"}
