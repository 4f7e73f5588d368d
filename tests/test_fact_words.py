"""The units that word the later stages' typed facts (issue 37): PFX600 (``Unverified``),
PFX703 (``LoraIssue``) and the draft-numbering PFX604 (``DraftListIndexed``), fed facts
directly, as ``checks.findings_of`` feeds them from the pipeline."""

from __future__ import annotations

from prefixlint.introspect.checks import findings_of
from prefixlint.introspect.checks.pfx703_lora import folded
from prefixlint.introspect.coverage.numbering import DraftListIndexed
from prefixlint.introspect.coverage.sites import UNEXECUTED_SITE
from prefixlint.introspect.dryrun.lora import LoraIssue
from prefixlint.introspect.finding import Finding, Unverified

SITE = ("m.py", 7)


def test_each_kind_of_unverified_fact_is_one_note_in_its_sentence() -> None:
    stage = Unverified("LoRA dry-run", "vLLM has no `LoRAConfig`", SITE)
    bare = Unverified("", "the dry-run loads into the tp=1 build, which failed", SITE)
    build = Unverified(
        "M", "ValueError: x", SITE, "build", "pass `--config`", ("tp=1", "tp=2"), "config-gap", True
    )
    machine = Unverified("M", "No module named 'cutlass'", SITE, "build", "use a GPU", (), "env")
    site = Unverified("RowParallelLinear", "the exploration budget ran out", SITE, "site", tried=3)
    notes = findings_of([stage, bare, build, machine, site])
    assert {(f.code, f.severity, f.file, f.line) for f in notes} == {("PFX600", "note", *SITE)}
    assert [f.message for f in notes] == [
        "not verified: LoRA dry-run: vLLM has no `LoRAConfig`",
        "not verified: the dry-run loads into the tp=1 build, which failed",
        "not verified: building `M` for tp=1, tp=2 failed because of the synthesised config, "
        "not the model (ValueError: x); pass `--config`",
        "not verified: building `M` failed because of this machine, not the model (No module "
        "named 'cutlass'); use a GPU",
        "not verified: no build executed this construction site (`RowParallelLinear(...)`), so "
        "phase 2 did not check the prefix it passes; the exploration budget ran out (3 "
        "variants tried). A config that builds it (`--config`) would",
    ]
    assert notes[2].layouts == ["tp=1", "tp=2"] and notes[4].group == UNEXECUTED_SITE
    # two notes are the same note only when their facts are
    assert notes[0].facts["note"] != notes[1].facts["note"]
    assert findings_of([stage])[0].facts == notes[0].facts


def _issue(kind: str, **more: object) -> LoraIssue:
    group = f"lora:{kind}:qkv_proj"  # as the dry-run groups them: kind, then the leaf
    return LoraIssue(kind, SITE, group, ("q_proj",), "M", ("o_proj", "qkv_proj"), **more)


def test_a_lora_issue_is_an_error_softened_for_a_router_or_the_synthetic_adapter() -> None:
    unmapped = _issue("unmapped", refused=False)
    (error,) = findings_of([unmapped])
    assert (error.code, error.severity, error.group) == (
        "PFX703",
        "error",
        "lora:unmapped:qkv_proj",
    )
    assert error.message == (
        "the adapter trains `q_proj`, which no module of `M` is: no module has that path, so "
        "vLLM drops the adapter's weights for it unsaid"
    )
    (synthetic,) = findings_of([_issue("unmapped", refused=False, synthetic=True)])
    assert synthetic.severity == "warning"
    assert synthetic.message == error.message + (
        " (a warning: found with a synthetic all-linear adapter; `--lora` checks yours)"
    )
    renamed = _issue("renamed", peft="a.q", loads_into="a.qkv", router=True)
    (router,) = findings_of([renamed])
    assert router.severity == "warning" and "(a warning: a router" in router.message
    assert "`q_proj` is none of the names LoRA expects (`o_proj`, `qkv_proj`)" in router.message
    (tower,) = findings_of([_issue("tower", language="language_model", synthetic=True)])
    assert tower.severity == "note"  # a deployment choice: never raised, never softened


def test_a_fused_layer_pfx606_reports_takes_the_lora_confirmation() -> None:
    fused = _issue("fused", path="l.qkv_proj", module="QKVParallelLinear", fed=("q", "k", "v"))
    (lora,) = findings_of([fused])
    assert "make the entry `'qkv_proj': ['q', 'k', 'v']`" in lora.message
    packed = Finding("PFX606", "warning", "no entry for `qkv_proj`", *SITE, group="packed:qkv")
    other = Finding("PFX606", "warning", "elsewhere", "m.py", 9)
    assert folded([lora], [packed, other]) == []  # one defect, reported once
    assert packed.severity == "error" and packed.message.endswith("trains the parts (PFX703)")
    assert other.message == "elsewhere"
    assert folded([lora], []) == [lora]


def test_a_draft_list_indexed_past_its_end_is_pfx604_at_the_subscript() -> None:
    fact = DraftListIndexed("layer_types", 1, "list index out of range", SITE, "tp=1", "v")
    (found,) = findings_of([fact])
    assert (found.code, found.severity, found.file, found.line) == ("PFX604", "error", *SITE)
    assert found.layouts == ["tp=1"] and found.variants == ["v"]
    assert found.message.startswith(
        "building the draft failed with `layer_types` holding one entry per draft layer (1, "
        "as a draft checkpoint's config.json holds it): IndexError: list index out of range."
    )
