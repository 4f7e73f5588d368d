"""The comparison's reference MLA (``compare/mla.py``) and MoE routing
(``compare/routing.py``): the routing against vLLM's own CPU routing where that is right
(fast), the MLA layer against its definition (fast); on the real vLLM, clean DeepSeek-V2,
DeepSeek-V3 (with a V3 checkpoint's routing fields) and Ernie 4.5 MoE compare equal, and
a one-token bug planted in a copy of their files gives PFX609 at the line that built the
first divergent module."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from tests.conftest import requires_vllm
from tests.test_compare import (
    _introspect,
    _line,
    _replace,
    assert_one_pfx609_at,
    model_copy,
)

pytestmark = requires_vllm


def _router(**kw):
    from vllm.model_executor.layers.fused_moe.router.cpu_router import CPURouter

    return CPURouter(top_k=2, global_num_experts=8, **kw)


def _logits() -> torch.Tensor:
    return torch.randn(9, 8, generator=torch.Generator().manual_seed(1))


def _same(a: tuple, b: tuple) -> None:
    """The same experts with the same weights (top-k order aside)."""
    (wa, ia), (wb, ib) = a, b
    oa, ob = ia.long().sort(-1), ib.long().sort(-1)
    assert torch.equal(oa.values, ob.values)
    torch.testing.assert_close(wa.gather(1, oa.indices), wb.gather(1, ob.indices))


def test_the_reference_routing_is_vllm_s_cpu_routing_where_that_reads_everything() -> None:
    from vllm.model_executor.layers.fused_moe.router import cpu_router

    from prefixlint.introspect import vllm_api
    from prefixlint.introspect.compare.routing import route

    logits = _logits()
    for renormalize in (True, False):  # plain softmax top-k (Mixtral, OLMoE)
        ours = route(vllm_api.moe_routing(_router(renormalize=renormalize)), logits)
        _same(ours, cpu_router._softmax_topk(logits, 2, renormalize))
    bias = torch.randn(8, generator=torch.Generator().manual_seed(2)) * 0.3
    for scoring in ("softmax", "sigmoid"):  # grouped top-k (DeepSeek-V3), bias or not
        for b in (None, bias):
            kw = dict(scoring_func=scoring, e_score_correction_bias=b, routed_scaling_factor=2.5)
            grouped = _router(use_grouped_topk=True, num_expert_group=4, topk_group=2, **kw)
            expected = cpu_router._grouped_topk(logits, 2, True, 4, 2, scoring, 2.5, b)
            _same(route(vllm_api.moe_routing(grouped), logits), expected)


def test_a_correction_bias_and_sigmoid_without_groups_route_as_one_group() -> None:
    """Ernie 4.5 MoE (softmax and a bias) and Laguna (sigmoid and a bias), without grouped
    top-k: vLLM's CPU router drops the bias or asserts; the reference routes as vLLM's
    grouped top-k over one group, which reads both."""
    from vllm.model_executor.layers.fused_moe.router import cpu_router

    from prefixlint.introspect import vllm_api
    from prefixlint.introspect.compare.routing import reference_routing, route

    logits = _logits()
    bias = torch.zeros(8)
    bias[:2] = 5.0  # steers every token to experts 0 and 1
    for scoring in ("softmax", "sigmoid"):
        router = _router(scoring_func=scoring, e_score_correction_bias=bias)
        ours = route(vllm_api.moe_routing(router), logits)
        _same(ours, cpu_router._grouped_topk(logits, 2, True, 1, 1, scoring, 1.0, bias))
        assert set(ours[1].flatten().tolist()) == {0, 1}
    # the CPU router itself: the bias ignored, sigmoid refused; under the reference, both
    softmax = _router(e_score_correction_bias=bias)
    assert set(softmax._compute_routing(None, logits, None)[1].flatten().tolist()) != {0, 1}
    sigmoid = _router(scoring_func="sigmoid", e_score_correction_bias=bias)
    with pytest.raises(AssertionError):
        sigmoid._compute_routing(None, logits, None)
    with reference_routing():
        for router in (softmax, sigmoid):
            assert set(router._compute_routing(None, logits, None)[1].flatten().tolist()) == {
                0,
                1,
            }
    with pytest.raises(AssertionError):  # restored
        sigmoid._compute_routing(None, logits, None)


def test_a_model_s_own_routing_function_and_unknown_scorings_are_not_the_reference_s() -> None:
    from prefixlint.introspect.compare.routing import reference_routing, takes, unroutable

    def custom(hidden_states, gating_output, topk, renormalize):
        return torch.ones(gating_output.shape[0], topk), torch.zeros(
            gating_output.shape[0], topk, dtype=torch.int32
        )

    own = _router(custom_routing_function=custom)
    assert not takes(own)
    with reference_routing():  # the model's function runs, as on the CPU
        assert own._compute_routing(None, _logits(), None)[1].abs().sum() == 0
    holder = nn.Module()
    holder.layer = nn.Module()
    holder.layer.router = _router(scoring_func="sigmoid")
    assert unroutable(holder) is None
    holder.layer.router = _router(scoring_func="tanh")
    assert unroutable(holder) == "`tanh` scoring at `layer`"
    assert not takes(nn.Linear(2, 2)) and unroutable(nn.Linear(2, 2)) is None


def test_the_vllm_accessors_find_the_router_and_the_mla_layer() -> None:
    from prefixlint.introspect import vllm_api

    assert vllm_api.cpu_router_class().__name__ == "CPURouter"
    assert vllm_api.mla_attention_class().__name__ == "MLAAttention"
    routing = vllm_api.moe_routing(_router(scoring_func="sigmoid", routed_scaling_factor=2.0))
    assert (routing["scoring"], routing["scale"], routing["grouped"]) == ("sigmoid", 2.0, False)
    assert vllm_api.moe_routing(nn.Linear(2, 2)) is None  # not a router: nothing read


def test_the_accessors_fall_back_to_older_layouts_and_then_to_nothing(monkeypatch) -> None:
    """A vLLM that keeps ``MLAAttention`` only in its own module is still found; one with
    neither the layer nor the CPU router class leaves the comparison's layers as they
    are (the reference contexts do nothing)."""
    from prefixlint.introspect import vllm_api
    from prefixlint.introspect.compare import mla, routing

    real = vllm_api._module
    hidden = {"vllm.model_executor.layers.attention"}
    monkeypatch.setattr(vllm_api, "_module", lambda name: None if name in hidden else real(name))
    assert vllm_api.mla_attention_class().__name__ == "MLAAttention"
    hidden |= {
        "vllm.model_executor.layers.attention.mla_attention",
        "vllm.attention.layer",
        "vllm.model_executor.layers.fused_moe.router.cpu_router",
    }
    assert vllm_api.mla_attention_class() is None and vllm_api.cpu_router_class() is None
    sigmoid = _router(scoring_func="sigmoid")
    with mla.reference_mla(), routing.reference_routing(), pytest.raises(AssertionError):
        sigmoid._compute_routing(None, _logits(), None)  # vLLM's own routing, untouched
    assert not mla.runs(nn.Linear(2, 2))


class _KvB(nn.Module):
    """A ``kv_b_proj`` as vLLM's linears return it: (output, bias)."""

    def __init__(self, rank: int, out: int) -> None:
        super().__init__()
        self.linear = nn.Linear(rank, out, bias=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, None]:
        return self.linear(x), None


