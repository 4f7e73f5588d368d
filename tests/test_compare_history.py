"""Gaps found by re-creating real, fixed vLLM bugs (``bench/history_bugs.py``).

Fast: the comparison's smaller config keeps a partial rotary dimension of two pairs at
least; a module of a parallel block (GPT-J's attention beside its MLP) is where the
difference starts, while an embedding split otherwise than transformers' is still not.
Slow (real vLLM, one worker): GPT-J's rotary embedding of the NeoX layout (vLLM's bug
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
