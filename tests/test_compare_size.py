"""Issue 38, fourth round: architectures the comparison did not run. Llama 4 and
LongCat-Flash were too large even on the comparison's smaller config (``smaller.py``: now
fewer layers, the widths synthesis left at the class default, the family's top-k); LongCat's
zero experts (``reference.py``'s checkpoint, ``routing.py``'s router). (MLA on a host with
AMX tiles: ``tests/test_compare_mla_family.py``.)"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from tests.conftest import requires_vllm
from tests.test_compare import _introspect, _replace, assert_one_pfx609_at, model_copy

pytestmark = requires_vllm


def _model_config(config: object) -> SimpleNamespace:
    return SimpleNamespace(hf_config=config, hf_text_config=config)


def _llama4(**kw) -> object:
    from transformers import Llama4TextConfig

    # as synthesis leaves it: 128 wide, but every layer kept (its ``moe_layers`` lists
    # all 48) and 2 experts per token
    values = dict(hidden_size=128, intermediate_size=256, head_dim=16, num_attention_heads=16)
    values |= dict(num_key_value_heads=8, vocab_size=512, num_local_experts=8)
    values |= dict(num_hidden_layers=48, num_experts_per_tok=2, moe_layers=list(range(48)))
    return Llama4TextConfig(**(values | kw))


def test_a_config_synthesis_left_deep_is_compared_on_its_first_layers() -> None:
    """Llama 4's synthesised config keeps 48 layers (47M parameters): the comparison's
    config has 2, each per-layer list cut to them, the layer-index list kept below them,
    the dense layers' width sized for the 128 wide model as the class's for its 5120, and
    the family's top-1 (vLLM's Llama 4 weights the expert's input: top-1 only). Every
    attribute is restored afterwards."""
    from prefixlint.introspect.compare import smaller

    # its per-layer lists as synthesis left them: a NoPE layer second, then every fourth
    config = _llama4(no_rope_layers=[1, 0] + [1, 1, 1, 0] * 11 + [1, 1])
    values = smaller.overrides(_model_config(config))
    assert values == {
        "num_hidden_layers": 2,
        "layer_types": ["chunked_attention", "full_attention"],
        "no_rope_layers": [1, 0],
        "moe_layers": [0, 1],
        "intermediate_size_mlp": 408,  # 16384 of 5120 -> 408 of 128
        "num_experts_per_tok": 1,
    }
    before = dict(vars(config))
    with smaller.applied(_model_config(config), values) as ok:
        assert ok and config.num_hidden_layers == 2 and config.moe_layers == [0, 1]
    assert vars(config) == before


def test_the_first_layers_kept_hold_every_kind_of_layer() -> None:
    """A NoPE layer every fourth: the first four layers hold both kinds; an MoE layer every
    other one (``moe_layers`` 1, 3, ...) keeps its indices below."""
    from prefixlint.introspect.compare import smaller

    config = _llama4(no_rope_layers=[1, 1, 1, 0] * 12, moe_layers=list(range(1, 48, 2)))
    values = smaller.overrides(_model_config(config))
    assert values["num_hidden_layers"] == 4
    assert values["no_rope_layers"] == [1, 1, 1, 0]
    assert values["moe_layers"] == [1, 3]


def test_longcat_s_widths_keep_their_ratio_to_the_class_s_hidden_size() -> None:
    """LongCat names its widths ``ffn_hidden_size`` and ``expert_ffn_hidden_size`` (its
    ``attribute_map``'s ``intermediate_size``/``moe_intermediate_size``), which synthesis
    does not shrink. Its 4 layers, synthesis' count, stay: a count synthesis set may be
    one other counts depend on (Gemma 3n shares the KV cache of its last 2 of 4 layers)."""
    from transformers import LongcatFlashConfig

    from prefixlint.introspect.compare import smaller

    config = LongcatFlashConfig(hidden_size=128, num_layers=4, n_routed_experts=8)
    values = smaller.overrides(_model_config(config))
    assert values == {"ffn_hidden_size": 256, "expert_ffn_hidden_size": 40}
    shallow = _llama4(num_hidden_layers=4, moe_layers=[0, 1, 2, 3], no_rope_layers=None)
    assert "num_hidden_layers" not in smaller.overrides(_model_config(shallow))


def _tiny_longcat() -> object:
    from transformers import LongcatFlashConfig

    return LongcatFlashConfig(
        vocab_size=64,
        hidden_size=32,
        ffn_hidden_size=64,
        expert_ffn_hidden_size=16,
        num_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        n_routed_experts=4,
        zero_expert_num=2,
        moe_topk=2,
        kv_lora_rank=16,
        q_lora_rank=16,
        qk_rope_head_dim=8,
        qk_nope_head_dim=8,
        v_head_dim=8,
    )


def test_the_reference_checkpoint_holds_no_weights_for_zero_experts() -> None:
    """transformers sizes LongCat's fused ``gate_up_proj`` for the zero experts too (its
    forward never reads those rows); a real checkpoint holds the routed experts only."""
    from transformers import LongcatFlashForCausalLM

    from prefixlint.introspect.compare import reference

    built = reference.build(LongcatFlashForCausalLM, _tiny_longcat())
    experts = {
        int(k.split(".experts.")[1].split(".")[0]) for k in built.checkpoint if ".experts." in k
    }
    assert experts == {0, 1, 2, 3}


def test_zero_experts_route_as_identities_beside_the_real_ones() -> None:
    """The zero-expert router (a CUDA op on the CPU) routes over all experts, keeps the
    identity experts' output (the hidden state times their weights) for the layer, and
    gives their slots to expert 0 with weight 0."""
    from prefixlint.introspect.compare import routing

    torch.manual_seed(0)
    hidden, logits = torch.randn(5, 8), torch.randn(5, 6)
    router = SimpleNamespace(
        top_k=3,
        scoring_func="softmax",
        e_score_correction_bias=torch.zeros(6),
        renormalize=False,
        routed_scaling_factor=2.0,
        num_logical_experts=4,
        zero_expert_type="identity",
    )
    weights, ids = routing._zero_experts_by_reference(None)(router, hidden, logits, None)
    scores = logits.softmax(-1)
    top = scores.topk(3, dim=-1)
    zero = top.indices >= 4
    expected_identity = hidden * (top.values * 2.0 * zero).sum(-1, keepdim=True)
    torch.testing.assert_close(router._zero_expert_output, expected_identity)
    torch.testing.assert_close(weights, (top.values * 2.0).masked_fill(zero, 0.0))
    assert ids.masked_select(zero).eq(0).all() and zero.any()


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["Llama4ForCausalLM", "LongcatFlashForCausalLM"])
def test_architectures_too_large_before_compare_equal(worker, arch) -> None:
    report = _introspect(worker, arch)
    [result] = report.results
    assert result["compare"]["status"] == "equal", result["compare"]
    assert result["compare"]["smaller"] and result["compare"]["compared"] >= 20
    assert not [d for d in report.diagnostics if d.code == "PFX609"]


@pytest.mark.slow
def test_a_bug_planted_in_longcat_s_moe_gives_pfx609_at_its_layer(worker, tmp_path) -> None:
    """The routed weights renormalised (LongCat's are not): found on the smaller config,
    through the zero-expert router's reference, at the MoE block. Its shortcut MoE runs
    beside the layer's second attention and MLPs, which agree: the layer was blamed until
    a module beside a differing one stopped counting as the difference gone
    (``boundaries._beside``, tests/test_compare_history.py)."""
    edit = _replace("LongcatMoe", "renormalize=False", "renormalize=True")
    path, text = model_copy(tmp_path, "longcat_flash.py", edit)
    at = ("FlashDecoderLayer", "self.mlp = LongcatMoe(")
    assert_one_pfx609_at(worker, path, text, "LongcatFlashForCausalLM", at)
