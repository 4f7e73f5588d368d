"""Shrinking keeps a synthesised config small and consistent with its model's constraints
(issue 38: three configs stayed over the comparison's 30M parameters, one broke MLA, one a
top-1 router): Gemma 3n's per-layer sizes and per-layer embeddings, Llama 4's dense MLP,
its every-layer ``moe_layers`` and its top-1 router, MiniCPM3's MLA head counts."""

from __future__ import annotations


def test_gemma3n_per_layer_sizes_stay_shrunk() -> None:
    from transformers import Gemma3nTextConfig

    from prefixlint.introspect.configs import shrink_kwargs

    kw = shrink_kwargs(Gemma3nTextConfig())
    n = kw["num_hidden_layers"]
    assert kw["intermediate_size"] == [256] * n
    assert kw["vocab_size_per_layer_input"] == 512
    assert kw["hidden_size_per_layer_input"] == 16


def test_llama4_keeps_its_layer_indices_and_top1_router() -> None:
    from transformers import Llama4TextConfig

    from prefixlint.introspect.configs import shrink_kwargs

    default = Llama4TextConfig()
    assert default.moe_layers == list(range(default.num_hidden_layers))
    kw = shrink_kwargs(default)
    n = kw["num_hidden_layers"]
    assert n < default.num_hidden_layers  # was 48: moe_layers read as 48 distinct values
    assert kw["moe_layers"] == list(range(n))
    assert kw["intermediate_size_mlp"] == 256
    assert kw["num_experts_per_tok"] == default.num_experts_per_tok == 1


def test_mla_keeps_as_many_kv_heads_as_query_heads() -> None:
    from transformers import LlamaConfig, MiniCPM3Config

    from prefixlint.introspect.configs import shrink_kwargs

    kw = shrink_kwargs(MiniCPM3Config())
    assert kw["num_key_value_heads"] == kw["num_attention_heads"] == 16
    plain = shrink_kwargs(LlamaConfig(num_key_value_heads=32))  # no MLA: GQA as before
    assert plain["num_key_value_heads"] == 8
