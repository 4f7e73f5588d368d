"""Every rule's code, name, default severity, default state and summary, without libcst.

A warm run answers from the cache and should not pay for importing libcst just to know
which codes exist. tests/test_rules.py checks that this table equals the rule classes;
regenerate it with ``python -m prefixlint.ruletable``.
"""

from __future__ import annotations

# code: (name, default severity, enabled by default, summary)
RULE_TABLE: dict[str, tuple[str, str, bool, str]] = {
    "PFX001": ("syntax-error", "error", True, "The file cannot be read, decoded or parsed"),
    "PFX101": (
        "init-signature",
        "error",
        True,
        "A model class's `__init__` does not take `vllm_config` and `prefix` as vLLM calls it",
    ),
    "PFX102": (
        "prefix-unused",
        "warning",
        True,
        "`prefix` is taken but never used, while prefix-taking layers are built",
    ),
    "PFX201": (
        "forward-signature",
        "error",
        True,
        "An architecture's `forward` does not have vLLM's signature",
    ),
    "PFX202": (
        "hf-forward-leftover",
        "error",
        True,
        "A model class's `forward` takes a Hugging Face-only parameter",
    ),
    "PFX203": (
        "missing-embed-input-ids",
        "warning",
        True,
        "An architecture class has no `embed_input_ids`",
    ),
    "PFX301": (
        "missing-prefix",
        "warning",
        True,
        "A prefix-taking layer is constructed without `prefix`",
    ),
    "PFX302": (
        "prefix-attribute-mismatch",
        "error",
        True,
        "The prefix names another attribute than the one the module is stored at",
    ),
    "PFX303": (
        "prefix-not-derived",
        "error",
        True,
        "A prefix is a literal instead of being built from the enclosing `prefix`",
    ),
    "PFX304": (
        "loop-prefix-without-index",
        "error",
        True,
        "A module built in a loop has a prefix without the loop index",
    ),
    "PFX401": (
        "direct-collective",
        "warning",
        True,
        "Model code calls a collective itself instead of leaving it to parallel layers",
    ),
    "PFX402": (
        "non-parallel-layer",
        "warning",
        True,
        "A decoder projection, embedding or head is a plain `nn.Linear`/`nn.Embedding`",
    ),
    "PFX403": (
        "own-attention",
        "warning",
        True,
        "A decoder computes attention itself instead of using vLLM's `Attention`",
    ),
    "PFX404": (
        "generation-leftover",
        "warning",
        True,
        "A model class generates, samples or handles a KV cache itself",
    ),
    "PFX501": (
        "pp-interface-incomplete",
        "error",
        True,
        "A `SupportsPP` class lacks `make_empty_intermediate_tensors` or the PP forward",
    ),
    "PFX502": (
        "pp-undeclared",
        "warning",
        True,
        "An architecture built on pipeline-stage logic does not declare `SupportsPP`",
    ),
    "PFX503": (
        "multimodal-interface-incomplete",
        "error",
        True,
        "A `SupportsMultiModal` class lacks `embed_multimodal` or a registered processor",
    ),
    "PFX504": (
        "plugin-registration",
        "warning",
        True,
        "A plugin registers a model without the registry guard, or names a missing class",
    ),
}


def render() -> str:
    from prefixlint.rules import ALL_RULES

    rows = "\n".join(
        f"    {r.code!r}: ({r.name!r}, {r.severity.value!r}, {r.default_enabled!r}, {r.summary!r}),"
        for r in ALL_RULES
    )
    return rows


if __name__ == "__main__":
    import re
    from pathlib import Path

    path = Path(__file__)
    text = path.read_text()
    text = re.sub(
        r"(RULE_TABLE: dict\[str, tuple\[str, str, bool, str\]\] = \{\n).*?\n?\}\n",
        lambda m: m.group(1) + render() + "\n}\n",
        text,
        flags=re.S,
    )
    path.write_text(text)


