"""Why an architecture is compared or not (``compare/``, issue 38): the references that
used to fail for reasons of the tool, on the real vLLM and transformers."""

from __future__ import annotations

import pytest

from tests.conftest import requires_vllm

pytestmark = requires_vllm


def _introspect(worker, target: str):
    from prefixlint.introspect import introspect

    return introspect(target, tp=(1,), pp=(1,), worker=worker, dryrun=False, explore_budget=0.0)


def _tiny_deepseek_v3() -> object:
    from transformers import DeepseekV3Config

    return DeepseekV3Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        moe_intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_group=1,
        topk_group=1,
        q_lora_rank=16,
        kv_lora_rank=16,
        qk_rope_head_dim=8,
        qk_nope_head_dim=8,
        v_head_dim=8,
        first_k_dense_replace=1,
    )


@pytest.mark.slow
def test_a_config_of_vllm_s_class_is_read_by_transformers_own_class_for_the_reference() -> None:
    """vLLM reads ``deepseek_v32`` with DeepSeek V3's config class, which lacks the
    indexer's fields transformers' DeepSeek V3.2 reads: the reference gets transformers'
    own class with the same values (its defaults for what V3's class does not hold)."""
    from transformers import DeepseekV32Config, DeepseekV32ForCausalLM

    from prefixlint.introspect.compare import reference

    config = _tiny_deepseek_v3()
    with pytest.raises(AttributeError, match="index_n_heads"):
        DeepseekV32ForCausalLM(config)
    own = reference._own_config(DeepseekV32ForCausalLM, config)
    assert isinstance(own, DeepseekV32Config)
    assert (own.hidden_size, own.kv_lora_rank, own.n_routed_experts) == (32, 16, 4)
    assert own.index_n_heads == DeepseekV32Config().index_n_heads
    built = reference.build(DeepseekV32ForCausalLM, config)
    assert isinstance(built.model, DeepseekV32ForCausalLM) and built.checkpoint
    # a config of the reference's own class is kept as it is
    assert reference._own_config(DeepseekV32ForCausalLM, own) is own


# vLLM 0.32 serves these through its Transformers modeling backend, which decorates
# transformers' decoder class in place (the reference then needed a vLLM config); SeedOss
# also reads ``self.training`` for a dropout, which vLLM's loader turns off with ``eval()``
BACKEND = ["OlmoForCausalLM", "SeedOssForCausalLM"]


@pytest.mark.slow
@pytest.mark.parametrize("arch", BACKEND)
def test_models_of_vllm_s_transformers_backend_compare_equal(worker, arch) -> None:
    report = _introspect(worker, arch)
    [result] = report.results
    assert result["compare"]["status"] == "equal", result["compare"]
    assert result["compare"]["compared"] >= 20  # the layers matched through the model's mapper
    assert not [d for d in report.diagnostics if d.code == "PFX609"]


def test_the_comparison_s_smaller_config_keeps_the_relations_and_restores_everything() -> None:
    """GPT-J's default names its sizes ``n_embd``/``n_head``/``n_layer`` (synthesis keeps
    4096 wide): the comparison's own sizes shrink them, keep the partial rotary dimension's
    fraction of the head size (of two pairs at least), and are set only inside the
    context."""
    from types import SimpleNamespace

    from transformers import DbrxConfig, GPTJConfig

    from prefixlint.introspect.compare import smaller

    config = GPTJConfig(vocab_size=512)
    model_config = SimpleNamespace(hf_config=config, hf_text_config=config)
    values = smaller.overrides(model_config)
    # 64/256 of the head is 2/8: one pair, which every rotary layout turns alike; two
    # pairs at least (tests/test_compare_history.py)
    assert values == {"n_embd": 128, "n_head": 16, "n_layer": 2, "rotary_dim": 4}
    before = dict(vars(config))
    with smaller.applied(model_config, values) as ok:
        assert ok and (config.hidden_size, config.n_head, config.n_layer) == (128, 16, 2)
    assert vars(config) == before
    # DBRX: the FFN's own hidden size stays equal to the model's, its width keeps its ratio
    dbrx = DbrxConfig(d_model=2048, n_heads=16, n_layers=24, ffn_config={"ffn_hidden_size": 3584})
    values = smaller.overrides(SimpleNamespace(hf_config=dbrx, hf_text_config=dbrx))
    assert values["d_model"] == values["hidden_size"] == 128
    assert values["ffn_hidden_size"] == 224 and values["n_layers"] == 2
    # a config that synthesis shrank already: nothing of the comparison's own
    small = GPTJConfig(n_embd=64, n_head=4, n_layer=2, rotary_dim=8)
    assert smaller.overrides(SimpleNamespace(hf_config=small, hf_text_config=small)) == {}


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["GPT2LMHeadModel", "GPTJForCausalLM"])
def test_a_config_too_large_to_compare_is_compared_on_a_smaller_one(worker, arch) -> None:
    report = _introspect(worker, arch)
    [result] = report.results
    assert result["compare"]["status"] == "equal", result["compare"]
    assert result["compare"]["smaller"]["n_embd"] == 128
    assert not [d for d in report.diagnostics if d.code == "PFX609"]


