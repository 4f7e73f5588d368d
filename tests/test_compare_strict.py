"""The reference's config under transformers' strict config classes (``compare/strict.py``),
and a reference that fails on a model whose layer the CPU cannot run anyway
(``compare._layer_gap_first``). Fast: the spelling of refused values with transformers'
own ``DeepseekV4Config``/``DeepseekV32Config``; slow: DeepSeek V4 on its synthesised
config is not compared, and its note names the CPU attention layer."""

from __future__ import annotations

import pytest

from tests.conftest import requires_vllm
from tests.test_compare import _introspect
from tests.test_compare_mla import _compared

pytestmark = requires_vllm


def test_a_refused_value_is_spelled_as_the_declared_type_with_the_same_meaning() -> None:
    """``norm_topk_prob`` is a declared bool, ``routed_scaling_factor`` a float and
    ``num_hidden_layers`` an int: a number, an int and an integral float are refused as
    they are, and accepted as their truth value, float and int. Accepted values and
    names the class does not declare are left as they are."""
    from huggingface_hub.errors import StrictDataclassFieldValidationError
    from transformers import DeepseekV4Config

    from prefixlint.introspect.compare.strict import accepted

    given = {
        "norm_topk_prob": 2,
        "routed_scaling_factor": 2,
        "num_hidden_layers": 4.0,
        "hidden_size": 64,
        "compress_ratios": [0, 0, 0, 0],  # a legacy name: no field, no check
    }
    with pytest.raises(StrictDataclassFieldValidationError):
        DeepseekV4Config.from_dict(dict(given))
    out = accepted(DeepseekV4Config, given)
    assert out["norm_topk_prob"] is True
    assert out["routed_scaling_factor"] == 2.0 and isinstance(out["routed_scaling_factor"], float)
    assert out["num_hidden_layers"] == 4 and type(out["num_hidden_layers"]) is int
    assert out["hidden_size"] == 64 and out["compress_ratios"] == [0, 0, 0, 0]
    assert given["norm_topk_prob"] == 2  # a copy
    config = DeepseekV4Config.from_dict(out)
    assert config.norm_topk_prob is True and config.num_hidden_layers == 4
    assert accepted(DeepseekV4Config, {"norm_topk_prob": 0.0})["norm_topk_prob"] is False
    assert accepted(DeepseekV4Config, {"norm_topk_prob": None})["norm_topk_prob"] is False


def test_a_value_no_spelling_makes_acceptable_is_refused_with_the_declared_type() -> None:
    """transformers' DeepSeek V3.2 always builds the query LoRA (``q_lora_rank: int``):
    None (no LoRA, which vLLM's model builds) is no value of it, and a fractional float
    is no int. The refusal names the field and its type; nothing is made up."""
    from transformers import DeepseekV32Config

    from prefixlint.introspect.compare.strict import Refused, accepted

    with pytest.raises(Refused, match=r"DeepseekV32Config declares `q_lora_rank: int`.*None"):
        accepted(DeepseekV32Config, {"q_lora_rank": None})
    with pytest.raises(Refused, match=r"`num_hidden_layers: int`.*2\.5"):
        accepted(DeepseekV32Config, {"num_hidden_layers": 2.5})


def test_a_head_dim_of_none_is_the_head_size_vllm_derives() -> None:
    """vLLM's config convertor reads ``head_dim: None`` as ``hidden_size //
    num_attention_heads`` (``get_head_size``; vLLM's ``BeamConfig`` holds None, its model
    derives the quotient). transformers' ``Cohere2MoeConfig`` declares ``head_dim: int``:
    the reference's copy holds the quotient, and no other field's None is spelled so."""
    from transformers import Cohere2MoeConfig

    from prefixlint.introspect.compare.strict import Refused, accepted

    values = {"hidden_size": 64, "num_attention_heads": 4, "head_dim": None}
    assert accepted(Cohere2MoeConfig, values) == {**values, "head_dim": 16}
    Cohere2MoeConfig(**accepted(Cohere2MoeConfig, values))  # the class takes it
    with pytest.raises(Refused, match=r"`head_dim: int`.*None"):  # no quotient: refused
        accepted(Cohere2MoeConfig, {**values, "hidden_size": 66})


def test_a_class_that_is_not_strict_has_no_checks() -> None:
    from prefixlint.introspect.compare.strict import accepted, field_checks

    class Plain:
        flag: bool = True

    assert field_checks(Plain) == {}
    assert accepted(Plain, {"flag": 2}) == {"flag": 2}


def test_the_reference_config_of_vllm_s_own_class_takes_a_guess_of_another_type() -> None:
    """vLLM's ``DeepseekV4Config`` declares nothing of the model: synthesis guesses a
    number for ``norm_topk_prob``, which vLLM reads as a truth value. transformers' class
    of the reference gets it as a bool; the config the model is built with keeps it."""
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM
    from vllm.transformers_utils.configs.deepseek_v4 import DeepseekV4Config as Ours

    from prefixlint.introspect.compare.reference import _own_config

    ours = Ours(norm_topk_prob=2, num_hidden_layers=2, hidden_size=64)
    theirs = _own_config(DeepseekV4ForCausalLM, ours)
    assert isinstance(theirs, DeepseekV4Config)
    assert theirs.norm_topk_prob is True and theirs.hidden_size == 64
    assert ours.norm_topk_prob == 2


@pytest.mark.slow
def test_deepseek_v4_is_not_compared_for_its_cpu_attention(worker) -> None:
    """Its reference config now reads (above), then fails on the guessed compression
    ratio 1 (transformers' table holds 0, 4 and 128); either way vLLM's CPU attention of
    the model (an FP8 paged KV cache, ``flash_mla_with_kvcache_cpu``) is no layer the CPU
    reference runs. The note says that layer, with the reference's failure after it."""
    report = _introspect(worker, "DeepseekV4ForCausalLM")
    compared = _compared(report)
    assert compared["status"] == "not run", compared
    assert compared["reason"] == "unsupported_layer", compared
    assert compared["detail"].startswith("DeepseekV4CPUAttention"), compared
    assert "the reference failed too: DeepseekV4ForCausalLM:" in compared["detail"]
    assert "Validation error" not in compared["detail"]  # its config now reads
    notes = [d.message for d in report.diagnostics if d.code == "PFX600"]
    assert any("a layer the CPU reference cannot run (DeepseekV4CPUAttention" in n for n in notes)
    assert not [d for d in report.diagnostics if d.code == "PFX609"]
