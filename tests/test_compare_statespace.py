"""State-space layers in the comparison (``compare/statespace.py``): the torch recurrences
agree with transformers' own torch paths (fast), and on the real vLLM the Mamba 1 and
Mamba 2 families compare equal while a one-token bug planted in a copy of the model file
gives PFX609 at the line that built the mixer."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import requires_vllm
from tests.test_compare import (
    _introspect,
    _replace,
    assert_one_pfx609_at,
    model_copy,
)

pytestmark = requires_vllm


def test_the_scan_is_transformers_chunked_mamba2_scan() -> None:
    """One decay per head, B and C shared by a group's heads: the recurrence equals
    transformers' chunked scan (several chunks, a padded last one) to float32 rounding."""
    import torch
    import torch.nn.functional as F
    from transformers.models.mamba2.modeling_mamba2 import mamba2_chunk_scan

    from prefixlint.introspect.compare.statespace import selective_scan

    g = torch.Generator().manual_seed(0)
    tokens, heads, head_dim, groups, state = 11, 4, 3, 2, 5
    x = torch.randn(tokens, heads, head_dim, generator=g)
    dt = torch.randn(tokens, heads, generator=g)
    a = -torch.rand(heads, generator=g) - 0.5
    b = torch.randn(tokens, groups, state, generator=g)
    c = torch.randn(tokens, groups, state, generator=g)
    d = torch.randn(heads, generator=g)
    bias = torch.randn(heads, generator=g)
    theirs = mamba2_chunk_scan(
        x[None], dt[None], a, b[None], c[None], chunk_size=4, D=d, dt_bias=bias, dt_softplus=True
    )[0]
    per_head = heads // groups
    ours = selective_scan(
        x,
        F.softplus(dt + bias),
        a[:, None],
        b.repeat_interleave(per_head, 1),
        c.repeat_interleave(per_head, 1),
        d,
    )
    assert torch.allclose(ours, theirs, atol=1e-5), (ours - theirs).abs().max()
    # a wrong decay is seen: the test can fail
    wrong = selective_scan(
        x,
        F.softplus(dt + bias),
        2 * a[:, None],
        b.repeat_interleave(2, 1),
        c.repeat_interleave(2, 1),
        d,
    )
    assert not torch.allclose(wrong, theirs, atol=1e-3)


def test_the_gated_delta_rule_is_transformers_chunked_rule() -> None:
    """With the L2 norm of q and k in the kernel and several chunks: equal to float32
    rounding; a decay of the wrong sign is seen."""
    import torch
    from transformers.models.qwen3_next.modeling_qwen3_next import torch_chunk_gated_delta_rule

    from prefixlint.introspect.compare.statespace import gated_delta_rule

    g = torch.Generator().manual_seed(1)
    tokens, heads, dk, dv = 11, 3, 4, 5
    q, k = torch.randn(tokens, heads, dk, generator=g), torch.randn(tokens, heads, dk, generator=g)
    v = torch.randn(tokens, heads, dv, generator=g)
    decay = -torch.rand(tokens, heads, generator=g)
    beta = torch.rand(tokens, heads, generator=g)
    theirs, _ = torch_chunk_gated_delta_rule(
        q[None],
        k[None],
        v[None],
        decay[None],
        beta[None],
        chunk_size=4,
        use_qk_l2norm_in_kernel=True,
    )
    ours = gated_delta_rule(q, k, v, decay, beta)
    assert torch.allclose(ours, theirs[0], atol=1e-5), (ours - theirs[0]).abs().max()
    assert not torch.allclose(gated_delta_rule(q, k, v, -decay, beta), theirs[0], atol=1e-3)


def test_a_layer_that_writes_into_its_output_argument_is_compared_on_it() -> None:
    """vLLM's ``MambaMixer`` and ``ShortConv`` return None and fill ``output``: the hook
    records that tensor, and not as part of the input."""
    import torch
    from torch import nn

    from prefixlint.introspect.compare.boundaries import Seen, hooked

    class Writes(nn.Module):
        def forward(self, hidden_states: torch.Tensor, output: torch.Tensor) -> None:
            output[:] = hidden_states * 3

    root = nn.Module()
    root.mixer = Writes()
    seen = Seen()
    x = torch.arange(4.0)
    with hooked(root, {"mixer": "mixer"}, seen):
        root.mixer(x, torch.empty(4))
    assert torch.equal(seen.outputs["mixer"], x * 3)
    assert torch.equal(seen.inputs["mixer"], x)


