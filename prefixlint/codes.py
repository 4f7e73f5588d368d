"""The one table of every code prefixlint reports, in every phase.

Each code has its name, default severity, phase, one-line summary, whether ``--fix`` can
repair it, whether it is on by default, and the source of its documentation, written once:
a static rule's docstring (``rule:module:Class``, imported only when the documentation is
asked for), a phase-2 check unit's docstring (``check``, read from its source file with
``ast``, never imported: it needs torch), or the text itself for the other codes.
The rule classes, the CLI (``rules``, ``rule``), every reporter (SARIF's rule catalog,
URLs) and the generated ``docs/rules.md`` read this table; it imports nothing but the
``Diagnostic`` types, so a warm run or a reporter never pays for libcst, torch or vLLM.

Codes are a public contract: never renumber, only deprecate.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from dataclasses import dataclass
from pathlib import Path

from prefixlint.diagnostic import Severity

STATIC = "static"
INTROSPECT = "introspect"
SMOKE = "smoke"
PHASES = (STATIC, INTROSPECT, SMOKE)

# Codes that modules other than their own rule or check emit, defined here only
# (tests/test_codes.py fails on a literal code given to a Finding or Diagnostic elsewhere).
INTERNAL_ERROR_CODE = "PFX000"  # prefixlint's own failure on a file, not the file's
SYNTAX_ERROR_CODE = "PFX001"
NOT_VERIFIED_CODE = "PFX600"  # "not verified" is no finding on the model
CONSTRUCTION_FAILED_CODE = "PFX604"
INTERFACE_INCONSISTENT_CODE = "PFX606"
CHECKPOINT_COVERAGE_CODE = "PFX701"
QUANTIZATION_MISMATCH_CODE = "PFX702"
LORA_TARGET_UNMAPPED_CODE = "PFX703"

PROJECT_URL = "https://github.com/prefixlint/prefixlint"
DOCS_URL = f"{PROJECT_URL}/blob/main/docs/rules.md"


@dataclass(frozen=True)
class Code:
    code: str
    name: str
    severity: Severity
    phase: str
    summary: str
    fixable: bool = False
    # "rule:module:Class" for a static rule, else the documentation itself (empty for a
    # phase-2 code: its check unit's docstring is its documentation).
    doc: str = ""
    default_enabled: bool = True
    # "module:Class" of the phase-2 check unit that reports it (never imported here: it
    # needs torch); tests/test_introspect_checks.py ties each to its entry in CHECKS.
    check: str = ""

    @property
    def anchor(self) -> str:
        """The GitHub anchor of this code's heading in docs/rules.md."""
        return github_anchor(f"{self.code} {self.name}")

    @property
    def url(self) -> str:
        return f"{DOCS_URL}#{self.anchor}"

    @property
    def explanation(self) -> str:
        """The short explanation: the "Why is this bad?" paragraph, else the documentation
        of a later phase, else the summary."""
        text = self.documentation()
        found = re.search(r"## Why is this bad\?\s*\n(.*?)(?:\n\s*\n|\n##|\Z)", text, re.S)
        if found:
            return " ".join(found.group(1).split())
        if self.phase != STATIC and text:
            return " ".join(text.split())
        return self.summary.rstrip(".") + "."

    def documentation(self) -> str:
        if self.check and not self.doc:
            return unit_docstring(self.check)
        if not self.doc.startswith("rule:"):
            return self.doc
        module, _, cls = self.doc.removeprefix("rule:").partition(":")
        rule = getattr(importlib.import_module(module), cls)
        return inspect.cleandoc(rule.__doc__ or "")


def unit_docstring(target: str) -> str:
    """The docstring of the class ``module:Class`` under this package, read from its source
    with ``ast`` (a phase-2 unit imports torch; ``prefixlint rule`` must not)."""
    module, _, cls = target.partition(":")
    root = Path(__file__).parent
    path = root.joinpath(*module.split(".")[1:]).with_suffix(".py")
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return ast.get_docstring(node) or ""
    raise LookupError(f"{target}: no such class in {path}")


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped,
    spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