def _mla_layer(scale: float) -> SimpleNamespace:
    torch.manual_seed(0)
    heads, nope, rope, v, rank = 2, 4, 2, 3, 5
    return SimpleNamespace(
        num_heads=heads,
        qk_nope_head_dim=nope,
        qk_rope_head_dim=rope,
        v_head_dim=v,
        scale=scale,
        kv_b_proj=_KvB(rank, heads * (nope + v)),
    )


def test_the_reference_mla_is_attention_over_the_expanded_latent() -> None:
    """Each head's key is its ``k_nope`` from ``kv_b_proj`` and the shared rotated
    ``k_pe``; the first token attends to itself only; the scale is the layer's."""
    from prefixlint.introspect.compare.mla import mla_forward

    layer = _mla_layer(0.5)
    n = 3
    q = torch.randn(n, 2, 6)
    kv_c = torch.randn(n, 5)
    k_pe = torch.randn(n, 1, 2)
    out = mla_forward(layer, q, kv_c, k_pe, output_shape=(n, 2 * 3))
    kv = layer.kv_b_proj(kv_c)[0].view(n, 2, 7)
    k = torch.cat([kv[..., :4], k_pe.expand(n, 2, 2)], -1)
    v = kv[..., 4:]
    scores = torch.einsum("ihd,jhd->hij", q, k) * 0.5
    scores = scores.masked_fill(torch.ones(n, n).triu(1).bool(), float("-inf"))
    expected = torch.einsum("hij,jhd->ihd", scores.softmax(-1), v).reshape(n, 6)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(out[0], v[0].reshape(6))  # causal: token 0 sees itself
    other = mla_forward(_mla_layer(0.25), q, kv_c, k_pe)
    assert (other - out).abs().max() > 1e-3  # the scale is read


def test_an_mla_reference_has_as_many_kv_heads_as_heads_and_others_are_unchanged() -> None:
    from transformers import DeepseekV2Config, LlamaConfig

    from prefixlint.introspect.compare.mla import reference_config

    mla = DeepseekV2Config(num_attention_heads=16, num_key_value_heads=8, kv_lora_rank=32)
    out = reference_config(mla)
    assert (out.num_key_value_heads, mla.num_key_value_heads) == (16, 8)  # a copy
    gqa = LlamaConfig(num_attention_heads=16, num_key_value_heads=8)
    assert reference_config(gqa) is gqa  # grouped-query attention keeps its KV heads


