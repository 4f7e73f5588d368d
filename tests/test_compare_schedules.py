"""Config variants of a model's shape that the synthesised config hides
(``bench/history_bugs.py``'s falcon-kv-heads, vllm#1164, and qwen2moe-mlp-only-layers,
vllm#4774).

Fast: the layer schedules transformers' modeling source compares with a layer index,
moved into variants whether the model reads them or not; Falcon's ``num_kv_heads``
(equal to the query heads in its class) set apart, ``num_key_value_heads`` not; a
variant whose checkpoint the model's loader refuses where the config itself loads is
PFX609 at the refused module, and not where the config itself did not load.
Slow (real vLLM, one worker): Falcon's KV heads read as the query heads on the new
decoder architecture, and Qwen2-MoE's ``mlp_only_layers`` ignored, each give PFX609 at
the module's line; the clean files give none."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from tests.conftest import requires_vllm
from tests.test_compare import _line, _replace, model_copy

pytestmark = requires_vllm


def test_layer_schedules_come_from_transformers_modeling_source() -> None:
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3ForCausalLM
    from transformers.models.llama.modeling_llama import LlamaForCausalLM
    from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeForCausalLM

    from prefixlint.introspect.compare.schedules import schedule_attributes

    assert dict(schedule_attributes(Qwen2MoeForCausalLM)) == {
        "mlp_only_layers": "member",
        "decoder_sparse_step": "step",
    }
    assert dict(schedule_attributes(DeepseekV3ForCausalLM)) == {"first_k_dense_replace": "bound"}
    assert schedule_attributes(LlamaForCausalLM) == ()


def test_a_schedule_the_model_does_not_read_still_gets_a_variant() -> None:
    """The variant comes from transformers' reads, not the model's: a file that reads
    neither attribute (here, none at all) still gets both moved."""
    from transformers import Qwen2MoeConfig
    from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeForCausalLM

    from prefixlint.introspect.compare.variants import comparison_variants

    config = Qwen2MoeConfig(num_hidden_layers=2)
    model_config = SimpleNamespace(hf_config=config, hf_text_config=config)
    found = comparison_variants(model_config, [], None, Qwen2MoeForCausalLM)
    labels = {v.label: v for v in found}
    assert labels["mlp_only_layers=[0]"].overrides == {"mlp_only_layers": [0]}
    assert labels["decoder_sparse_step=2"].overrides == {"decoder_sparse_step": 2}
    assert not labels["mlp_only_layers=[0]"].latent  # the served model's shape: an error
    # without a reference class nothing says which schedules exist
    assert not [v for v in comparison_variants(model_config, [], None) if "layers" in v.label]


def test_schedules_displace_none_of_the_other_variants() -> None:
    from prefixlint.introspect.compare.variants import (
        MAX_SCHEDULES,
        MAX_VARIANTS,
        CompareVariant,
        chosen,
    )

    others = [CompareVariant({f"f{i}": True}, f"f{i}=True") for i in range(MAX_VARIANTS + 2)]
    schedules = [
        CompareVariant({f"s{i}": 2}, f"s{i}=2", served="always", schedule=True)
        for i in range(MAX_SCHEDULES + 1)
    ]
    run = chosen(others + schedules)
    assert run == others[:MAX_VARIANTS] + schedules[:MAX_SCHEDULES]


def test_a_mode_that_may_be_a_string_is_no_flag_whose_refusal_is_reported() -> None:
    """Laguna's ``gating: bool | str`` (``"per-head"``, ``"per-element"``): its flipped
    value is varied, a refused checkpoint of it is not the model's; Falcon's
    ``new_decoder_architecture`` is a flag."""
    from transformers import FalconConfig
    from transformers.models.laguna.configuration_laguna import LagunaConfig

    from prefixlint.introspect.compare.variants import _declared_bool

    assert not _declared_bool(LagunaConfig, "gating")
    assert _declared_bool(FalconConfig, "new_decoder_architecture")


def test_kv_heads_under_another_name_are_set_apart() -> None:
    from transformers import FalconConfig, LlamaConfig
    from transformers.models.falcon.modeling_falcon import FalconForCausalLM
    from transformers.models.llama.modeling_llama import LlamaForCausalLM

    from prefixlint.introspect.compare.kvheads import grouped

    falcon = FalconConfig(hidden_size=128, num_attention_heads=16)
    assert falcon.num_kv_heads == 16  # derived from the query heads
    model_config = SimpleNamespace(hf_config=falcon, hf_text_config=falcon)
    assert grouped(model_config, FalconForCausalLM) == {"num_kv_heads": 8}
    # the standard name is synthesis's (and ``kv_heads_as_built``'s): left alone
    llama = LlamaConfig(num_attention_heads=16, num_key_value_heads=16)
    model_config = SimpleNamespace(hf_config=llama, hf_text_config=llama)
    assert grouped(model_config, LlamaForCausalLM) == {}


def _comparisons(base_status: str):
    from prefixlint.introspect.compare.facts import Comparison, Reason, Refusal, Status

    base = Comparison(Status(base_status)) if base_status != "not run" else None
    base = base or Comparison.not_run(Reason.LOAD_FAILED, "RuntimeError: size")
    variant = Comparison.not_run(Reason.LOAD_FAILED, "RuntimeError: start + length")
    variant.variant = "new_decoder_architecture=True"
    site = ("model.py", 132)
    variant.refusal = Refusal("h.0.qkv.weight", "h.0.qkv", site, "RuntimeError: x", "changed")
    base.shapes = {"h.0.qkv.weight": (48, 16)}
    variant.shapes = {"h.0.qkv.weight": (32, 16)}  # the model reads the flag
    return base, variant


def test_a_variant_s_refused_checkpoint_is_pfx609_where_the_config_loads() -> None:
    from prefixlint.introspect.checks.pfx609_output_mismatch import OutputMismatch

    base, variant = _comparisons("equal")
    [finding] = OutputMismatch().on_variants(base, [variant], None)
    assert (finding.code, finding.severity, finding.line) == ("PFX609", "error", 132)
    assert "new_decoder_architecture=True" in finding.message
    assert "h.0.qkv.weight" in finding.message
    # the config itself did not load: the variant's failure says nothing more
    base, variant = _comparisons("not run")
    assert OutputMismatch().on_variants(base, [variant], None) == []
    # not the model's: a flag its build ignores (the same parameters), an explorer's variant
    base, variant = _comparisons("equal")
    variant.shapes = base.shapes
    assert OutputMismatch().on_variants(base, [variant], None) == []
    base, variant = _comparisons("equal")
    variant.refusal = dataclasses.replace(variant.refusal, served="")
    assert OutputMismatch().on_variants(base, [variant], None) == []
    # a layer schedule: the model's whatever it builds
    base, variant = _comparisons("equal")
    variant.refusal = dataclasses.replace(variant.refusal, served="always")
    variant.shapes = base.shapes
    assert len(OutputMismatch().on_variants(base, [variant], None)) == 1


def _introspect(worker, target: str):
    from prefixlint.introspect import introspect

    return introspect(target, tp=(1,), pp=(1,), worker=worker, dryrun=False)


def _pfx609(report) -> list[tuple[int, str, str]]:
    found = [d for d in report.diagnostics if d.code == "PFX609"]
    return [(d.location.row, d.severity, d.message) for d in found]


@pytest.mark.slow
def test_falcon_s_kv_heads_read_as_the_query_heads(worker, tmp_path) -> None:
    """Falcon-40B's new decoder architecture with fewer KV heads than heads; a model that
    takes the query heads for its KV heads (vllm#1164) builds a wider fused QKV than the
    checkpoint holds."""
    clean, _ = model_copy(tmp_path, "falcon.py", lambda text: text)
    assert _pfx609(_introspect(worker, f"{clean}:FalconForCausalLM")) == []
    bug = _replace(
        "FalconAttention",
        "self.total_num_kv_heads = config.num_kv_heads",
        "self.total_num_kv_heads = self.total_num_heads",
    )
    path, text = model_copy(tmp_path, "falcon.py", bug)
    found = _pfx609(_introspect(worker, f"{path}:FalconForCausalLM"))
    line = _line(text, "FalconAttention", "self.query_key_value = QKVParallelLinear(")
    assert [(row, severity) for row, severity, _ in found] == [(line, "error")], found
    assert "new_decoder_architecture=True" in found[0][2]


@pytest.mark.slow
def test_qwen2_moe_s_mlp_only_layers_ignored(worker, tmp_path) -> None:
    """Dense MLPs in the layers ``mlp_only_layers`` lists; a model that builds an MoE block
    there (vllm#4774) refuses the dense MLP's checkpoint tensors."""
    clean, _ = model_copy(tmp_path, "qwen2_moe.py", lambda text: text)
    assert _pfx609(_introspect(worker, f"{clean}:Qwen2MoeForCausalLM")) == []
    bug = _replace("Qwen2MoeDecoderLayer", "if (layer_idx not in mlp_only_layers) and (", "if (")
    path, text = model_copy(tmp_path, "qwen2_moe.py", bug)
    found = _pfx609(_introspect(worker, f"{path}:Qwen2MoeForCausalLM"))
    line = _line(text, "Qwen2MoeDecoderLayer", "self.mlp = Qwen2MoeSparseMoeBlock(")
    assert [(row, severity) for row, severity, _ in found] == [(line, "error")], found
    assert "mlp_only_layers=[0]" in found[0][2]
