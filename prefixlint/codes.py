"""The one table of every code prefixlint reports, in every phase.

Each code has its name, default severity, phase, one-line summary, whether ``--fix`` can
repair it, whether it is on by default, and the source of its documentation: a static
rule's docstring (``rule:module:Class``, imported only when the documentation is asked
for), or the text itself for the phase-2 and phase-3 codes. The rule classes, the CLI
(``rules``, ``rule``), every reporter (SARIF's rule catalog, URLs) and the generated
``docs/rules.md`` read this table; it imports nothing but the ``Diagnostic`` types, so a
warm run or a reporter never pays for libcst, torch or vLLM.

Codes are a public contract: never renumber, only deprecate.
"""

from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import dataclass

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
    doc: str = ""  # "rule:module:Class" for a static rule, else the documentation itself
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
        if not self.doc.startswith("rule:"):
            return self.doc
        module, _, cls = self.doc.removeprefix("rule:").partition(":")
        rule = getattr(importlib.import_module(module), cls)
        return inspect.cleandoc(rule.__doc__ or "")


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
            doc=(
                "A note, never a finding against the model: the build failed for a "
                "reason outside the"
                " model under check (config synthesis, a missing package or kernel, a "
                "CUDA-only path,"
                " no torch/vLLM in this environment). The message says why and what "
                "would fix it (for"
                " example `--config path/to/config.json`). It does not fail the run "
                "unless `--strict`"
                " is given."
            ),
            check="prefixlint.introspect.checks.pfx600_not_verified:NotVerified",
        ),
        Code(
            "PFX601",
            "prefix-path-mismatch",
            Severity.ERROR,
            INTROSPECT,
            ("A built module's prefix differs from its path in `named_modules()`"),
            doc=(
                "The prefix a module received at construction is compared with where it ends "
                "up in the built model, over every build (layouts and explored config "
                'variants). A layer built with the default `""` where its path is not empty '
                "is a finding too. One finding per construction site, naming the first path "
                "and where else it repeats. An error when a consumer looks the name up (a "
                "`quant_config` reaches the module at its construction site, or the layer "
                "registers itself by name for the KV cache and the forward context); a "
                "note that says so when nothing does (shown with `--show-notes`, in JSON "
                "and SARIF). A container built without `prefix` "
                "is reported once, at its own construction. vLLM's conventions are accepted: "
                "wrappers handing their own name to a child (MLA, MTP), MLA's `.attn` for "
                "`mla_attn`, a draft model's `mtp`/`draft_model` namespace, attention layers "
                "of one decoder layer given unique names on purpose. Reported at the line of "
                "the model that built the module."
            ),
            check="prefixlint.introspect.checks.pfx601_prefix_path:PrefixPath",
        ),
        Code(
            "PFX602",
            "duplicate-layer-name",
            Severity.ERROR,
            INTROSPECT,
            "Two layers are registered under one name",
            doc=(
                "vLLM's own 'Duplicate layer name' error, or two leaf layers (linear, attention, "
                "embedding) given the same prefix: they would share one quantization "
                "lookup and one "
                "KV-cache slot. Usually a literal prefix, or a loop whose prefix lacks the index."
            ),
            check="prefixlint.introspect.checks.pfx602_duplicate_name:DuplicateLayerName",
        ),
        Code(
            "PFX603",
            "heads-not-divisible",
            Severity.WARNING,
            INTROSPECT,
            "Query or KV heads do not divide for a tensor-parallel size of the grid",
            doc=(
                "For each TP size of the grid, the query heads must divide by it and the KV heads "
                "must divide by it or it by them. The message names the TP sizes that work."
            ),
            check="prefixlint.introspect.checks.pfx603_heads_not_divisible:HeadsNotDivisible",
        ),
        Code(
            "PFX604",
            "construction-failed",
            Severity.ERROR,
            INTROSPECT,
            "The class raised, hung or crashed while being built for a layout",
            doc=(
                "Reported at the innermost frame in the model's own file. A hang or a crash of the "
                "worker process is reported too, never a dead run."
            ),
            check="prefixlint.introspect.checks.pfx604_construction_failed:ConstructionFailed",
        ),
        Code(
            "PFX605",
            "pp-stage-placement",
            Severity.ERROR,
            INTROSPECT,
            ("A pipeline stage builds layers it does not own, or misses the head it needs"),
            doc=(
                "At pp > 1 every stage is checked (pp 2 and 4: first, middle and last "
                "stages): layers outside the stage's range must be `PPMissingLayer` (as "
                "`make_layers` builds them) and the last stage must hold `lm_head` (errors); "
                "the embedding with parameters on a stage other than the first (and the last,"
                " for a tied head), `lm_head` on a stage other than the last, the final norm "
                "off the last stage are warnings: they cost memory, nothing breaks. Encoder "
                "towers (vision, audio) are not split across stages and are not checked."
            ),
            check="prefixlint.introspect.checks.pfx605_pipeline_stage:PipelineStage",
        ),
        Code(
            "PFX606",
            "interface-inconsistent",
            Severity.ERROR,
            INTROSPECT,
            ("A declared capability does not hold in the built model"),
            doc=(
                "`SupportsPP` without a working `make_empty_intermediate_tensors`, or whose "
                "buffers lack a key a stage's `forward` reads from `intermediate_tensors` or "
                "hold one its `IntermediateTensors({...})` never sends (errors);"
                " a `packed_modules_mapping` key that no build of any layout or explored "
                "config variant made: an error when none of its keys was built (the mapping "
                "does not describe the model), a warning per unbuilt key otherwise (nothing "
                "is packed under it; a maintainer removes it), a note where the class builds "
                "that module in a branch no explored config took or wraps a model its config "
                "chooses (one table for all of them). A key with a dot (`attn.qkv`) is a "
                "warning: vLLM looks a fused layer up by the last part of its prefix, so it "
                "never applies. The other direction too: a fused `QKVParallelLinear` or "
                "`MergedColumnParallelLinear` whose checkpoint holds the parts separately (as "
                "the dry-run's checkpoint mapping or the model's own stacked-params tables "
                "say) and that the mapping does not name, at the line that built it: an error "
                "when quantization or LoRA looks the parts up through the table, a note "
                "otherwise (nothing looks them up today). Fused MoE experts are matched by "
                "their own prefix and the expert mapping, not by this table, and are not "
                "checked."
            ),
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
            doc=(
                "At tensor-parallel size > 1 the QKV projection splits the heads across "
                "ranks; the `Attention` beside it must be given the per-rank counts (`total "
                "// tp_size`). Global counts there shape the KV cache and the attention "
                "kernel for heads this rank does not hold. Reported at the line that built "
                "the attention layer."
            ),
            check="prefixlint.introspect.checks.pfx607_per_rank_heads:PerRankHeads",
        ),
        Code(
            "PFX608",
            "engine-start-refused",
            Severity.ERROR,
            INTROSPECT,
            "vLLM's own start-up validation refuses the model",
            doc=(
                "vLLM checks a model class when its module defines it, when it makes the "
                "model config and when it binds the KV cache; a model that builds can still "
                "fail there. Phase 2 calls vLLM's own validators as vLLM calls them: "
                "`@support_torch_compile`'s inference of the dynamic dimensions of an "
                "un-annotated `forward`, the model interface the runner needs "
                "(`compute_logits` or a pooler, `embed_input_ids`, a `forward` taking "
                "`input_ids` and `positions`), and `extract_layer_index` on the name of every "
                "attention layer with a KV cache (one integer: its decoder layer's index). "
                "Reported at the line that causes the refusal, with vLLM's message."
            ),
            check="prefixlint.introspect.checks.pfx608_engine_start:EngineStart",
        ),
        Code(
            "PFX609",
            "output-mismatch",
            Severity.ERROR,
            INTROSPECT,
            "A module computes other values than transformers' model of the same config",
            doc=(
                "The model is built with real float32 weights on the CPU (tp=1, pp=1) and "
                "loaded through its own `load_weights` from the checkpoint transformers' "
                "class of the same config writes (random weights of a fixed seed, plus a "
                "tied head's duplicate and the rotary buffers real checkpoints carry). Both "
                "models run one sequence; the outputs of every module matched by checkpoint "
                "name (embeddings, decoder layers, attention, MLP, norms) and the logits are "
                "compared. The first module whose output diverges beyond a relative "
                "tolerance of 1e-3 while its input agrees is reported at the line that built "
                "it, with the size of the difference and the input. vLLM's attention backend "
                "is replaced by a reference attention that honours what the model passes to "
                "`Attention` (heads, scale, window, soft-cap). Where it cannot run (no "
                "transformers class, a layer the reference cannot run, a pooling or "
                "multimodal model), a PFX600 note says why. `--no-compare` turns it off. "
                "See docs/compare.md."
            ),
            check="prefixlint.introspect.checks.pfx609_output_mismatch:OutputMismatch",
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
            doc=(
                "The reference `transformers` class of the same config is built on the meta "
                "device; its `state_dict()` as `save_pretrained` writes it (tied copies "
                "dropped, transformers' weight conversions reverted) is what a checkpoint "
                "holds. Each tensor is streamed, as a meta tensor of the reference shape, "
                "through the model's own `load_weights` (mapper, stacked-params mapping, tie "
                "branch, skips included), and every write into a parameter is recorded with "
                "the region it covers. Reported: a tensor never loaded (at the `load_weights`"
                " that drops it), a parameter or a shard of a stacked parameter never written"
                " (at the line that built the module, or at the mapping entry that sends "
                "another tensor into its shard), and a `load_weights` that raises on a name. "
                "Where there is no reference class (remote code, a vLLM-only architecture, a "
                "plugin), the layout comes from the class of the config's model type, else "
                "from the model itself (its parameters back through its stacked-params "
                "tables, mappers and `packed_modules_mapping`); a loader that renames in code "
                "is asked which names it takes (its own constant renamings undone, a shared "
                "segment left out, a fused tensor read whole). On such a layout a parameter "
                "left unwritten is a PFX600 note (not verified), the head's skip a warning, "
                "a `load_weights` whose own code fails an error. Where a weight loader needs "
                "real data, or refuses the whole layout, a PFX600 note says so; names the "
                "model's own tables declare (a part its mapper's stacked entries, written or "
                "built, a stacked-params table or `packed_modules_mapping` stack into a fused "
                "layer it builds) are never another layout: a loader that refuses them while "
                "every other name loads is an error at its line. Runs on the tp=1 "
                "build; `--no-dryrun` turns it off. With `--checkpoint` (a folder or hub id), "
                "the checkpoint's own tensors, read from its safetensors headers, are "
                "streamed instead, through the model built under its quantization config; a "
                "quantized tensor written into a parameter of another kind of dtype (fp8 "
                "values cast into a bfloat16 weight) is reported too."
            ),
            check="prefixlint.introspect.checks.pfx701_weight_loading:WeightLoading",
        ),
        Code(
            "PFX702",
            "quantization-mismatch",
            Severity.ERROR,
            INTROSPECT,
            ("A layer's quantization method disagrees with the checkpoint's `ignored_layers`"),
            doc=(
                "Using the checkpoint-name to module mapping PFX701 recorded, the model is "
                "built twice more under vLLM's real `Fp8Config`, whose `ignored_layers` name "
                "alternate kinds of checkpoint linear layers (so every layer is checked once "
                "ignored, once quantized). Every linear layer built with a quant config must "
                "get `UnquantizedLinearMethod` exactly when all the checkpoint layers it "
                "loads are ignored. A mismatch names the checkpoint layers, the module and "
                "its prefix, and the cause: a prefix that is not the module's path, a "
                "`packed_modules_mapping` without (or with a wrong) entry for a fused layer, "
                "or a renamed layer no `hf_to_vllm_mapper` entry covers. Layers built with "
                "`quant_config=None` (a model that opts a layer out) and fused MoE experts "
                "are not judged. With `--checkpoint`, the model is built once under the "
                "checkpoint's real quantization config (any method the installed vLLM builds"
                " here; one it cannot is a PFX600 note), and every layer with a weight "
                "quantization method (linear layers, heads, experts) must be quantized "
                "exactly when the checkpoint stores it quantized (tensors an unquantized "
                "layer has no parameter for, or a weight of a quantized dtype); a layer "
                "built without its `quant_config` and a kind of layer the method cannot "
                "quantize are named as causes too."
            ),
            check="prefixlint.introspect.checks.pfx702_quantization:Quantization",
        ),
        Code(
            "PFX703",
            "lora-target-unmapped",
            Severity.ERROR,
            INTROSPECT,
            "vLLM's LoRA loader refuses or drops an adapter module the model should take",
            doc=(
                "For a model that declares `SupportsLoRA`, an adapter (`--lora`: a PEFT "
                "folder or hub id, `adapter_config.json` and the safetensors header only; "
                "without it, a synthetic adapter training every linear layer of the "
                "checkpoint the dry-run streamed) is matched on the tp=1 meta build with "
                "vLLM's own functions, as its LoRA loader and manager match it: the expected "
                "names (`get_supported_lora_modules` with fused layers replaced by their "
                "`packed_modules_mapping` parts), each adapter tensor's module "
                "(`parse_fine_tuned_lora_name` under `hf_to_vllm_mapper.get_rename_mapper()`,"
                " `lora_skip_prefixes`), and the module the manager gives it to "
                "(`is_supported_lora_module`, the LoRA layers' `can_replace_layer`). "
                "Reported at the model's line: a fused layer whose `packed_modules_mapping` "
                "lacks a part the adapter trains (at the line that built it; a missing entry "
                "PFX606 reports is confirmed there instead), a module the loader renames in "
                "code but LoRA's renames do not reach, a target no module of the model is, a "
                "module no LoRA layer can replace (its adapter weights are dropped "
                "silently), an embedding `embedding_modules` does not list, a "
                "`modules_to_save` classification head the model does not expose. What vLLM "
                "refuses in the adapter itself (DoRA, a bias, other `modules_to_save`) is a "
                "PFX600 note, as is a vLLM without these functions."
            ),
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
