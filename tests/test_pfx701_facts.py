"""The PFX701 unit over the dry-run's typed facts (``dryrun/weightfacts.py``): it alone
writes their words and decides their severity, from the facts' fields (issue 37)."""

from __future__ import annotations

from prefixlint.introspect.checks import findings_of
from prefixlint.introspect.dryrun.weightfacts import (
    BrokenLoader,
    LoaderRaises,
    NeverLoaded,
    RefusedDeclared,
    ScalesDropped,
    Unwritten,
    UnwrittenElements,
    UnwrittenShard,
)

SITE = ("m.py", 7)


def _one(fact):
    [found] = findings_of([fact])
    return found


def test_each_fact_is_a_pfx701_at_its_site_with_its_severity() -> None:
    cases = [
        (NeverLoaded("a.w", SITE), "error", "drops it silently"),
        (NeverLoaded("a.w", SITE, nothing_random=True), "note", "the model does without it"),
        (NeverLoaded("a.w", SITE, skips_param=True), "error", "`load_weights` skips it"),
        (Unwritten("a.w", SITE), "error", "so it stays random"),
        (Unwritten("lm_head.weight", SITE, embedding_head=True), "note", "embedding model"),
        (UnwrittenElements("a.w", SITE, 3, 8), "error", "3 of 8 elements"),
        (UnwrittenShard("a.w", "k", SITE, [("q", ["x.q", "x.k"])]), "error", "the wrong shard"),
        (LoaderRaises("a.w", "KeyError: 'a.w'", SITE), "error", "KeyError: 'a.w'"),
        (BrokenLoader("?", "TypeError: t", SITE), "error", "before it reads any"),
        (ScalesDropped(["x.k_scale"], ["x.k_scale"], ["y.k_scale"], SITE), "error", "FP8"),
    ]
    for fact, severity, words in cases:
        found = _one(fact)
        assert (found.code, found.file, found.line) == ("PFX701", *SITE), fact
        assert found.severity == severity and words in found.message, (fact, found)


def test_a_refused_declared_name_names_its_table_line() -> None:
    fact = RefusedDeclared(
        SITE, [("gate_proj", "gate_up_proj", "packed", ("/x/m.py", 40))], "l.0.gate_proj.w", "E", []
    )
    assert "`gate_proj` (into `gate_up_proj` by packed; m.py:40 names both)" in _one(fact).message


def test_contested_scales_are_warnings_and_fp8_facts_say_their_layout() -> None:
    raised = LoaderRaises("h.0.attn.k_scale", "ValueError: v", SITE, contested=True, fp8_kv="")
    found = _one(raised)
    assert found.severity == "warning" and "may not hold them" in found.message
    assert found.message.endswith("per-tensor `weight_scale`/`input_scale`")
    dropped = ScalesDropped(["a"], ["a"], ["b"], SITE, contested=True, more_scales=1, fp8_kv="k")
    found = _one(dropped)
    assert found.severity == "warning" and "(and 1 more kind(s) of scale at this line)" in (
        found.message
    )
    assert found.message.endswith("KV-cache scales named like `k`")


def test_a_layout_refused_as_a_whole_gives_notes() -> None:
    found = _one(LoaderRaises("a.w", "KeyError: 'a.w'", SITE, refused_layout=True))
    assert (found.code, found.severity) == ("PFX600", "note")
    assert found.message.startswith("not verified: `load_weights` raises on checkpoint tensor")
    # the PFX600 unit's note, with its identity (``check_introspect.merge_classes``)
    other = _one(LoaderRaises("b.w", "KeyError: 'b.w'", SITE, refused_layout=True))
    assert found.facts["note"] and found.facts["note"] != other.facts["note"]


def test_on_the_models_own_layout_only_the_skipped_head_stays_a_finding() -> None:
    head = NeverLoaded("lm_head.weight", SITE, skips_param=True, own_layout=True, layout="own")
    found = _one(head)
    assert (found.code, found.severity) == ("PFX701", "warning")
    assert found.message.endswith("names the tensor otherwise (own)")  # the layout, last
    for fact in (Unwritten("a.w", SITE), UnwrittenShard("a.w", "q", SITE)):
        fact.own_layout, fact.layout = True, "own"
        found = _one(fact)
        assert (found.code, found.severity) == ("PFX600", "note")
        # said without the words that it stays random, and without the layout
        assert "random" not in found.message and not found.message.endswith("(own)")


def test_facts_of_many_layers_merge_by_their_fields() -> None:
    found = findings_of(
        [
            Unwritten("l.0.w", SITE, layout="x"),
            Unwritten("l.1.w", SITE, layout="x"),
            Unwritten("l.1.w", SITE, layout="x", embedding_head=True),
            Unwritten("l.0.w", ("m.py", 8), layout="x"),
        ]
    )
    assert [f.message.endswith("(and 1 more like it) (x)") for f in found] == [True, False, False]
    assert [f.facts["subject"] for f in found] == ["l.0.w", "l.1.w", "l.0.w"]
