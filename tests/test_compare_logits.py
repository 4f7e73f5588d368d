"""Logits that differ after agreeing final hidden states, placed at the part at fault
(``compare/logits.py``): the head's weight at the line that built the head, the logits
processor's scale or soft-cap at the line that built the processor, the model's own
``compute_logits`` at its ``def``.

Fast: the placement on hand-made records. Slow (real vLLM, one worker, planted copies of
the installed files made at test time): Cohere's logit scale dropped (vllm#3433's review)
and Gemma 2's final soft-cap dropped at ``self.logits_processor = LogitsProcessor(``;
Cohere's head untied from its embedding at the line that built the head; Cohere's own
``compute_logits`` scaling at its ``def``. Before, each was "the head or
`compute_logits`" at the class line (or at ``lm_head``'s)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.conftest import requires_vllm
from tests.test_compare import _introspect, _line, _replace, model_copy

pytestmark = requires_vllm

VOCAB, HIDDEN = 12, 4


class _Model(nn.Module):
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden


def _records(scale: float = 1.0, weight: torch.Tensor | None = None, tweak: float = 1.0):
    """(seen, model, sites, given) as the comparison records them for a head of
    ``weight`` (transformers' by default), a processor scaling by ``scale``, and a
    ``compute_logits`` that multiplies its output by ``tweak``."""
    from prefixlint.introspect.compare.logits import Seen

    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(9, HIDDEN, generator=generator)
    theirs = torch.randn(VOCAB, HIDDEN, generator=generator)
    model = _Model()
    model.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False)
    model.logits_processor = nn.Identity()
    with torch.no_grad():
        model.lm_head.weight.copy_(theirs if weight is None else weight)
    processed = hidden @ model.lm_head.weight.detach().T * scale
    seen = Seen(model.logits_processor, model.lm_head, hidden, None, processed, 1)
    seen.reference_in, seen.reference_out = hidden[None], (hidden @ theirs.T)[None]
    sites = {id(model.lm_head): ("m.py", 10), id(model.logits_processor): ("m.py", 20)}
    return seen, model, sites, (hidden, processed * tweak), theirs


def _placed(seen, model, sites, given):
    from prefixlint.introspect.compare.facts import Boundary
    from prefixlint.introspect.compare.logits import placed

    first = Boundary("logits", "logits", 1.0, 0.5, None, ("m.py", 1))
    return placed(first, seen, given, model, sites, 1e-3)


def test_a_wrong_head_weight_is_the_head() -> None:
    theirs = _records()[4]  # laid out another way: the same numbers, other rows
    seen, model, sites, given, _ = _records(weight=theirs.T.reshape(VOCAB, HIDDEN))
    found = _placed(seen, model, sites, given)
    assert found.site == ("m.py", 10) and "the head `lm_head`" in found.blame, found


def test_a_head_that_does_not_fit_the_hidden_states_is_the_head() -> None:
    seen, model, sites, given, _ = _records()
    seen.head = nn.Linear(VOCAB, HIDDEN, bias=False)  # its weight laid out transposed
    sites[id(seen.head)] = ("m.py", 30)
    found = _placed(seen, model, sites, given)
    assert found.site == ("m.py", 30) and "its weight" in found.blame, found


def test_a_scale_after_an_agreeing_head_is_the_logits_processor() -> None:
    found = _placed(*_records(scale=0.5)[:4])
    assert found.site == ("m.py", 20) and "logits processor" in found.blame, found


def test_a_change_compute_logits_makes_after_the_processor_is_at_its_def() -> None:
    found = _placed(*_records(tweak=2.0)[:4])
    code = _Model.compute_logits.__code__
    assert found.site == (code.co_filename, code.co_firstlineno), found
    assert "`compute_logits` changes" in found.blame, found


def test_a_bias_not_passed_to_the_processor_is_compute_logits() -> None:
    """PhiMoE's head has a bias vLLM never passes (docs/precision.md): with the head's
    own bias its output agrees, so the call in ``compute_logits`` is at fault."""
    seen, model, sites, given, _ = _records()
    model.lm_head.bias = nn.Parameter(torch.full((VOCAB,), 0.5))
    seen.reference_out = seen.reference_out + 0.5
    found = _placed(seen, model, sites, given)
    assert found.site != ("m.py", 10) and "bias" in found.blame, found


def test_a_difference_before_the_head_keeps_its_place() -> None:
    """The head gets the model's output, which transformers' head does not get (Gemma
    3n's per-layer inputs, judged in docs/precision.md): no part of the head is blamed."""
    seen, model, sites, given, _ = _records()
    seen.reference_in = seen.reference_in + 1.0
    found = _placed(seen, model, sites, given)
    assert found.site == ("m.py", 1) and "no compared module's difference" in found.blame, found


def _pfx609(worker, path, cls: str) -> list[tuple[int, str]]:
    report = _introspect(worker, f"{path}:{cls}")
    return [(d.location.row, d.message) for d in report.diagnostics if d.code == "PFX609"]


COHERE = "CohereForCausalLM"
PROCESSOR = "self.logits_processor = LogitsProcessor("


@pytest.mark.slow
def test_cohere_s_logit_scale_dropped_is_at_the_logits_processor(worker, tmp_path) -> None:
    """vllm#3433's review: ``LogitsProcessor(config.vocab_size, scale=config.logit_scale)``
    lost its scale. The clean file compares equal."""
    clean, _ = model_copy(tmp_path, "commandr.py", lambda t: t)
    assert _pfx609(worker, clean, COHERE) == []
    dropped = _replace(COHERE, "config.vocab_size, scale=config.logit_scale", "config.vocab_size")
    path, text = model_copy(tmp_path, "commandr.py", dropped)
    found = _pfx609(worker, path, COHERE)
    assert [row for row, _ in found] == [_line(text, COHERE, PROCESSOR)], found
    assert "the logits processor `logits_processor`" in found[0][1]


@pytest.mark.slow
def test_gemma2_s_final_soft_cap_dropped_is_at_the_logits_processor(worker, tmp_path) -> None:
    gemma2 = "Gemma2ForCausalLM"
    clean, _ = model_copy(tmp_path, "gemma2.py", lambda t: t)
    assert _pfx609(worker, clean, gemma2) == []
    old = "config.vocab_size, soft_cap=config.final_logit_softcapping"
    path, text = model_copy(tmp_path, "gemma2.py", _replace(gemma2, old, "config.vocab_size"))
    found = _pfx609(worker, path, gemma2)
    assert [row for row, _ in found] == [_line(text, gemma2, PROCESSOR)], found
    assert "soft-cap" in found[0][1]


UNTIED = "        self.lm_head = VocabParallelEmbedding(config.vocab_size, config.hidden_size)\n"


@pytest.mark.slow
def test_a_head_untied_from_cohere_s_embedding_is_at_the_head(worker, tmp_path) -> None:
    """Cohere ties its head to the embedding (``compute_logits`` passes
    ``embed_tokens``, the mapper drops ``lm_head``): a head of its own is never loaded."""

    def untie(text: str) -> str:
        at = "        self.make_empty_intermediate_tensors = (\n"
        text = _replace(COHERE, at, UNTIED + at)(text)
        tied = "logits = self.logits_processor(self.model.embed_tokens, hidden_states)"
        return _replace(COHERE, tied, tied.replace("self.model.embed_tokens", "self.lm_head"))(text)

    path, text = model_copy(tmp_path, "commandr.py", untie)
    found = _pfx609(worker, path, COHERE)
    assert [row for row, _ in found] == [_line(text, COHERE, UNTIED.strip())], found
    assert "the head `lm_head` gives other values" in found[0][1]


@pytest.mark.slow
def test_a_scale_in_the_model_s_own_compute_logits_is_at_its_def(worker, tmp_path) -> None:
    scaled = _replace(COHERE, "        return logits\n", "        return logits * 2\n")
    path, text = model_copy(tmp_path, "commandr.py", scaled)
    found = _pfx609(worker, path, COHERE)
    assert [row for row, _ in found] == [_line(text, COHERE, "def compute_logits(")], found
