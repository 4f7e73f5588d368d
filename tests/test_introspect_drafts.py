"""Speculative-decoding drafts are built as vLLM derives them: the MTP triggers are read
from vLLM's own ``SpeculativeConfig.hf_config_override``, a draft whose name no EAGLE
renaming yields is reached by the method that keeps it, and a draft that needs Model
Runner V2 says so precisely. Pure functions on hand-written sources first; then the
installed vLLM's source; then real builds (slow)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prefixlint.introspect.drafts.mtp import (
    _keep_zeros,
    model_types,
    sections_in,
    triggers_in,
    with_mtp_layers,
)
from prefixlint.introspect.verdict.gaps import describe, fix_hint, runner_v2_reason
from tests.conftest import requires_vllm

# The shapes hf_config_override uses, hand-written: a type rewritten to an MTP type in
# one block and mapped to the architecture in another; a tuple test; a nested section.
OVERRIDE = """
def hf_config_override(hf_config):
    if hf_config.model_type in ("base_moe"):
        hf_config.model_type = "base_moe_mtp"
    if hf_config.model_type == "base_moe_mtp":
        n = getattr(hf_config, "num_nextn_predict_layers", None)
        hf_config.update({"n_predict": n, "architectures": ["BaseMTPModel"]})
    if hf_config.model_type in ("assist", "assist_unified"):
        hf_config.update({"architectures": ["AssistMTPModel"]})
    if hf_config.model_type in ("mm_model", "text_model"):
        mtp_config = getattr(hf_config, "mtp_config", None) or {}
        depth = mtp_config.get("num_nextn_predict_layers", 0)
        hf_config.update({"n_predict": depth, "architectures": ["SectionMTPModel"]})
    if hf_config.model_type == "nested":
        text_config = hf_config.get_text_config()
        hf_config.update({"n_predict": text_config.num_nextn_predict_layers,
                          "architectures": ["NestedMTPModel"]})
    if hf_config.architectures[0] == "OtherForCausalLM":
        hf_config.update({"architectures": ["OtherMTPModel"]})
    return hf_config