def test_the_causal_convolution_sees_only_the_past() -> None:
    import torch

    from prefixlint.introspect.compare.statespace import causal_conv

    x = torch.zeros(6, 2)
    x[3, 0] = 1.0  # an impulse at token 3, channel 0
    weight = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    out = causal_conv(x, weight, None, None)
    # the newest tap is the last weight; nothing before the impulse, nothing in channel 1
    assert out[:, 0].tolist() == [0.0, 0.0, 0.0, 3.0, 2.0, 1.0]
    assert out[:, 1].abs().sum() == 0


def test_an_ungrouped_gated_norm_of_the_reference_normalises_per_group() -> None:
    """transformers' ``MambaRMSNormGated`` ignores ``n_groups`` in its torch path; while the
    reference runs it normalises per group, as FalconH1's grouped norm does, and after the
    run it is transformers' own again."""
    import torch
    from torch import nn
    from transformers.models.falcon_h1.modeling_falcon_h1 import FalconH1RMSNormGated
    from transformers.models.mamba2.modeling_mamba2 import MambaRMSNormGated

    from prefixlint.introspect.compare.statespace import reference_mixers

    mixer = nn.Module()
    mixer.n_groups = 2
    mixer.norm = MambaRMSNormGated(8, eps=1e-6)
    grouped = FalconH1RMSNormGated(8, eps=1e-6, n_groups=2, norm_before_gate=False)
    x, gate = torch.randn(1, 3, 8), torch.randn(1, 3, 8)
    before = mixer.norm(x, gate)
    with reference_mixers(mixer, 9):
        during = mixer.norm(x, gate)
    assert torch.allclose(during, grouped(x, gate), atol=1e-6)
    assert not torch.allclose(before, during, atol=1e-3)
    assert torch.equal(mixer.norm(x, gate), before)


def test_a_mixer_class_with_its_own_kernel_method_is_not_run() -> None:
    """A subclass that overrides the method the reference replaces computes something the
    reference does not know: it stays an unsupported layer."""
    from vllm.model_executor.layers.mamba.mamba_mixer2 import MambaMixer2

    from prefixlint.introspect.compare.statespace import runs

    class Own(MambaMixer2):
        def conv_ssm_forward(self, projected_states, output):  # pragma: no cover
            return None

    assert runs(MambaMixer2.__new__(MambaMixer2))
    assert not runs(Own.__new__(Own))


CLEAN = ["MambaForCausalLM", "FalconMambaForCausalLM", "JambaForCausalLM", "Mamba2ForCausalLM"]
CLEAN += ["FalconH1ForCausalLM", "GraniteMoeHybridForCausalLM", "Qwen3NextForCausalLM"]
CLEAN += ["Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM"]
# their synthesised configs need the reference's own fixes below (KV heads as built, the
# dt clamp, the layer types the reference maps)
CLEAN += ["Zamba2ForCausalLM", "Lfm2MoeForCausalLM"]


@pytest.mark.slow
@pytest.mark.parametrize("arch", CLEAN)
def test_clean_state_space_models_compare_equal(worker, arch) -> None:
    report = _introspect(worker, arch)
    [result] = report.results
    assert result["compare"]["status"] == "equal", result["compare"]
    assert result["compare"]["compared"] >= 10
    assert not [d for d in report.diagnostics if d.code == "PFX609"]