CODES: dict[str, Code] = {
    c.code: c
    for c in (
        Code(
            "PFX000",
            "internal-error",
            Severity.ERROR,
            STATIC,
            "prefixlint itself failed while checking the file",
            doc=(
                "prefixlint raised while checking this file: a bug in prefixlint, not in the "
                "file. The file's other findings are missing; the run says how many files hit "
                "one and asks for a report with the message, which names the exception."
            ),
        ),
        Code(
            "PFX001",
            "syntax-error",
            Severity.ERROR,
            STATIC,
            "The file cannot be read, decoded or parsed",
            fixable=False,
            doc="rule:prefixlint.rules.pfx001_syntax_error:SyntaxErrorRule",
        ),
        Code(
            "PFX101",
            "init-signature",
            Severity.ERROR,
            STATIC,
            "A model class's `__init__` does not take `vllm_config` and `prefix` as vLLM calls it",
            fixable=False,
            doc="rule:prefixlint.rules.pfx101_init_signature:InitSignature",
        ),
        Code(
            "PFX102",
            "prefix-unused",
            Severity.WARNING,
            STATIC,
            "`prefix` is taken but never used, while prefix-taking layers are built",
            fixable=False,
            doc="rule:prefixlint.rules.pfx102_prefix_unused:PrefixUnused",
        ),
        Code(
            "PFX201",
            "forward-signature",
            Severity.ERROR,
            STATIC,
            "An architecture's `forward` does not have vLLM's signature",
            fixable=False,
            doc="rule:prefixlint.rules.pfx201_forward_signature:ForwardSignature",
        ),
        Code(
            "PFX202",
            "hf-forward-leftover",
            Severity.ERROR,
            STATIC,
            "A model class's `forward` takes a Hugging Face-only parameter",
            fixable=False,
            doc="rule:prefixlint.rules.pfx202_hf_forward_leftover:HFForwardLeftover",
        ),
        Code(
            "PFX203",
            "missing-embed-input-ids",
            Severity.WARNING,
            STATIC,
            "An architecture class has no `embed_input_ids`",
            fixable=False,
            doc="rule:prefixlint.rules.pfx203_missing_embed_input_ids:MissingEmbedInputIds",
        ),
        Code(
            "PFX301",
            "missing-prefix",
            Severity.WARNING,
            STATIC,
            "A prefix-taking layer is constructed without `prefix`",
            fixable=True,
            doc="rule:prefixlint.rules.pfx301_missing_prefix:MissingPrefix",
        ),
        Code(
            "PFX302",
            "prefix-attribute-mismatch",
            Severity.ERROR,
            STATIC,
            "The prefix names another attribute than the one the module is stored at",
            fixable=True,
            doc="rule:prefixlint.rules.pfx302_prefix_attribute_mismatch:PrefixAttributeMismatch",
        ),
        Code(
            "PFX303",
            "prefix-not-derived",
            Severity.ERROR,
            STATIC,
            "A prefix is a literal instead of being built from the enclosing `prefix`",
            fixable=False,
            doc="rule:prefixlint.rules.pfx303_prefix_not_derived:PrefixNotDerived",
        ),
        Code(
            "PFX304",
            "loop-prefix-without-index",
            Severity.ERROR,
            STATIC,
            "A module built in a loop has a prefix without the loop index",
            fixable=False,
            doc="rule:prefixlint.rules.pfx304_loop_prefix_without_index:LoopPrefixWithoutIndex",
        ),
        Code(
            "PFX401",
            "direct-collective",
            Severity.WARNING,
            STATIC,
            "Model code calls a collective itself instead of leaving it to parallel layers",
            fixable=False,
            doc="rule:prefixlint.rules.pfx401_direct_collective:DirectCollective",
        ),
        Code(
            "PFX402",
            "non-parallel-layer",
            Severity.WARNING,
            STATIC,
            "A decoder projection, embedding or head is a plain `nn.Linear`/`nn.Embedding`",
            fixable=False,
            doc="rule:prefixlint.rules.pfx402_non_parallel_layer:NonParallelLayer",
        ),
        Code(
            "PFX403",
            "own-attention",
            Severity.WARNING,
            STATIC,
            "A decoder computes attention itself instead of using vLLM's `Attention`",
            fixable=False,
            doc="rule:prefixlint.rules.pfx403_own_attention:OwnAttention",
        ),
        Code(
            "PFX404",
            "generation-leftover",
            Severity.WARNING,
            STATIC,
            "A model class generates, samples or handles a KV cache itself",
            fixable=False,
            doc="rule:prefixlint.rules.pfx404_generation_leftover:GenerationLeftover",
        ),
        Code(
            "PFX405",
            "quant-config-not-passed",
            Severity.ERROR,
            STATIC,
            "A layer that takes `quant_config` is built without it while one is in reach",
            fixable=True,
            doc="rule:prefixlint.rules.pfx405_quant_config_not_passed:QuantConfigNotPassed",
        ),
        Code(
            "PFX406",
            "cache-config-not-passed",
            Severity.ERROR,
            STATIC,
            "A layer that takes `cache_config` is built without it while one is in reach",
            fixable=True,
            doc="rule:prefixlint.rules.pfx406_cache_config_not_passed:CacheConfigNotPassed",
        ),
        Code(
            "PFX407",
            "packed-mapping-missing",
            Severity.ERROR,
            STATIC,
            "A model builds fused layers from separate checkpoint parts with no "
            "`packed_modules_mapping`",
            fixable=False,
            doc="rule:prefixlint.rules.pfx407_packed_mapping_missing:PackedMappingMissing",
        ),
        Code(
            "PFX408",
            "class-attribute-reassigned",
            Severity.WARNING,
            STATIC,
            "A class attribute is assigned twice in the class body, and nothing reads the first",
            fixable=False,
            doc="rule:prefixlint.rules.pfx408_class_attribute_reassigned:ClassAttributeReassigned",
        ),
        Code(
            "PFX501",
            "pp-interface-incomplete",
            Severity.ERROR,
            STATIC,
            "A `SupportsPP` class lacks `make_empty_intermediate_tensors` or the PP forward",
            fixable=False,
            doc="rule:prefixlint.rules.pfx501_pp_interface_incomplete:PPInterfaceIncomplete",
        ),
        Code(
            "PFX502",
            "pp-undeclared",
            Severity.WARNING,
            STATIC,
            "An architecture built on pipeline-stage logic does not declare `SupportsPP`",
            fixable=False,
            doc="rule:prefixlint.rules.pfx502_pp_undeclared:PPUndeclared",
        ),
        Code(
            "PFX503",
            "multimodal-interface-incomplete",
            Severity.ERROR,
            STATIC,
            "A `SupportsMultiModal` class lacks `embed_multimodal` or a registered processor",
            fixable=False,
            doc=(
                "rule:prefixlint.rules.pfx503_multimodal_interface_incomplete:MultiModa"
                "lInterfaceInco"
                "mplete"
            ),
        ),
        Code(
            "PFX504",
            "plugin-registration",
            Severity.WARNING,
            STATIC,
            "A plugin registers a model without the registry guard, or names a missing class",
            fixable=False,
            doc="rule:prefixlint.rules.pfx504_plugin_registration:PluginRegistration",
        ),
        Code(
            "PFX600",
            "not-verified",
            Severity.NOTE,
            INTROSPECT,
            "Phase 2 could not build or check the target; nothing was verified",
            check="prefixlint.introspect.checks.pfx600_not_verified:NotVerified",
        ),
        Code(
            "PFX601",
            "prefix-path-mismatch",
            Severity.ERROR,
            INTROSPECT,
            ("A built module's prefix differs from its path in `named_modules()`"),
            check="prefixlint.introspect.checks.pfx601_prefix_path:PrefixPath",
        ),
        Code(
            "PFX602",
            "duplicate-layer-name",
            Severity.ERROR,
            INTROSPECT,
            "Two layers are registered under one name",
            check="prefixlint.introspect.checks.pfx602_duplicate_name:DuplicateLayerName",
        ),
        Code(
            "PFX603",
            "heads-not-divisible",
            Severity.WARNING,
            INTROSPECT,
            "Query or KV heads do not divide for a tensor-parallel size of the grid",
            check="prefixlint.introspect.checks.pfx603_heads_not_divisible:HeadsNotDivisible",
        ),
        Code(
            "PFX604",
            "construction-failed",
            Severity.ERROR,
            INTROSPECT,
            "The class raised, hung or crashed while being built for a layout",
            check="prefixlint.introspect.checks.pfx604_construction_failed:ConstructionFailed",
        ),
        Code(
            "PFX605",
            "pp-stage-placement",
            Severity.ERROR,
            INTROSPECT,
            ("A pipeline stage builds layers it does not own, or misses the head it needs"),
            check="prefixlint.introspect.checks.pfx605_pipeline_stage:PipelineStage",
        ),
        Code(
            "PFX606",
            "interface-inconsistent",
            Severity.ERROR,
            INTROSPECT,
            ("A declared capability does not hold in the built model"),
            check="prefixlint.introspect.checks.pfx606_interface:PipelineInterface",
        ),
        Code(
            "PFX607",
            "tp-heads-inconsistent",
            Severity.ERROR,
            INTROSPECT,
            (
                "An attention layer's head counts differ from the per-rank counts of its QKV "
                "projection"
            ),
            check="prefixlint.introspect.checks.pfx607_per_rank_heads:PerRankHeads",
        ),
        Code(
            "PFX608",
            "engine-start-refused",
            Severity.ERROR,
            INTROSPECT,
            "vLLM's own start-up validation refuses the model",
            check="prefixlint.introspect.checks.pfx608_engine_start:EngineStart",
        ),
        Code(
            "PFX609",
            "output-mismatch",
            Severity.ERROR,
            INTROSPECT,
            "A module computes other values than transformers' model of the same config",
            check="prefixlint.introspect.checks.pfx609_output_mismatch:OutputMismatch",
        ),
        Code(
            "PFX610",
            "untied-head",
            Severity.ERROR,
            INTROSPECT,
            "The config ties the output head to the input embedding; the built model does not",
            check="prefixlint.introspect.checks.pfx610_untied_head:UntiedHead",
        ),
        Code(
            "PFX701",
            "checkpoint-coverage",
            Severity.ERROR,
            INTROSPECT,
            (
                "A checkpoint tensor is never loaded, a parameter (or shard) never written, "
                "or `load_weights` raises"
            ),
            check="prefixlint.introspect.checks.pfx701_weight_loading:WeightLoading",
        ),
        Code(
            "PFX702",
            "quantization-mismatch",
            Severity.ERROR,
            INTROSPECT,
            ("A layer's quantization method disagrees with the checkpoint's `ignored_layers`"),
            check="prefixlint.introspect.checks.pfx702_quantization:Quantization",
        ),
        Code(
            "PFX703",
            "lora-target-unmapped",
            Severity.ERROR,
            INTROSPECT,
            "vLLM's LoRA loader refuses or drops an adapter module the model should take",
            check="prefixlint.introspect.checks.pfx703_lora:LoraTargets",
        ),
        Code(
            "PFX801",
            "greedy-mismatch",
            Severity.ERROR,
            SMOKE,
            "vLLM's greedy tokens differ from the transformers reference on the same weights",
            doc=(
                "A smoke run compares greedy tokens on a tiny random-weight checkpoint:"
                " vLLM's greedy"
                " tokens differ from transformers' `generate` on the same weights. A divergence in "
                "the first tokens is a bug in the model's use of the engine; the finding gives the "
                "first divergent position and both tokens."
            ),
        ),
        Code(
            "PFX802",
            "batch-dependence",
            Severity.ERROR,
            SMOKE,
            "A request's greedy tokens change when other requests share its batch",
            doc=(
                "A smoke run compares greedy tokens on a tiny random-weight checkpoint:"
                " the request's"
                " greedy tokens change when 30 other requests share its batch. A divergence in the "
                "first tokens is a bug in the model's use of the engine; the finding "
                "gives the first "
                "divergent position and both tokens."
            ),
        ),
        Code(
            "PFX803",
            "chunked-prefill-mismatch",
            Severity.ERROR,
            SMOKE,
            "A prompt prefilled in chunks decodes differently from one prefilled at once",
            doc=(
                "A smoke run compares greedy tokens on a tiny random-weight checkpoint:"
                " the prompt's "
                "greedy tokens change when its prefill is split into chunks "
                "(max_num_batched_tokens=32). A divergence in the first tokens is a bug in the "
                "model's use of the engine; the finding gives the first divergent "
                "position and both "
                "tokens."
            ),
        ),
        Code(
            "PFX804",
            "prefix-cache-mismatch",
            Severity.ERROR,
            SMOKE,
            "A prompt decodes differently when its prefix comes from the prefix cache",
            doc=(
                "A smoke run compares greedy tokens on a tiny random-weight checkpoint:"
                " the prompt's "
                "greedy tokens change when its prefix is served from the prefix cache. "
                "A divergence "
                "in the first tokens is a bug in the model's use of the engine; the "
                "finding gives the"
                " first divergent position and both tokens."
            ),
        ),
        Code(
            "PFX805",
            "tp-mismatch",
            Severity.ERROR,
            SMOKE,
            "Tensor parallel 2 decodes differently from tensor parallel 1",
            doc=(
                "A smoke run compares greedy tokens on a tiny random-weight checkpoint:"
                " greedy tokens"
                " at tensor parallel 2 differ from tensor parallel 1. A divergence in the first "
                "tokens is a bug in the model's use of the engine; the finding gives the first "
                "divergent position and both tokens."
            ),
        ),
        Code(
            "PFX806",
            "compile-mismatch",
            Severity.ERROR,
            SMOKE,
            "The compiled model decodes differently from eager mode",
            doc=(
                "A smoke run compares greedy tokens on a tiny random-weight checkpoint:"
                " greedy tokens"
                " of the compiled model differ from eager mode. A divergence in the "
                "first tokens is a"
                " bug in the model's use of the engine; the finding gives the first divergent "
                "position and both tokens."
            ),
        ),
    )
}

