"""Gaps found by re-creating real, fixed vLLM bugs (``bench/history_bugs.py``).

Fast: a linear rope-scaling variant where the config holds the default rope; the
comparison's smaller config keeps a partial rotary dimension of two pairs at
least; a module of a parallel block (GPT-J's attention beside its MLP) is where the
difference starts, while an embedding split otherwise than transformers' is still not.
Slow (real vLLM, one worker): llama.py dropping the rope scaling (Aquila2-16K, issue
1436) differs on that variant; GPT-J's rotary embedding of the NeoX layout (vLLM's bug
until pull 941) gives PFX609 at the attention's line; clean GPT-J compares equal."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.conftest import requires_vllm
from tests.test_compare import _introspect, _line, _replace, model_copy

pytestmark = requires_vllm


def test_the_smaller_config_rotates_two_pairs_at_least() -> None:
    """GPT-J rotates 64 of its 256 head dimensions; scaled to the smaller head of 8 that
    was one pair, which rotates alike in the GPT-J and the NeoX layout."""
    from transformers import GPTJConfig

    from prefixlint.introspect.compare.smaller import overrides

    config = GPTJConfig()
    values = overrides(SimpleNamespace(hf_config=config, hf_text_config=config))
    head = values["n_embd"] // values["n_head"]
    assert 4 <= values["rotary_dim"] < head, values  # two pairs, still partial


def _b(path: str, rel: float, input_rel: float | None = 0.0):
    from prefixlint.introspect.compare.facts import Boundary

    return Boundary(path, path, rel, rel, input_rel, ("model.py", len(path)))


def test_a_module_of_a_parallel_block_is_where_the_difference_starts() -> None:
    """GPT-J's attention and MLP both read the layer's normed input: the MLP after the
    attention agrees in input and output, and says nothing of whether the attention's
    difference persists (the next layer sees it). The layer was blamed before."""
    from prefixlint.introspect.compare.boundaries import first_divergent

    h0 = "transformer.h.0"
    found = [
        _b(f"{h0}.ln_1", 0.0),
        _b(f"{h0}.attn.qkv_proj", 0.0),
        _b(f"{h0}.attn.out_proj", 0.4, 0.5),
        _b(f"{h0}.attn", 0.4),
        _b(f"{h0}.mlp.fc_in", 0.0),
        _b(f"{h0}.mlp.fc_out", 0.0),
        _b(f"{h0}.mlp", 0.0),
        _b(h0, 0.3),
        _b("transformer.h.1.ln_1", 0.2, 0.3),
        _b("logits", 0.3, None),
    ]
    assert first_divergent(found, 1e-3).path == f"{h0}.attn"
    # the attention's difference gone by the next layer: the layer is not blamed on it
    gone = [*found[:8], _b("transformer.h.1.ln_1", 0.0), _b("logits", 0.0, None)]
    first = first_divergent(gone, 1e-3)
    assert first is None or first.path != f"{h0}.attn"


def test_an_embedding_split_otherwise_is_still_not_where_a_later_difference_starts() -> None:
    """Gemma scales the embedding in the model (transformers inside the embedding): the
    embedding differs, every layer after it agrees until a later bug. The later bug is
    where the difference starts, not the embedding (at the model's own level nothing is
    skipped as running beside it)."""
    from prefixlint.introspect.compare.boundaries import first_divergent

    found = [
        _b("model.embed_tokens", 0.9, None),
        _b("model.layers.0.input_layernorm", 0.0),
        _b("model.layers.0.self_attn", 0.0),
        _b("model.layers.0", 0.0),
        _b("model.layers.1.input_layernorm", 0.0),
        _b("model.layers.1.mlp", 0.2),
        _b("model.layers.1", 0.2),
        _b("model", 0.2),
        _b("logits", 0.2, None),
    ]
    assert first_divergent(found, 1e-3).path == "model.layers.1.mlp"


def test_an_embedding_split_otherwise_inside_a_stack_is_not_where_the_logits_differ() -> None:
    """Gemma 3n's embedding sits in a stack (``model.self_decoder``), not in a layer: its
    scale split otherwise, every layer after it agreeing, is not run beside them; the
    difference that persists is the logits' (the zoo blamed the embedding, 91%)."""
    from prefixlint.introspect.compare.boundaries import first_divergent

    stack = "model.self_decoder"
    found = [
        _b(f"{stack}.embed_tokens", 0.9, None),
        _b(f"{stack}.layers.0.input_layernorm", 0.0),
        _b(f"{stack}.layers.0", 0.0),
        _b(f"{stack}.layers.1", 0.0),
        _b("logits", 0.25, None),
    ]
    assert first_divergent(found, 1e-3).path == "logits"