# (file, class, where the bug is, old, new, where the finding must be: class, needle)
PLANTED = [
    (  # the config's activation not passed to the mixer: the convolution runs linear
        "mamba.py",
        "MambaForCausalLM",
        "MambaDecoderLayer",
        "activation=config.hidden_act",
        "activation=None",
        ("MambaDecoderLayer", "self.mixer = MambaMixer("),
    ),
    (
        "mamba2.py",
        "Mamba2ForCausalLM",
        "Mamba2DecoderLayer",
        "activation=config.hidden_act",
        "activation=None",
        ("Mamba2DecoderLayer", "self.mixer = MambaMixer2("),
    ),
    (  # a hybrid: attention layers beside the mixers
        "granitemoehybrid.py",
        "GraniteMoeHybridForCausalLM",
        "GraniteMoeHybridMambaDecoderLayer",
        "activation=config.hidden_act",
        "activation=None",
        ("GraniteMoeHybridMambaDecoderLayer", "self.mamba = MambaMixer2("),
    ),
    (  # Zamba2's shared attention with a wrong softmax scale, on the reference with as
        # many KV heads as heads (the model never reads the KV head count)
        "zamba2.py",
        "Zamba2ForCausalLM",
        "Zamba2Attention",
        "self.scale = (self.attention_head_dim / 2) ** -0.5",
        "self.scale = (self.attention_head_dim / 2) ** -0.4",
        ("Zamba2AttentionDecoderLayer", "self.self_attn = Zamba2Attention("),
    ),
    (  # the checkpoint's b and a loaded into each other's shard of the fused in_proj_ba:
        # found at the fused layer inside the GDN layer, reported at the model's line
        "qwen3_5.py",
        "Qwen3_5ForCausalLM",
        "Qwen3_5Model",
        '".in_proj_b": (".in_proj_ba", 0),\n            ".in_proj_a": (".in_proj_ba", 1),',
        '".in_proj_b": (".in_proj_ba", 1),\n            ".in_proj_a": (".in_proj_ba", 0),',
        ("Qwen3_5DecoderLayer", "self.linear_attn = QwenGatedDeltaNetAttention("),
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize("case", PLANTED, ids=[c[1] for c in PLANTED])
def test_a_planted_bug_in_a_state_space_model_gives_pfx609_at_the_mixer(worker, tmp_path, case):
    name, arch, cls, old, new, at = case
    path, text = model_copy(tmp_path, name, _replace(cls, old, new))
    assert_one_pfx609_at(worker, path, text, arch, at)


def _lfm2_config(folder: Path, moe: bool) -> str:
    """A tiny LFM2 config with short-convolution layers, as published LFM2 configs carry
    them (``layer_types`` with ``conv``; vLLM reads ``conv_dim`` and ``block_dim``, which
    transformers' config class no longer declares). The synthesised one has none."""
    from transformers import Lfm2Config, Lfm2MoeConfig

    base = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4, vocab_size=384)
    base.update(num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    base["layer_types"] = ["conv", "full_attention", "conv", "full_attention"]
    if moe:
        experts = dict(num_experts=4, num_experts_per_tok=2, num_dense_layers=1)
        config = Lfm2MoeConfig(**base, moe_intermediate_size=32, **experts)
    else:
        config = Lfm2Config(**base, full_attn_idxs=[1, 3], block_auto_adjust_ff_dim=False)
    config.conv_dim = config.block_dim = 64
    config.save_pretrained(folder)
    return str(folder)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["Lfm2ForCausalLM", "Lfm2MoeForCausalLM"])
def test_lfm2_with_short_convolutions_compares_equal(worker, tmp_path, arch) -> None:
    from prefixlint.introspect import introspect

    config = _lfm2_config(tmp_path / "config", moe="Moe" in arch)
    report = introspect(
        arch, tp=(1,), pp=(1,), config=config, worker=worker, dryrun=False, explore_budget=0.0
    )
    [result] = report.results
    assert result["compare"]["status"] == "equal", result["compare"]
    assert result["compare"]["compared"] >= 10
    assert not [d for d in report.diagnostics if d.code == "PFX609"]


def test_a_replaced_custom_op_comes_back() -> None:
    """``vllm_api.custom_op_replaced``: inside, ``torch.ops.vllm.<op>`` is the replacement
    (as ``forward_cpu`` looks it up); after, vLLM's registered op again."""
    import torch
    from vllm.model_executor.layers.mamba.ops.cpu.gdn_attention import (
        register_cpu_gdn_attention_ops,
    )

    from prefixlint.introspect import vllm_api

    register_cpu_gdn_attention_ops()
    before = torch.ops.vllm.cpu_gdn_attention_core
    with vllm_api.custom_op_replaced("cpu_gdn_attention_core", len):
        assert torch.ops.vllm.cpu_gdn_attention_core is len
    after = torch.ops.vllm.cpu_gdn_attention_core
    assert after is not len and after._qualified_op_name == before._qualified_op_name


def test_a_dt_clamp_at_the_initialisers_minimum_is_lifted_while_the_reference_runs() -> None:
    """transformers' Zamba2 mixer clamps ``dt`` below at ``time_step_min`` (the range
    ``dt_bias`` is initialised from; its config states no runtime bound): lifted during the
    run, as Zyphra's code and vLLM's ``MambaMixer2`` run, and back after. A bound the config
    states (Mamba 2's ``time_step_limit``) stays."""
    from torch import nn
    from transformers import Mamba2Config, Zamba2Config

    from prefixlint.introspect.compare.statespace import reference_mixers

    zamba, mamba = nn.Module(), nn.Module()
    zamba.config, zamba.time_step_limit = Zamba2Config(), (0.001, float("inf"))
    mamba.config = Mamba2Config(time_step_min=0.001, time_step_limit=(0.001, float("inf")))
    mamba.time_step_limit = mamba.config.time_step_limit
    root = nn.ModuleList([zamba, mamba])
    with reference_mixers(root, 9):
        assert zamba.time_step_limit == (0.0, float("inf"))
        assert mamba.time_step_limit == (0.001, float("inf"))
    assert zamba.time_step_limit == (0.001, float("inf"))


def test_the_reference_gets_as_many_kv_heads_as_the_model_built(monkeypatch) -> None:
    """Where every attention layer vLLM built has as many KV heads as heads while the
    config asks fewer (Zamba2 never reads the KV head count), the reference's copy of the
    config gets KV heads = heads; a model that built fewer KV heads keeps the config's."""
    from torch import nn
    from transformers import Zamba2Config

    from prefixlint.introspect import vllm_api
    from prefixlint.introspect.compare.reference import kv_heads_as_built

    class Layer(nn.Module):
        def __init__(self, heads: int, kv_heads: int) -> None:
            super().__init__()
            self.num_heads, self.num_kv_heads = heads, kv_heads

    monkeypatch.setattr(vllm_api, "attention_classes", lambda: (Layer, None))
    config = Zamba2Config(num_attention_heads=16, num_key_value_heads=8)
    mha, gqa = nn.ModuleList([Layer(16, 16), Layer(16, 16)]), nn.ModuleList([Layer(16, 8)])
    assert kv_heads_as_built(config, mha).num_key_value_heads == 16
    assert config.num_key_value_heads == 8  # a copy: the model's config is untouched
    assert kv_heads_as_built(config, gqa) is config
    assert kv_heads_as_built(config, nn.Linear(2, 2)) is config  # no attention layer


def test_a_layer_type_the_reference_has_no_mask_for_is_its_other_mapped_type() -> None:
    """Synthesis guessed ``sliding_attention`` for LFM2-MoE's layers that are not full
    attention; transformers' LFM2-MoE maps masks for ``full_attention`` and ``conv`` only,
    so the reference's copy says ``conv``. A model whose mask mapping knows the type keeps it."""
    from transformers import (
        Lfm2MoeConfig,
        Lfm2MoeForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
        Zamba2Config,
        Zamba2ForCausalLM,
    )

    from prefixlint.introspect.compare.reference import _mapped_layer_types

    kinds = ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]
    lfm2 = Lfm2MoeConfig(num_hidden_layers=4, layer_types=list(kinds))
    _mapped_layer_types(lfm2, Lfm2MoeForCausalLM)
    assert lfm2.layer_types == ["conv", "full_attention", "conv", "full_attention"]
    qwen2 = Qwen2Config(num_hidden_layers=4, layer_types=list(kinds), sliding_window=8)
    _mapped_layer_types(qwen2, Qwen2ForCausalLM)
    assert qwen2.layer_types == kinds
    # Zamba2's masks know full and linear attention; its ``hybrid`` layers are its own
    hybrid = ["linear_attention", "hybrid", "linear_attention", "linear_attention"]
    zamba2 = Zamba2Config(num_hidden_layers=4, layers_block_type=list(hybrid))
    _mapped_layer_types(zamba2, Zamba2ForCausalLM)
    assert zamba2.layer_types == hybrid


