"""Issue 37: code that merges, confirms or softens a phase-2 finding reads the facts its
maker set (``Finding.facts``), never its words: each case below gives words that say
nothing (or say something else) and checks the decision follows the facts."""

from __future__ import annotations

from prefixlint.introspect.checks import findings_of
from prefixlint.introspect.checks.packed import without_duplicates
from prefixlint.introspect.drafts.plan import shared_with_target
from prefixlint.introspect.dryrun.checkpoint_run import _one_per_module
from prefixlint.introspect.dryrun.weightfacts import (
    LoaderRaises,
    NeverLoaded,
    Unwritten,
    UnwrittenShard,
)
from prefixlint.introspect.dryrun.weights import layout_refused
from prefixlint.introspect.finding import Finding


def pfx701(words: str, line: int = 5, **facts) -> Finding:
    return Finding("PFX701", "error", words, "m.py", line, facts=facts)


def test_pfx701_facts_merge_by_their_fields_never_their_words() -> None:
    """The unit merges its facts per line and kind: a raise by its error whatever the
    tensor, any other by all it says with layer numbers left out."""
    site = ("m.py", 5)
    found = findings_of(
        [
            LoaderRaises("a.0.w", "KeyError: 'x'", site),
            LoaderRaises("a.1.w", "KeyError: 'x'", site),
            LoaderRaises("a.2.w", "ValueError: y", site),
            Unwritten("l.0.w", site),
            Unwritten("l.1.w", site),
            Unwritten("l.1.bias", site),
        ]
    )
    assert [
        (f.facts.get("tensor") or f.facts["param"], f.message.endswith("like it)")) for f in found
    ] == [
        ("a.0.w", True),
        ("a.2.w", False),
        ("l.0.w", True),
        ("l.1.bias", False),
    ]


def test_a_refusing_layout_makes_its_raises_notes_by_kind() -> None:
    site = ("m.py", 5)
    [raised, dropped] = findings_of(
        layout_refused([LoaderRaises("a.w", "KeyError: 'a.w'", site), NeverLoaded("b.w", site)])
    )
    assert (raised.code, raised.severity) == ("PFX600", "note") and dropped.code == "PFX701"


def test_unwritten_parts_are_one_finding_per_module_and_shard() -> None:
    site = ("m.py", 5)
    found = _one_per_module(
        [
            UnwrittenShard("l.0.qkv.weight_packed", "q", site),
            UnwrittenShard("l.0.qkv.weight_scale", "q", site),
            UnwrittenShard("l.0.qkv.weight_scale", "k", site),
        ]
    )
    assert [(f.shard, f.also) for f in found] == [("q", ["weight_scale"]), ("k", [])]
    assert findings_of(found)[0].message.endswith("; so is the same part of its `weight_scale`")


def test_a_drafts_shared_head_is_a_note_by_what_the_finding_is_about() -> None:
    head = pfx701("words that name `model.layers.0` first", subject="lm_head.weight")
    shared_with_target(head)
    assert head.severity == "note"
    named = pfx701("`lm_head.weight` is never written", subject="model.norm.weight")
    shared_with_target(named)
    assert named.severity == "error"


def test_the_dry_runs_missing_entry_confirms_packed_once() -> None:
    packed = Finding("PFX606", "warning", "no entry", "m.py", 1, group="packed:qkv_proj")
    missing = {"kind": "quant-mismatch", "entry": "missing", "leaf": "qkv_proj"}
    quant = [Finding("PFX702", "error", f"words {i}", "m.py", 2, facts=missing) for i in range(2)]
    wrong = Finding(
        "PFX702", "error", "has no entry `'qkv_proj':", "m.py", 3, facts={"entry": "wrong"}
    )
    kept = without_duplicates([*quant, wrong], [packed])
    assert kept == [wrong] and packed.severity == "error"
    assert packed.message.count("the quantization dry-run confirms it") == 1