FIXABLE: frozenset[str] = frozenset(c.code for c in CODES.values() if c.fixable)


def codes_of(phase: str) -> dict[str, Code]:
    return {k: c for k, c in CODES.items() if c.phase == phase}


def lookup(code: str) -> Code | None:
    return CODES.get(code)


def url_for(code: str) -> str | None:
    entry = CODES.get(code)
    return entry.url if entry else None


def render_rules_markdown() -> str:
    """docs/rules.md: every code's table row and documentation, generated from this table
    (``python -m prefixlint.codes > docs/rules.md``; a test fails when it is stale)."""
    out = [
        "# prefixlint rules",
        "",
        "Generated from `prefixlint/codes.py` and the rules' docstrings by "
        "`python -m prefixlint.codes > docs/rules.md`; do not edit by hand.",
        "",
        "| code | name | phase | default severity | on by default | fixable | summary |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in CODES.values():
        out.append(
            f"| [{c.code}](#{c.anchor}) | {c.name} | {c.phase} | {c.severity.value} | "
            f"{'yes' if c.default_enabled else 'no'} | {'yes' if c.fixable else ''} | "
            f"{c.summary} |"
        )
    for c in CODES.values():
        facts = f"Phase: {c.phase}. Default severity: {c.severity.value}."
        if not c.default_enabled:
            facts += " Off by default (enable with `--select`)."
        if c.fixable:
            facts += " Fixable with `--fix`."
        # The rule's own "## What it does" sections nest under the code's heading.
        doc = re.sub(r"^## ", "### ", c.documentation(), flags=re.M)
        if c.phase != STATIC:
            doc = f"{c.summary}.\n\n{doc}"
        out += ["", f"## {c.code} {c.name}", "", facts, "", doc.rstrip()]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    import sys

    sys.stdout.write(render_rules_markdown())