def _olmo_hybrid_config():
    from transformers import OlmoHybridConfig

    return OlmoHybridConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        vocab_size=128,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        linear_num_key_heads=4,
        linear_num_value_heads=4,
        linear_key_head_dim=8,
        linear_value_head_dim=16,
        layer_types=["linear_attention", "full_attention"],
    )


def test_the_olmo_hybrid_reference_checkpoint_is_named_as_its_checkpoints() -> None:
    """As transformers' ``convert_olmo_hybrid_weights_to_hf.py`` writes them: a linear
    layer's norms ``attention_layer_norm``/``feedforward_layer_norm`` and its convolution as
    ``q_conv1d``/``k_conv1d``/``v_conv1d``, each as wide as its projection (transformers'
    revert chunks it evenly); an attention layer's ``post_attention_layernorm`` as it is
    (transformers' revert renames it too). The two renamed norms come with the names the
    model holds them under, which the released checkpoints carry (``_own_names``); the
    convolution's parts, new tensors of a conversion, are no renaming."""
    from transformers import OlmoHybridForCausalLM

    from prefixlint.introspect.compare.reference import _checkpoint

    state, renamed = _checkpoint(OlmoHybridForCausalLM(_olmo_hybrid_config()))
    linear, attention = "model.layers.0.", "model.layers.1."
    widths = [state[f"{linear}linear_attn.{p}_conv1d.weight"].shape[0] for p in "qkv"]
    assert widths == [32, 32, 64]
    for name in ("attention_layer_norm", "feedforward_layer_norm"):
        assert f"{linear}{name}.weight" in state
    assert f"{attention}post_attention_layernorm.weight" in state
    assert f"{attention}feedforward_layer_norm.weight" not in state
    assert renamed == {
        f"{linear}attention_layer_norm.weight": f"{linear}input_layernorm.weight",
        f"{linear}feedforward_layer_norm.weight": f"{linear}post_attention_layernorm.weight",
    }