# Phase 2 (``prefixlint introspect``): code -> (name, default severity, summary, documentation)
INTROSPECT_RULES: dict[str, tuple[str, str, str, str]] = {
    "PFX600": (
        "not-verified",
        "note",
        "Phase 2 could not build or check the target; nothing was verified",
        "A note, never a finding against the model: the build failed for a reason outside "
        "the model under check (config synthesis, a missing package or kernel, a CUDA-only "
        "path, no torch/vLLM in this environment). The message says why and what would fix "
        "it (for example `--config path/to/config.json`). It does not fail the run unless "
        "`--strict` is given.",
    ),
    "PFX601": (
        "prefix-path-mismatch",
        "error",
        "A built module's prefix differs from its path in `named_modules()`",
        "The prefix a module received at construction is compared with where it ends up "
        "in the built model, over every build (layouts and explored config variants). A "
        'layer built with the default `""` where its path is not empty is a finding too. '
        "One finding per construction site, naming the first path and where else it "
        "repeats. An error when a consumer looks the name up (a `quant_config` reaches the "
        "module at its construction site, or the layer registers itself by name for the KV "
        "cache and the forward context); a warning that says so when nothing does. A "
        "container built without `prefix` is reported once, at its own construction. vLLM's "
        "conventions are accepted: wrappers handing their own name to a child (MLA, MTP), "
        "MLA's `.attn` for `mla_attn`, a draft model's `mtp`/`draft_model` namespace, "
        "attention layers of one decoder layer given unique names on purpose. Reported at "
        "the line of the model that built the module.",
    ),
    "PFX602": (
        "duplicate-layer-name",
        "error",
        "Two layers are registered under one name",
        "vLLM's own 'Duplicate layer name' error, or two leaf layers (linear, attention, "
        "embedding) given the same prefix: they would share one quantization lookup and "
        "one KV-cache slot. Usually a literal prefix, or a loop whose prefix lacks the index.",
    ),
    "PFX603": (
        "heads-not-divisible",
        "warning",
        "Query or KV heads do not divide for a tensor-parallel size of the grid",
        "For each TP size of the grid, the query heads must divide by it and the KV heads "
        "must divide by it or it by them. The message names the TP sizes that work.",
    ),
    "PFX604": (
        "construction-failed",
        "error",
        "The class raised, hung or crashed while being built for a layout",
        "Reported at the innermost frame in the model's own file. A hang or a crash of the "
        "worker process is reported too, never a dead run.",
    ),
    "PFX605": (
        "pp-stage-placement",
        "error",
        "A pipeline stage builds layers it does not own, or misses the head it needs",
        "At pp > 1 every stage is checked (pp 2 and 4: first, middle and last stages): "
        "layers outside the stage's range must be `PPMissingLayer` (as `make_layers` builds "
        "them) and the last stage must hold `lm_head` (errors); the embedding with "
        "parameters on a stage other than the first (and the last, for a tied head), "
        "`lm_head` on a stage other than the last, the final norm off the last stage are "
        "warnings: they cost memory, nothing breaks. Encoder towers (vision, audio) are not "
        "split across stages and are not checked.",
    ),
    "PFX606": (
        "interface-inconsistent",
        "error",
        "A declared capability does not hold in the built model",
        "`SupportsPP` without a working `make_empty_intermediate_tensors` (an error); a "
        "`packed_modules_mapping` key that no build of any layout or explored config variant "
        "made: an error when none of its keys was built (the mapping does not describe the "
        "model), a warning per unbuilt key otherwise (nothing is packed under it).",
    ),
    "PFX607": (
        "tp-heads-inconsistent",
        "error",
        "An attention layer's head counts differ from the per-rank counts of its QKV projection",
        "At tensor-parallel size > 1 the QKV projection splits the heads across ranks; the "
        "`Attention` beside it must be given the per-rank counts (`total // tp_size`). Global "
        "counts there shape the KV cache and the attention kernel for heads this rank does not "
        "hold. Reported at the line that built the attention layer.",
    ),
}


def phase_rules() -> dict[str, tuple[str, str, str, str, str]]:
    """Codes reported by phases 2 and 3: code -> (name, severity, summary, doc, phase)."""
    from prefixlint.smoke import _WHAT, CHECKS  # light: the engines run in a child process

    out = {c: (*v, "introspect") for c, v in INTROSPECT_RULES.items()}
    for code, (name, summary) in CHECKS.items():
        doc = (
            "A smoke run compares greedy tokens on a tiny random-weight checkpoint: "
            f"{_WHAT[code]}. "
            "A divergence in the first tokens is a bug in the model's use of the engine; "
            "the finding gives the first divergent position and both tokens."
        )
        out[code] = (name, "error", summary, doc, "smoke")
    return out