"""


def test_triggers_follow_model_type_rewrites_back_to_the_target_type() -> None:
    found = triggers_in(OVERRIDE, "BaseMTPModel")
    assert {"base_moe", "base_moe_mtp"} <= found
    # the target's type first, the standalone MTP checkpoint's after
    assert model_types(found) == ["base_moe", "base_moe_mtp"]


def test_triggers_of_tuple_tests_and_architecture_tests() -> None:
    assert triggers_in(OVERRIDE, "AssistMTPModel") == {"assist", "assist_unified"}
    assert triggers_in(OVERRIDE, "OtherMTPModel") == {"OtherForCausalLM"}
    assert model_types({"OtherForCausalLM"}) == []  # an architecture, not a type
    assert triggers_in(OVERRIDE, "UnknownMTPModel") == set()


def test_sections_where_the_override_reads_the_layer_count() -> None:
    assert sections_in(OVERRIDE, "SectionMTPModel") == ["mtp_config"]
    assert sections_in(OVERRIDE, "NestedMTPModel") == ["text_config"]
    assert sections_in(OVERRIDE, "BaseMTPModel") == []  # read on hf_config itself


def test_with_mtp_layers_fills_sections_sub_configs_and_zero_counts(tmp_path: Path) -> None:
    config = {
        "model_type": "x",
        "mtp_config": None,
        "text_config": {"hidden_size": 8},
        "vision_config": {"mtp_num_hidden_layers": 0},
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    with_mtp_layers(str(tmp_path), ["mtp_config", "text_config"])
    data = json.loads((tmp_path / "config.json").read_text())
    assert data["mtp_config"] == {"num_nextn_predict_layers": 1}
    assert data["text_config"]["num_nextn_predict_layers"] == 1
    assert data["vision_config"] == {"mtp_num_hidden_layers": 1}  # a count it had, now 1
    assert data["num_nextn_predict_layers"] == 1


def test_with_mtp_layers_keeps_a_section_that_has_its_own_count(tmp_path: Path) -> None:
    config = {"model_type": "x", "text_config": {"mtp_num_hidden_layers": 0}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with_mtp_layers(str(tmp_path), ["text_config"])
    data = json.loads((tmp_path / "config.json").read_text())
    assert data["text_config"] == {"mtp_num_hidden_layers": 1}


def test_shrinking_never_turns_a_zero_size_on() -> None:
    kw = {"qk_rope_head_dim": 16, "hidden_size": 64, "text_config": {"rope": 16, "heads": 4}}
    defaults = {"qk_rope_head_dim": 0, "hidden_size": 4096, "text_config": {"rope": 0}}
    assert _keep_zeros(kw, defaults) == {"hidden_size": 64, "text_config": {"heads": 4}}


def test_equal_sizes_demanded_by_a_validator_are_set_where_the_first_lives() -> None:
    from prefixlint.introspect.configs.relations import fix_overrides

    kw = {"vocab_size": 64, "text_config": {"num_attention_heads": 16, "num_key_value_heads": 8}}
    message = "num_attention_heads (16) must be the same as num_key_value_heads (8)"
    fixed = fix_overrides(message, kw)
    assert fixed is not None and fixed["text_config"]["num_key_value_heads"] == 16
    assert "num_key_value_heads" not in fixed
    # the second size left to the class's default: given where the first lives
    fixed = fix_overrides(message, {"text_config": {"num_attention_heads": 16}})
    assert fixed == {"text_config": {"num_attention_heads": 16, "num_key_value_heads": 16}}
    assert fix_overrides(message, {"hidden_size": 128}) is None


# As vLLM 0.32 words them (config/vllm.py, models/longcat_flash_ngram.py).
V1_REFUSAL = (
    "1 validation error for VllmConfig\n  Value error, Model Runner V1 does not support: "
    "dspark speculative decoding [type=value_error, input_value=ArgsKwargs(()), "
    "input_type=ArgsKwargs]"
)
NEEDS_V2 = (
    "LongcatFlashNgramForCausalLM (LongCat-Flash-Lite) requires the V2 model runner for "
    "its n-gram embedding state; it is selected automatically unless "
    "VLLM_USE_V2_MODEL_RUNNER=0 is set."
)


def test_model_runner_v2_reason_names_the_feature_and_what_is_needed() -> None:
    reason = runner_v2_reason(V1_REFUSAL)
    assert "Model Runner V2 (dspark speculative decoding:" in reason
    assert "Triton" in reason and "[type=" not in reason
    assert describe(ValueError(V1_REFUSAL)) == reason
    assert "Model Runner V2 (this model:" in runner_v2_reason(NEEDS_V2)
    assert runner_v2_reason("AttributeError: 'X' object has no attribute 'y'") == ""
    hint = fix_hint("environment", reason, synthesised=True)
    assert "Triton finds a GPU" in hint


@requires_vllm
def test_installed_vllm_override_names_a_target_type_for_its_mtp_drafts() -> None:
    """Every draft architecture hf_config_override names gets its trigger types from the
    installed vLLM's own source (no table in prefixlint)."""
    from prefixlint.introspect.process import env

    env.prepare()
    from prefixlint.introspect.drafts.mtp import _override_source, override_triggers

    source = _override_source()
    if not source:
        pytest.skip("this vLLM has no SpeculativeConfig.hf_config_override")
    from vllm.model_executor.models.registry import _SPECULATIVE_DECODING_MODELS

    named = [a for a in _SPECULATIVE_DECODING_MODELS if f'"{a}"' in source]
    assert named, "hf_config_override names no registered draft"
    for arch in named:
        assert override_triggers(arch), arch


@pytest.mark.slow
@requires_vllm
@pytest.mark.parametrize(
    ("arch", "method"),
    [
        # vLLM renames an EAGLE draft's architecture (EaglePeagleQwen3ForCausalLM is not
        # registered): the method that keeps the name builds it
        ("PeagleQwen3ForCausalLM", "draft_model"),
        # the MTP section (mtp_config) and the bfloat16 target come from vLLM's code
        ("InklingMTPModel", "mtp"),
    ],
)
def test_drafts_reached_by_what_vllm_derives_them_from(worker, arch: str, method: str) -> None:
    from prefixlint.introspect import introspect

    report = introspect(arch, tp=(1,), pp=(1,), worker=worker, explore_budget=0)
    [result] = report.results
    assert result["status"] == "built", result
    assert f"synthesised draft ({method})" in result["config_source"]
    assert "architecture forced" not in result["config_source"]


def test_per_layer_maps_keep_the_layers_of_the_shrunk_config() -> None:
    from prefixlint.introspect.drafts.mtp import _trim_layer_maps

    values = {"num_hidden_layers": 4, "per_layer_config": {"1": {"a": 1}, "5": {"a": 2}}}
    assert _trim_layer_maps(values)["per_layer_config"] == {"1": {"a": 1}}
    assert _trim_layer_maps({"rope_scaling": {"type": "x"}})["rope_scaling"] == {"type": "x"}