def _load_strict(monkeypatch, accepted: set[str] | None):
    """A checkpoint of one renamed norm through a loader that takes only the names in
    ``accepted`` (None: none, always with one error), as ``compare._load`` loads it."""
    import contextlib

    import torch

    from prefixlint.introspect import vllm_api
    from prefixlint.introspect.compare import _load
    from prefixlint.introspect.compare.reference import Reference

    class Strict(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.input_layernorm = torch.nn.Parameter(torch.zeros(2))

        def load_weights(self, weights):
            if accepted is None:
                raise ValueError("the same on any name")
            for name, tensor in weights:
                if name not in accepted:
                    raise ValueError(f"There is no module or parameter named {name!r}")
                self.input_layernorm.data.copy_(tensor)
            return {"input_layernorm"}

    monkeypatch.setattr(vllm_api, "process_weights_after_loading", lambda: lambda *a: None)
    model = Strict()
    ref = Reference(
        torch.nn.Linear(1, 1),
        {"attention_layer_norm": torch.ones(2)},
        renamed={"attention_layer_norm": "input_layernorm"},
    )
    return model, _load(model, ref, None, contextlib.nullcontext)


def test_a_loader_refusing_a_reverted_renaming_loads_the_names_the_model_holds(monkeypatch):
    """transformers loads a checkpoint under the name its conversion renames from or the
    one it renames to, and released checkpoints carry either: a loader that refuses the
    first takes the second, the refusal kept as a fact (``names_refused``)."""
    model, (failed, refused) = _load_strict(monkeypatch, {"input_layernorm"})
    assert failed is None
    assert "attention_layer_norm" in refused
    assert model.input_layernorm.data.tolist() == [1.0, 1.0]


def test_a_loader_refusing_both_names_fails_on_the_models_names_first(monkeypatch):
    from prefixlint.introspect.compare.facts import Reason

    _, (failed, refused) = _load_strict(monkeypatch, set())
    assert failed is not None and failed.reason is Reason.LOAD_FAILED
    assert failed.detail.startswith("ValueError: There is no module or parameter named 'input_")
    assert "with the names `save_pretrained` writes" in failed.detail
    assert "attention_layer_norm" in failed.detail
    assert refused == ""


def test_a_loader_failing_alike_on_both_names_says_it_once(monkeypatch):
    from prefixlint.introspect.compare.facts import Reason

    _, (failed, _) = _load_strict(monkeypatch, None)
    assert failed is not None and failed.reason is Reason.LOAD_FAILED
    assert failed.detail == "ValueError: the same on any name"


@pytest.mark.slow
def test_olmo_hybrid_is_not_run_vllm_refuses_its_checkpoints(worker) -> None:
    """vLLM 0.32's OLMo-Hybrid loader loses the shard id of every part of its fused
    convolution (``q_conv1d``..., docs/precision.md), on the released checkpoints' names
    too: a load failure that names it, said in a PFX600 note, never a PFX609. A vLLM
    that loads them makes this fail."""
    report = _introspect(worker, "OlmoHybridForCausalLM")
    [result] = report.results
    assert result["compare"]["status"] == "not run", result["compare"]
    assert result["compare"]["reason"] == "load_failed"
    detail = result["compare"]["detail"]
    assert detail.startswith("TypeError: list indices must be integers"), detail
    assert not [d for d in report.diagnostics if d.code == "PFX609"]


# vLLM's fix of its fused convolution's loader (vllm-project/vllm#55858), in the model
# file: each part of the convolution goes to the fused parameter with its shard id
_CONV_SHARDS = """\
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        params = dict(self.named_parameters())
        convs: set[str] = set()

        def rest():
            for name, data in self.hf_to_vllm_mapper.apply(weights):
                shard = getattr(data, "shard_id", None)
                if name.endswith(".conv1d.weight") and shard is not None:
                    params[name].weight_loader(params[name], data, shard)
                    convs.add(name)
                else:
                    yield name, data

        return AutoWeightsLoader(self).load_weights(rest()) | convs
"""
_AUTO_LOAD = """\
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        loader = AutoWeightsLoader(self)
        return loader.load_weights(weights, mapper=self.hf_to_vllm_mapper)
"""


def _olmo_hybrid_conv_fixed(text: str) -> str:
    return _replace("OlmoHybridModel", _AUTO_LOAD, _CONV_SHARDS)(text)


@pytest.mark.slow
def test_olmo_hybrid_with_its_convolution_loaded_compares_equal(worker, tmp_path) -> None:
    """With the loader's one defect fixed in a copy of the model file, OLMo-Hybrid loads
    the released checkpoints' names and compares equal, its gated delta rule included."""
    path, _ = model_copy(tmp_path, "olmo_hybrid.py", _olmo_hybrid_conv_fixed)
    report = _introspect(worker, f"{path}:OlmoHybridForCausalLM")
    [result] = report.results
    assert result["compare"]["status"] == "equal", result["compare"]
    assert result["compare"]["compared"] >= 30
    assert "attention_layer_norm" in result["compare"]["names_refused"]
    assert not [d for d in report.diagnostics if d.code == "PFX609"]


@pytest.mark.slow
def test_a_planted_bug_in_olmo_hybrid_gives_pfx609(worker, tmp_path) -> None:
    def edit(text: str) -> str:
        text = _olmo_hybrid_conv_fixed(text)
        old, new = "self.scaling = self.head_dim**-0.5", "self.scaling = self.head_dim**-0.4"
        return _replace("OlmoHybridAttention", old, new)(text)

    path, text = model_copy(tmp_path, "olmo_hybrid.py", edit)
    at = ("OlmoHybridDecoderLayer", "self.self_attn = OlmoHybridAttention(")
    assert_one_pfx609_at(worker, path, text, "OlmoHybridForCausalLM", at)


def test_a_tensor_under_two_names_is_no_renaming() -> None:
    """A block shared by two paths (Zamba2's shared transformer) holds one tensor under two
    names: neither is a renaming of the other, and both stay beside a real renaming."""
    import torch

    from prefixlint.introspect.compare.reference import _renamed_by_layer_kind

    shared, own = torch.zeros(2), torch.ones(2)
    original = {"a.x.weight": shared, "a.y.weight": shared, "c.m.weight": own}
    reverted = {"a.x.weight": shared, "a.y.weight": shared, "c.n.weight": own}
    assert set(_renamed_by_layer_kind(original, reverted)) == set(reverted)
