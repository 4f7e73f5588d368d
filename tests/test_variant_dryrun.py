"""The checkpoint dry-run of config variants (issue 29): a kept variant that builds
parameters the base build lacks is streamed through ``load_weights`` under its own config.
A copy of the installed vLLM's gemma4.py whose KV-shared layers also build a ``k_norm``
(the checkpoint mapper drops theirs) gets PFX701 at that line; the clean copy none."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from torch import nn

from prefixlint.introspect import introspect
from prefixlint.introspect.builds.parallel import Layout
from prefixlint.introspect.checks import findings_of
from prefixlint.introspect.coverage import variant_dryrun
from prefixlint.introspect.coverage.variants import Exploration, Variant
from prefixlint.introspect.finding import Finding
from tests.conftest import requires_vllm
from tests.test_dryrun import line_of, model_copy

SHARED_BRANCH = '                prefix=f"{prefix}.q_proj",\n            )\n        else:'
K_NORM_ON_SHARED = (
    "Gemma4Attention",
    SHARED_BRANCH,
    SHARED_BRANCH.replace(
        "        else:",
        "            self.k_norm = RMSNorm(self.head_dim, eps=config.rms_norm_eps)\n        else:",
    ),
)


def pfx701(report) -> list[tuple[str, int, str]]:
    return [
        (Path(d.filename).name, d.location.row, d.message)
        for d in report.diagnostics
        if d.code == "PFX701"
    ]


@requires_vllm
@pytest.mark.slow
def test_a_parameter_only_a_variant_builds_is_dry_run(worker, tmp_path) -> None:
    path, text = model_copy(tmp_path, "gemma4", "gemma4_kv_norm", [K_NORM_ON_SHARED])
    report = introspect(f"{path}:Gemma4ForCausalLM", tp=(1,), pp=(1,), worker=worker)
    at = line_of(text, "Gemma4Attention", "self.k_norm = RMSNorm(self.head_dim")
    found = pfx701(report)
    assert [(f, line) for f, line, _ in found] == [(path.name, at)], found
    assert "k_norm" in found[0][2] and "num_kv_shared_layers" in found[0][2]


@requires_vllm
@pytest.mark.slow
def test_the_clean_copy_dry_runs_its_variant_with_nothing_to_report(worker, tmp_path) -> None:
    path, _ = model_copy(tmp_path, "gemma4", "gemma4_clean", [])
    report = introspect(f"{path}:Gemma4ForCausalLM", tp=(1,), pp=(1,), worker=worker)
    assert pfx701(report) == []
    notes = [d.message for d in report.diagnostics if "dry-run of config variant" in d.message]
    assert notes == []


# -- which variants are dry-run (no worker: the dry-run itself is replaced) ---------------


@dataclass
class FakeBuild:
    model: nn.Module
    variant: str = ""
    layout: Layout = field(default_factory=Layout)
    error: BaseException | None = None


@dataclass
class FakeOutcome:
    status: str = "verified"
    reason: str = ""
    findings: list[Finding] = field(default_factory=list)


def _model(*names: str) -> nn.Module:
    model = nn.Module()
    for name in names:
        model.register_parameter(name, nn.Parameter(nn.init.zeros_(nn.Linear(1, 1).weight)))
    return model


def _explored(*variants: tuple[dict[str, Any], str, nn.Module]) -> Exploration:
    out = Exploration()
    for overrides, status, model in variants:
        variant = Variant(overrides, "why", status)
        out.variants.append(variant)
        out.builds.append(FakeBuild(model, variant.label()))
    return out


def test_only_kept_variants_with_new_parameters_are_dry_run(monkeypatch) -> None:
    from prefixlint.introspect import dryrun

    ran: list[str] = []
    said = Finding("PFX701", "error", "never written", "m.py", 7)
    repeated = Finding("PFX701", "error", "base said it", "m.py", 3)

    def fake_run(cls, model_config, builds, *args, quantize: bool = True) -> FakeOutcome:
        assert not quantize  # a variant's dry-run is PFX701 only
        ran.append(builds[0].variant)
        if builds[0].variant == "b=2":
            return FakeOutcome("not verified", "no reference class")
        return FakeOutcome(findings=[said, repeated, Finding("PFX600", "note", "x", "m.py", 1)])

    monkeypatch.setattr(dryrun, "run", fake_run)
    monkeypatch.setattr(variant_dryrun, "applied", lambda *a: _nothing())
    # the config class declares `a` and `b`; `c` only vLLM reads (with a default)
    monkeypatch.setattr(variant_dryrun, "config_objects", lambda _: [SimpleNamespace(a=0, b=0)])
    base = FakeBuild(_model("w"))
    explored = _explored(
        ({"a": 1}, "kept", _model("w", "extra")),
        ({"a": 2}, "kept", _model("w")),  # no new parameter: not streamed
        ({"a": 3}, "no new site", _model("w", "extra")),  # not kept: never built at tp=1
        ({"b": 2}, "kept", _model("w", "other")),
        ({"c": 1}, "kept", _model("w", "third")),  # the reference never reads `c`: a note
    )
    verdict = FakeOutcome(findings=[repeated])
    found, gaps = variant_dryrun.dry_run_variants(None, None, [base], explored, verdict, True)
    out = found + findings_of(gaps)  # the notes as the PFX600 unit words them
    assert ran == ["a=1", "b=2"]
    assert [f.code for f in out] == ["PFX701", "PFX600", "PFX600"] and out[0].line == 7
    assert "config variant a=1" in out[0].message
    assert "config variant b=2: no reference class" in out[1].message
    assert "config variant c=1: not run: the config class holds no `c`" in out[2].message
    # a base dry-run that did not verify: its own note says why, no variant runs
    ran.clear()
    unverified = FakeOutcome("not verified", "why")
    assert variant_dryrun.dry_run_variants(None, None, [base], explored, unverified, True) == (
        [],
        [],
    )
    assert ran == []
    # no reference class (the model's own layout): a note per variant, no dry-run
    own_found, own_gaps = variant_dryrun.dry_run_variants(
        None, None, [base], explored, verdict, True, None, True
    )
    own = own_found + findings_of(own_gaps)
    assert [(f.code, "config variant a=1" in f.message) for f in own][:1] == [("PFX600", True)]
    assert len(own) == 3 and ran == []


class _nothing:
    def __enter__(self) -> bool:
        return True

    def __exit__(self, *exc: object) -> None:
        return None