def test_must_be_validators_set_the_value_in_the_sub_config_that_has_it() -> None:
    from prefixlint.introspect.configs.synthesis import _with_stated_value

    kw = {"text_config": {"hidden_size_per_layer_input": 256}, "vision_config": {}}
    error = ValueError("hidden_size_per_layer_input must be 0, got 256")
    fixed = _with_stated_value(error, kw)
    assert fixed is not None and fixed["text_config"]["hidden_size_per_layer_input"] == 0
    assert "hidden_size_per_layer_input" not in fixed["vision_config"]
    assert kw["text_config"]["hidden_size_per_layer_input"] == 256  # a copy changed
    # a default the shrunk dicts do not carry: set in every sub-config
    fixed = _with_stated_value(ValueError("enable_moe_block must be False, got True"), kw)
    assert fixed is not None and fixed["text_config"]["enable_moe_block"] is False
    assert fixed["vision_config"]["enable_moe_block"] is False and "enable_moe_block" not in fixed
    assert _with_stated_value(ValueError("unrelated"), kw) is None


def _raise_at(source: str, config: object, exc_name: str = "") -> BaseException:
    """Run ``source`` (a model-like line reading ``config``) from a real file, so the
    traceback's line is what the repair reads."""
    import linecache
    import tempfile

    path = Path(tempfile.mkdtemp()) / "model_like.py"
    path.write_text(source)
    linecache.checkcache(str(path))
    code = compile(source, str(path), "exec")
    try:
        exec(code, {"config": config})
    except Exception as e:
        return e
    raise AssertionError("no error")


def test_repair_gives_a_section_the_key_the_failing_function_indexes() -> None:
    from transformers import PretrainedConfig

    from prefixlint.introspect.configs import repair

    config = PretrainedConfig()
    config.dflash_config = {"mask_token_id": 1}
    source = (
        "def build(config):\n"
        "    draft_config = config.dflash_config\n"
        "    taps = int(draft_config['conv_kernel_size'])\n"
        "build(config)\n"
    )
    error = _raise_at(source, config)
    assert isinstance(error, KeyError)
    assert repair(error, [config]) == "dflash_config.conv_kernel_size"
    assert isinstance(config.dflash_config["conv_kernel_size"], int)


@pytest.mark.parametrize(
    ("line", "attr", "value"),
    [
        ("assert config.yoco_global_kv_layer is None\n", "yoco_global_kv_layer", None),
        ("assert len(config.moe_layers) == 0\n", "moe_layers", []),
    ],
)
def test_repair_gives_what_the_line_requires_of_an_absent_feature(line, attr, value) -> None:
    from transformers import PretrainedConfig

    from prefixlint.introspect.configs import repair

    config = PretrainedConfig()
    error = _raise_at(line, config)
    assert isinstance(error, AttributeError)
    assert repair(error, [config]) == attr
    assert getattr(config, attr) == value


@requires_vllm
def test_draft_fields_come_from_vllms_own_speculators_converter(tmp_path: Path) -> None:
    from prefixlint.introspect.process import env

    env.prepare()
    from prefixlint.introspect.drafts.plan import seed_method_fields

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": 64}))
    added = seed_method_fields(str(tmp_path), "DFlash2DraftModel", "dflash")
    data = json.loads((tmp_path / "config.json").read_text())
    assert "dflash_config" in added and "architectures" not in data
    assert data["dflash_config"]["target_layer_ids"]  # aux ids mapped by vLLM (i - 1)
    assert data["vocab_size"] == 64  # what the config had is kept
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert seed_method_fields(str(tmp_path), "MedusaModel", "medusa") == []


@requires_vllm
def test_an_eagle_draft_takes_its_targets_shape_only_when_its_module_reads_it(
    tmp_path: Path,
) -> None:
    from prefixlint.introspect.process import env

    env.prepare()
    from vllm.model_executor.models.deepseek_eagle3 import Eagle3DeepseekV2ForCausalLM
    from vllm.model_executor.models.llama_eagle import EagleLlamaForCausalLM

    from prefixlint.introspect.drafts.plan import target_shaped

    mine, theirs = tmp_path / "draft", tmp_path / "target"
    mine.mkdir()
    theirs.mkdir()
    (mine / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 1}))
    target = {"model_type": "deepseek_v2", "num_hidden_layers": 4, "qk_nope_head_dim": 16}
    (theirs / "config.json").write_text(json.dumps(target))
    arch = "Eagle3DeepseekV2ForCausalLM"
    shaped = target_shaped(str(mine), str(theirs), arch, Eagle3DeepseekV2ForCausalLM)
    data = json.loads((Path(shaped) / "config.json").read_text())
    assert data["qk_nope_head_dim"] == 16 and data["architectures"] == [arch]
    assert data["num_hidden_layers"] == 1  # the draft's own layer count
    # a Llama draft reads nothing a Llama guess lacks: kept
    arch = "EagleLlamaForCausalLM"
    assert target_shaped(str(mine), str(theirs), arch, EagleLlamaForCausalLM) == str(mine)
    # a type vLLM rewrites into an MTP draft (deepseek_v3): kept, vLLM would rename it
    (theirs / "config.json").write_text(json.dumps({**target, "model_type": "deepseek_v3"}))
    arch = "Eagle3DeepseekV2ForCausalLM"
    assert target_shaped(str(mine), str(theirs), arch, Eagle3DeepseekV2ForCausalLM) == str(mine)