@pytest.mark.slow
def test_a_bug_planted_in_a_model_compared_on_its_smaller_config_is_found(worker, tmp_path):
    from tests.test_compare import _line, _replace, model_copy

    old, new = "self.scale = self.head_dim**-0.5", "self.scale = self.head_dim**-0.4"
    path, text = model_copy(tmp_path, "gpt2.py", _replace("GPT2Attention", old, new))
    report = _introspect(worker, f"{path}:GPT2LMHeadModel")
    [result] = report.results
    assert result["compare"]["smaller"]  # compared on the smaller config, not too large
    found = [(d.code, d.location.row) for d in report.diagnostics if d.code == "PFX609"]
    assert found == [("PFX609", _line(text, "GPT2Block", "self.attn = GPT2Attention("))]


def test_a_boundary_that_reads_token_ids_does_not_carry_the_difference_before_it() -> None:
    """Gemma 4 scales both embeddings (the token one and the per-layer one) in the model
    in vLLM and inside the embedding modules in transformers. The per-layer embedding
    completes right after the token embedding, but it reads the token ids, not its
    output: the first boundary that reads the stream (layer 0) agrees, so nothing
    diverges. Carried on into layer 0, the same difference is one."""
    from prefixlint.introspect.compare.boundaries import first_divergent
    from prefixlint.introspect.compare.facts import Boundary

    def b(path: str, rel: float, input_rel: float | None = 0.0) -> Boundary:
        return Boundary(path, path, rel, rel, input_rel, ("model.py", 1))

    gemma4 = [
        b("model.embed_tokens", 0.91, None),
        b("model.embed_tokens_per_layer", 0.94, None),
        b("model.per_layer_model_projection", 0.0),
        b("model.layers.0.input_layernorm", 0.0),
        b("logits", 1e-6, None),
    ]
    assert first_divergent(gemma4, 1e-3) is None
    carried = [*gemma4[:2], b("model.per_layer_model_projection", 0.4, 0.5)]
    carried += [b("model.layers.0.input_layernorm", 0.3, 0.5), b("logits", 0.3, None)]
    assert first_divergent(carried, 1e-3).path == "model.embed_tokens"


def test_a_second_vocabulary_larger_than_the_shrunk_one_is_cut_to_it() -> None:
    """Gemma 3n's per-layer embeddings keep 262144 rows per layer after synthesis (295M
    parameters): the comparison's own config cuts them to the main vocabulary."""
    from types import SimpleNamespace

    from prefixlint.introspect.compare import smaller

    config = SimpleNamespace(vocab_size=512, vocab_size_per_layer_input=262144, hidden_size=64)
    model_config = SimpleNamespace(hf_config=config, hf_text_config=config)
    assert smaller.overrides(model_config) == {"vocab_size_per_layer_input": 512}


def test_a_layer_that_shares_another_s_kv_cache_attends_over_that_layer_s_keys() -> None:
    """Gemma 3n's last layers pass no key or value and read an earlier layer's cache."""
    from types import SimpleNamespace

    import torch

    from prefixlint.introspect.compare import attention

    def layer(name: str, target: str | None = None) -> SimpleNamespace:
        impl = SimpleNamespace(scale=0.5)
        return SimpleNamespace(
            layer_name=name,
            kv_sharing_target_layer_name=target,
            num_heads=2,
            num_kv_heads=1,
            head_size=4,
            impl=impl,
            attn_type="decoder",
        )

    q, k, v = torch.randn(3, 8), torch.randn(3, 4), torch.randn(3, 4)
    with attention.reference_attention():
        own = attention.reference_forward(layer("l0"), q, k, v)
        shared = attention.reference_forward(layer("l3", "l0"), q, None, None)
        assert torch.equal(own, shared)
        with pytest.raises(attention.Unsupported):
            attention.reference_forward(layer("l4", "l9"), q, None, None)
    assert not attention._KV  # nothing kept after the forward
