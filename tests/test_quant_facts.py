"""The quantization dry-runs' typed facts (``dryrun/quantfacts.py``) reach their units
(``checks.findings_of``): PFX702's ``Quantization`` and PFX701's checkpoint part write the
words and decide the severity; the facts of one site that say the same of other layers are
one finding; a layout derived from the model softens an entry that names other parts."""

from __future__ import annotations

from prefixlint.introspect.checks import findings_of
from prefixlint.introspect.dryrun.quantfacts import (
    CastWrite,
    Cause,
    FusedPrecisionRefused,
    LayerMisquantized,
    MethodMismatch,
    PackedEntry,
    PartlyLoaded,
    Stored,
    UnthreadedLayer,
)

SITE = ("model.py", 12)
MAPPING = ("model.py", 3)


def _misquantized(layer: int, **kw) -> LayerMisquantized:
    path = f"model.layers.{layer}.mlp.down_proj"
    cause = kw.pop("cause", Cause("skipped"))
    return LayerMisquantized(kw.pop("site", SITE), path, path, (path,), False, cause, **kw)


def test_one_finding_per_site_and_kind_with_how_many_more_say_it() -> None:
    facts = [_misquantized(0), _misquantized(1), _misquantized(2, site=("model.py", 40))]
    found = findings_of(facts)
    assert [(f.code, f.severity, f.line) for f in found] == [
        ("PFX702", "error", 12),
        ("PFX702", "error", 40),
    ]
    assert found[0].message == (
        "`model.layers.0.mlp.down_proj` is left unquantized although the checkpoint quantizes "
        "`model.layers.0.mlp.down_proj` (prefix `model.layers.0.mlp.down_proj`): vLLM's "
        "`is_layer_skipped` decides otherwise for this prefix (and 1 more like it)"
    )
    assert found[0].facts == {"kind": "quant-mismatch", "leaf": "down_proj", "entry": ""}
    assert "more like it" not in found[1].message


def test_an_unthreaded_layer_is_a_note_that_check_introspect_folds_by_its_kind() -> None:
    fact = UnthreadedLayer(SITE, "model.layers.0.mlp.gate", ("model.layers.0.mlp.gate",), True)
    [found] = findings_of([fact])
    assert (found.code, found.severity, found.facts) == ("PFX702", "note", {"kind": "unthreaded"})
    assert "a router, one output per expert" in found.message


def test_a_packed_entry_is_the_cause_and_a_derived_layout_softens_what_it_cannot_know() -> None:
    leaf, parts = "qkv_proj", ("q_proj", "k_proj", "v_proj")
    wrong = Cause("packed", PackedEntry(leaf, parts, ("q_proj", "v_proj")))
    missing = Cause("packed", PackedEntry(leaf, parts, None))
    found = findings_of([_misquantized(0, cause=wrong, site=MAPPING, layout="its own layout")])
    assert found[0].code == "PFX702" and found[0].facts["entry"] == "wrong"
    assert found[0].message.endswith(
        "`packed_modules_mapping['qkv_proj']` is ['q_proj', 'v_proj'], not "
        "['q_proj', 'k_proj', 'v_proj'] (its own layout)"
    )
    # on parts the model's own tables give: a wrong entry is not verified, a missing one is
    derived = [
        _misquantized(0, cause=wrong, site=MAPPING, own_tables=True),
        _misquantized(0, cause=missing, site=("model.py", 5), own_tables=True),
    ]
    soft, kept = findings_of(derived)
    assert (soft.code, soft.severity) == ("PFX600", "note")
    assert soft.message.startswith("not verified: `model.layers.0.mlp.down_proj`")
    assert (kept.code, kept.severity, kept.facts["entry"]) == ("PFX702", "error", "missing")


def test_the_real_checkpoints_facts_name_what_it_stores_and_the_method() -> None:
    held = Stored((("float8_e4m3fn", "weight"),), ("weight_scale",))
    path = "model.layers.0.mlp.down_proj"
    fact = MethodMismatch(
        SITE, path, path, ((path, held),), "", "fp8", ("weight_scale",), Cause("unthreaded")
    )
    refused = FusedPrecisionRefused(MAPPING, "ValueError: must have the same precision", "fp8")
    found = findings_of([fact, refused])
    assert found[0].message == (
        f"`{path}` is left unquantized although the checkpoint stores it quantized "
        f"(`{path}`: float8_e4m3fn `weight` with `weight_scale`) under `fp8` (prefix `{path}`): "
        "it is built without the `quant_config`; its `weight_scale` stays unwritten"
    )
    assert found[1].line == 3 and "vLLM's `fp8` refuses it" in found[1].message


def test_casts_and_partial_loads_are_pfx701_errors_naming_their_tensor() -> None:
    cast = CastWrite(SITE, "lm_head.weight", "float8_e4m3fn", "lm_head.weight", "bfloat16")
    part = PartlyLoaded(("model.py", 20), "model.embed.weight", 8, 16, ())
    found = findings_of([part, cast])
    assert [(f.code, f.severity, f.facts["kind"]) for f in found] == [
        ("PFX701", "error", "partly-loaded"),
        ("PFX701", "error", "cast"),
    ]
    assert found[0].facts["subject"] == "model.embed.weight"  # a draft's shared part softens
    assert "(into the model)" in found[0].message