@pytest.mark.slow
@requires_vllm
@pytest.mark.parametrize(
    ("arch", "source"),
    [
        # Model Runner V1 refuses DSpark: built under V2, and the source says so
        ("Qwen3DSparkModel", "Model Runner V2 selected"),
        # an assistant checkpoint (gemma4_assistant) beside its target, from vLLM's code
        ("Gemma4MTPModel", "synthesised draft (mtp) of Gemma4ForCausalLM"),
        # an MLA draft shaped like its DeepSeek target
        ("Eagle3DeepseekV2ForCausalLM", "synthesised draft (eagle3) of DeepseekV2"),
        # a guessed attribute the MTP layer reads on the target's config
        ("HYV3MTPModel", "guessed"),
    ],
)
def test_drafts_built_by_the_mechanisms(worker, arch: str, source: str) -> None:
    from prefixlint.introspect import introspect

    report = introspect(arch, tp=(1,), pp=(1,), worker=worker, explore_budget=0)
    [result] = report.results
    assert result["status"] == "built", result
    assert source in result["config_source"]


def test_a_drafts_attention_numbered_on_from_the_targets_is_the_convention() -> None:
    from prefixlint.introspect.drafts.plan import target_layer_offset

    at = "model.layers.0.self_attn.attn"  # PFX601's facts: the path and the prefix given
    assert target_layer_offset(at, "model.layers.4.self_attn.attn", 4)
    assert target_layer_offset("model.layers.1", "model.layers.5", 4)
    assert not target_layer_offset(at, "model.layers.3.self_attn.attn", 4)  # off by one
    assert not target_layer_offset(at, "model.layers.4.attn", 4)  # a segment lost
    assert not target_layer_offset(at, "model.layers.4.self_attn.attn", 0)
    assert not target_layer_offset("model.norm", "model.norm", 4)  # no layer number
    assert not target_layer_offset(at, None, 4)


@pytest.mark.slow
@requires_vllm
@pytest.mark.parametrize("arch", ["DFlashLagunaForCausalLM", "Eagle3DeepseekV2ForCausalLM"])
def test_draft_naming_conventions_are_not_findings(worker, arch: str) -> None:
    """Laguna's draft names only its attention on from the target's layers; DeepSeek's
    MLA wrapper hands down the (numbered-on) name its attention received."""
    from prefixlint.introspect import introspect

    report = introspect(arch, tp=(1,), pp=(1,), worker=worker, explore_budget=0)
    assert report.results[0]["status"] == "built", report.results[0]
    assert not [d for d in report.diagnostics if d.code == "PFX601"], report.diagnostics


def test_a_bare_assertion_is_described_by_the_line_that_raised_it() -> None:
    error = _raise_at("rope_parameters = None\nassert rope_parameters is not None\n", None)
    assert describe(error) == (
        "AssertionError: assert rope_parameters is not None (model_like.py:2)"
    )
    assert describe(AssertionError()) == "AssertionError: "  # no traceback: as before


def test_a_drafts_missing_pp_method_is_a_note() -> None:
    """A draft that declares ``SupportsPP`` (inherited from its target's class) without
    ``make_empty_intermediate_tensors``: vLLM runs drafts beside the last stage, so
    nothing calls it today. PFX606's unit reads the draft's policy (data, not a rewrite
    of its finding afterwards): a note for a draft, an error for a model, and a draft
    that were pipelined would be an error again."""
    from types import SimpleNamespace

    from torch import nn

    from prefixlint.introspect.checks.base import Findings, Subject
    from prefixlint.introspect.checks.pfx606_interface import PipelineInterface
    from prefixlint.introspect.drafts.plan import DraftPolicy

    class EagleX(nn.Module):
        supports_pp = True

    layout = SimpleNamespace(tp=1, pp=1, name="tp=1,pp=1")
    build = SimpleNamespace(layout=layout, model=EagleX(), error=None, variant="")

    def judged(draft: DraftPolicy | None) -> tuple[str, str]:
        subject = Subject(EagleX, None, class_site=("m.py", 1), draft=draft)
        out = Findings()
        PipelineInterface().check([build], subject, out)
        (found,) = out.finish()
        return found.severity, found.message

    severity, text = judged(DraftPolicy(layer_offset=4))
    assert severity == "note" and "only once drafts are pipelined" in text
    severity, text = judged(None)
    assert severity == "error" and "pipelined" not in text
    assert judged(DraftPolicy(layer_offset=4, pipelined=True)) == (severity, text)
    assert DraftPolicy(4).numbered_on("model.layers.0", "model.layers.4")
    assert not DraftPolicy(4).numbered_on("model.layers.0", "model.layers.3")