@pytest.mark.slow
def test_gpt_j_s_rotation_of_the_neox_layout_differs_at_the_attention(worker, tmp_path) -> None:
    """vLLM's GPT-J rotated the two halves of each head (NeoX) instead of neighbouring
    pairs until https://github.com/vllm-project/vllm/pull/941: PFX609 at the line that
    built the attention; the clean file compares equal."""
    clean = _introspect(worker, "GPTJForCausalLM")
    [result] = clean.results
    assert result["compare"]["status"] == "equal", result["compare"]
    assert not [d for d in clean.diagnostics if d.code == "PFX609"]
    flip = _replace("GPTJAttention", "is_neox_style=False,", "is_neox_style=True,")
    path, text = model_copy(tmp_path, "gpt_j.py", flip)
    report = _introspect(worker, f"{path}:GPTJForCausalLM")
    found = [(d.code, d.location.row) for d in report.diagnostics if d.code == "PFX609"]
    assert found == [("PFX609", _line(text, "GPTJBlock", "self.attn = GPTJAttention("))], (
        found,
        [d.message for d in report.diagnostics],
    )


def test_a_linear_rope_scaling_variant_where_the_config_holds_the_default_rope() -> None:
    from transformers import Gemma3TextConfig, LlamaConfig

    from prefixlint.introspect.compare.variants import comparison_variants

    def variants(config, name: str) -> dict:
        model_config = SimpleNamespace(hf_config=config, hf_text_config=config)
        found = comparison_variants(model_config, [_file(name)], None)
        return {v.label: v.overrides for v in found}

    llama = variants(LlamaConfig(), "llama.py")
    scaled = llama["rope_parameters.rope_type=linear"]["rope_parameters"]
    assert scaled["rope_type"] == "linear" and scaled["factor"] == 2.0
    assert scaled["rope_theta"] == LlamaConfig().rope_parameters["rope_theta"]
    # per-layer-type rope parameters (Gemma 3's sliding and full attention): none
    gemma3 = variants(Gemma3TextConfig(), "gemma3.py")
    assert not [x for x in gemma3 if "rope_type" in x]
    # a config that scales already is compared as it is
    linear = LlamaConfig(rope_parameters={"rope_type": "linear", "factor": 4.0, "rope_theta": 1e4})
    assert not [x for x in variants(linear, "llama.py") if "rope_type" in x]


def _file(name: str) -> str:
    from tests.conftest import VLLM

    assert VLLM is not None
    return str(VLLM / "model_executor" / "models" / name)


ROPE = 'rope_parameters=getattr(config, "rope_parameters", None),\n            is_neox_style'
DEFAULT_ROPE = (
    'rope_parameters={"rope_type": "default", '
    '"rope_theta": config.rope_parameters["rope_theta"]},\n            is_neox_style'
)


@pytest.mark.slow
def test_a_rope_scaling_dropped_differs_on_the_scaled_variant(worker, tmp_path) -> None:
    """llama.py's rotary embedding built with the default rope whatever the config
    scales: equal on the synthesised config, PFX609 on the linear-scaling variant at
    the attention's line."""
    from prefixlint.introspect import introspect

    path, text = model_copy(tmp_path, "llama.py", _replace("LlamaAttention", ROPE, DEFAULT_ROPE))
    report = introspect(f"{path}:LlamaForCausalLM", tp=(1,), pp=(1,), worker=worker, dryrun=False)
    [result] = report.results
    assert result["compare"]["status"] == "equal", result["compare"]
    line = _line(text, "LlamaDecoderLayer", "self.self_attn = attn_layer_type(")
    found = [(d.location.row, d.message) for d in report.diagnostics if d.code == "PFX609"]
    assert [row for row, _ in found] == [line], found
    assert "rope_parameters.rope_type=linear" in found[0][1]


def test_a_module_is_matched_by_the_name_its_renamed_weights_are_saved_under() -> None:
    """transformers 5 names Mixtral's and PhiMoE's MoE block ``mlp``; the checkpoint
    saves its gate under ``block_sparse_moe`` (PhiMoE's ``router`` as ``gate``). The block
    is found where its weights are saved, segment for segment; a conversion that drops
    a segment (HY V4's ``hc_pre``) says nothing of where a module went."""
    from prefixlint.introspect.compare.boundaries import _saved_as

    saved = {"model.layers.0.block_sparse_moe.gate.weight": "model.layers.0.mlp.router.weight"}
    assert _saved_as("model.layers.0.mlp", saved) == "model.layers.0.block_sparse_moe"
    assert _saved_as("model.layers.0.mlp.router", saved) == "model.layers.0.block_sparse_moe.gate"
    assert _saved_as("model.layers.0.self_attn", saved) is None
    dropped = {"model.layers.0.hc_attn.fn": "model.layers.0.hc_pre.hc_attn.fn"}
    assert _saved_as("model.layers.0.hc_pre", dropped) is None