def _deepseek_v3_config(folder: Path) -> str:
    """A DeepSeek-V3 config as its checkpoints write it: sigmoid scoring with a correction
    bias (``topk_method: noaux_tc``), grouped top-k, routed scaling. transformers'
    ``DeepseekV3Config`` declares neither field (its model always routes so)."""
    from transformers import DeepseekV3Config

    sizes = dict(vocab_size=384, hidden_size=64, intermediate_size=128, num_hidden_layers=2)
    sizes.update(num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128)
    moe = dict(n_routed_experts=8, num_experts_per_tok=2, n_group=2, topk_group=1)
    moe.update(moe_intermediate_size=32, n_shared_experts=1, first_k_dense_replace=1)
    mla = dict(q_lora_rank=32, kv_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=16)
    config = DeepseekV3Config(**sizes, **moe, **mla, v_head_dim=16, routed_scaling_factor=2.5)
    config.topk_method, config.scoring_func = "noaux_tc", "sigmoid"
    config.architectures = ["DeepseekV3ForCausalLM"]
    folder.mkdir(exist_ok=True)
    config.save_pretrained(folder)
    return str(folder)


def _copy(folder: Path, name: str, edit) -> tuple[Path, str]:
    """``model_copy``; deepseek_v2.py registers a custom op at import, which a second
    module (each copy, in one worker) must name otherwise."""
    op = "min_latency_fused_qkv_a_proj"

    def renamed(text: str) -> str:
        text = edit(text)
        own = f"{op}_{abs(hash(text)) % 10**8}"
        text = text.replace(f'op_name="{op}"', f'op_name="{own}"')
        return text.replace(f"torch.ops.vllm.{op}(", f"torch.ops.vllm.{own}(")

    return model_copy(folder, name, renamed)


def _compared(report) -> dict:
    [result] = report.results
    return result["compare"]


@pytest.mark.slow
def test_clean_deepseek_v2_and_ernie_moe_compare_equal(worker) -> None:
    for arch in ("DeepseekV2ForCausalLM", "Ernie4_5_MoeForCausalLM"):
        report = _introspect(worker, arch)
        compared = _compared(report)
        assert compared["status"] == "equal", (arch, compared)
        assert compared["compared"] >= 10
        assert not [d for d in report.diagnostics if d.code == "PFX609"]


# (file, arch, class, old, new, where the finding must be: class, needle)
PLANTED = [
    (  # a wrong softmax scale handed to the MLA layer
        "deepseek_v2.py",
        "DeepseekV2ForCausalLM",
        "DeepseekV2MLAAttention",
        "self.scaling = self.qk_head_dim**-0.5",
        "self.scaling = self.qk_head_dim**-0.4",
        ("DeepseekV2DecoderLayer", "self.self_attn = attn_cls("),
    ),
    (  # the rotary embedding of q_pe and k_pe in the wrong (neox) layout
        "deepseek_v2.py",
        "DeepseekV2ForCausalLM",
        "DeepseekV2MLAAttention",
        "            is_neox_style=False,",
        "            is_neox_style=True,",
        ("DeepseekV2DecoderLayer", "self.self_attn = attn_cls("),
    ),
    (  # the correction bias not handed to the router
        "ernie45_moe.py",
        "Ernie4_5_MoeForCausalLM",
        "Ernie4_5_MoeMoE",
        "e_score_correction_bias=self.gate.e_score_correction_bias,",
        "e_score_correction_bias=None,",
        ("Ernie4_5_MoeMoE", "self.experts = FusedMoEFactory("),
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize("case", PLANTED, ids=["mla_scale", "mla_rope_style", "moe_bias"])
def test_a_planted_bug_in_mla_or_routing_gives_pfx609_at_its_module(worker, tmp_path, case):
    name, arch, cls, old, new, at = case
    path, text = _copy(tmp_path, name, _replace(cls, old, new))
    assert_one_pfx609_at(worker, path, text, arch, at)


@pytest.mark.slow
def test_deepseek_v3_s_grouped_sigmoid_routing_compares_and_its_bug_is_found(worker, tmp_path):
    from prefixlint.introspect import introspect

    config = _deepseek_v3_config(tmp_path / "config")
    old, new = "renormalize=config.norm_topk_prob,", "renormalize=not config.norm_topk_prob,"
    broken, text = _copy(tmp_path, "deepseek_v2.py", _replace("DeepseekV2MoE", old, new))
    clean, _ = _copy(tmp_path, "deepseek_v2.py", lambda t: t)
    for target, bug in ((clean, False), (broken, True)):
        report = introspect(
            f"{target}:DeepseekV3ForCausalLM",
            tp=(1,),
            pp=(1,),
            config=config,
            worker=worker,
            dryrun=False,
            explore_budget=0.0,
        )
        compared = _compared(report)
        assert compared["status"] == ("differs" if bug else "equal"), compared
        found = [(d.code, d.location.row) for d in report.diagnostics if d.code == "PFX609"]
        at = _line(text, "DeepseekV2MoE", "self.experts = FusedMoEFactory(")
        assert found == ([("PFX609", at)] if bug else []), [d.message for d in report.diagnostics]
