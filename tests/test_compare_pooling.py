"""Pooling models in the comparison (``compare/pooling.py``, issue 38): encoders, embedding
models built on decoders and classifiers compare module by module and at the forward's
output; a bug planted in a copy of vLLM's BERT or RoBERTa file is PFX609 at its line."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.conftest import requires_vllm
from tests.test_compare import _introspect, _replace, assert_one_pfx609_at, model_copy

pytestmark = requires_vllm


class _Out:
    def __init__(self, logits: torch.Tensor | None) -> None:
        self.logits = logits


def test_the_output_is_compared_with_transformers_output_of_its_size() -> None:
    """Per-token logits where the forward applies a head (token classifier, masked LM), the
    base model's last hidden state where the head is the pooler's (a sequence classifier);
    nothing where neither has the size."""
    from prefixlint.introspect.compare.pooling import reference_output

    hidden, logits = torch.randn(1, 9, 32), torch.randn(1, 9, 5)
    pooled = _Out(torch.randn(1, 3))  # a sequence classifier's logits: one row
    assert reference_output(torch.randn(9, 32), pooled, hidden) is not None
    assert torch.equal(reference_output(torch.randn(9, 32), pooled, hidden), hidden)
    assert torch.equal(reference_output(torch.randn(9, 5), _Out(logits), hidden), logits)
    assert reference_output(torch.randn(9, 7), _Out(logits), hidden) is None


def test_the_ids_hold_no_padding_token() -> None:
    """RoBERTa numbers its positions over the tokens that are not padding: vLLM's one
    sequence has none."""
    from types import SimpleNamespace

    from prefixlint.introspect.compare.pooling import without_padding

    ids = torch.tensor([1, 5, 1, 7, 9])
    out = without_padding(ids, SimpleNamespace(pad_token_id=1, vocab_size=10))
    assert 1 not in out.tolist()
    assert out.tolist() == [2, 5, 2, 7, 9]
    assert torch.equal(without_padding(ids, SimpleNamespace(vocab_size=10)), ids)


class _Base(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(4, 2)
        self.norm = nn.LayerNorm(2)


class _Pooling(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.model = _Base()


def test_a_base_models_names_go_under_model_for_a_pooling_model_only() -> None:
    """vLLM's embedding adapter loads a base model's checkpoint (``embed_tokens.weight``)
    under its ``model.``: so do the boundaries, for a pooling model only."""
    from prefixlint.introspect.compare.boundaries import matched

    found = matched(_Pooling(), _Base(), None, pooling=True)
    assert found == {"model.embed_tokens": ("embed_tokens",), "model.norm": ("norm",)}
    assert matched(_Pooling(), _Base(), None) == {}


CLEAN = ["BertModel", "BertForSequenceClassification", "BertForTokenClassification"]
CLEAN += ["BertForMaskedLM", "RobertaModel", "XLMRobertaForSequenceClassification"]
CLEAN += ["ModernBertForSequenceClassification", "NomicBertModel", "Qwen2Model"]
CLEAN += ["GPT2ForSequenceClassification"]


@pytest.mark.slow
@pytest.mark.parametrize("arch", CLEAN)
def test_clean_pooling_models_compare_equal(worker, arch) -> None:
    report = _introspect(worker, arch)
    [result] = report.results
    assert result["compare"]["status"] == "equal", result["compare"]
    assert result["compare"]["compared"] >= 5
    assert not [d for d in report.diagnostics if d.code == "PFX609"]


# (file, class, where the bug is, old, new, where the finding must be: class, needle)
PLANTED = [
    (  # a wrong softmax scale in BERT's bidirectional self-attention
        "bert.py",
        "BertForSequenceClassification",
        "BertSelfAttention",
        "self.scaling = self.head_dim**-0.5",
        "self.scaling = self.head_dim**-0.4",
        ("BertAttention", "self.self = BertSelfAttention("),
    ),
    (  # RoBERTa's positions from 0, not after the padding index: its position embedding
        "roberta.py",
        "RobertaForSequenceClassification",
        "RobertaEmbedding",
        "position_ids + self.padding_idx + 1",
        "position_ids + self.padding_idx",
        ("RobertaEmbedding", "self.position_embeddings = VocabParallelEmbedding("),
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize("case", PLANTED, ids=[f"{c[1]}-{c[2]}" for c in PLANTED])
def test_a_planted_bug_in_a_pooling_model_gives_pfx609_at_its_line(worker, tmp_path, case):
    name, arch, cls, old, new, at = case
    path, text = model_copy(tmp_path, name, _replace(cls, old, new))
    assert_one_pfx609_at(worker, path, text, arch, at)


def _attention(kind: str, window: int | None) -> nn.Module:
    from prefixlint.introspect import vllm_api

    cls, _ = vllm_api.attention_classes()
    layer = cls.__new__(cls)
    nn.Module.__init__(layer)
    layer.attn_type, layer.sliding_window = kind, window
    return layer


def test_a_bidirectional_window_that_binds_is_not_run() -> None:
    """The reference bounds causal layers only: a bidirectional window shorter than the
    sequence is a gap; one that masks nothing, or a causal one, runs."""
    from prefixlint.introspect.compare.attention import binding_encoder_windows

    def model(*layers: nn.Module) -> nn.Module:
        return nn.ModuleList(layers)

    assert binding_encoder_windows(model(_attention("encoder_only", 4)), 9) == ["Attention"]
    assert binding_encoder_windows(model(_attention("encoder_only", 9)), 9) == []
    assert binding_encoder_windows(model(_attention("encoder_only", None)), 9) == []
    assert binding_encoder_windows(model(_attention("decoder", 4)), 9) == []
