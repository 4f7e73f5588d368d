"""The comparison's tight tier (``facts.TIGHT_TOLERANCE``, docs/compare.md "fifth round:
small systematic differences"): where no boundary differs by 1e-3, a module whose input
agrees to float32's noise and whose output differs by more than 4e-5 is where a small,
systematic difference starts.

Fast: the rule on boundaries as the comparison finds them (noise that grows through the
layers is no start; a module that adds 2e-4 to an input at the noise is; an embedding or
the logits only where everything before agrees to the noise).
Slow (real vLLM, one worker): an activation's approximation swapped (vLLM's Gemma ran the
exact GeLU for the tanh one, https://github.com/vllm-project/vllm/issues/3411) in copies
of gemma.py, gemma2.py and gpt2.py made here, each PFX609 at the line that built the MLP;
the clean copies compare equal."""

from __future__ import annotations

import pytest

from tests.conftest import requires_vllm
from tests.test_compare import _introspect, _line, model_copy

pytestmark = requires_vllm


def _b(path: str, rel: float, input_rel: float | None):
    from prefixlint.introspect.compare.facts import Boundary

    return Boundary(path, path, rel, rel, input_rel, ("model.py", len(path)))


def _layers(mlp: float, after: float) -> list:
    """Two layers as Gemma's are compared: the first MLP's output ``mlp`` off, every
    boundary after it ``after`` off; inputs at the noise before."""
    l0, l1 = "model.layers.0", "model.layers.1"
    return [
        _b("model.embed_tokens", 0.0, None),
        _b(f"{l0}.input_layernorm", 0.0, 0.0),
        _b(f"{l0}.self_attn", 5e-7, 0.0),
        _b(f"{l0}.post_attention_layernorm", 3e-7, 3e-7),
        _b(f"{l0}.mlp.gate_up_proj", 3e-7, 3e-7),
        _b(f"{l0}.mlp.down_proj", mlp, mlp),
        _b(f"{l0}.mlp", mlp, 3e-7),
        _b(l0, after, 0.0),
        _b(f"{l1}.input_layernorm", after, after),
        _b(f"{l1}.mlp", after, after),
        _b(l1, after, after),
        _b("model.norm", after, after),
        _b("logits", after, None),
    ]


def test_a_small_difference_on_an_input_at_the_noise_starts_at_the_module() -> None:
    from prefixlint.introspect.compare.boundaries import first_divergent, first_tight
    from prefixlint.introspect.compare.facts import TIGHT_INPUT, TIGHT_TOLERANCE, TOLERANCE

    found = _layers(1.9e-4, 1e-4)  # Gemma's exact GeLU, as measured
    assert first_divergent(found, TOLERANCE) is None  # below the first tier
    first = first_tight(found, TIGHT_TOLERANCE, TIGHT_INPUT)
    assert first is not None and first.path == "model.layers.0.mlp"
    # the clean file: float32's noise everywhere
    assert first_tight(_layers(1e-6, 1e-6), TIGHT_TOLERANCE, TIGHT_INPUT) is None


def test_noise_grown_through_the_layers_is_no_start() -> None:
    """Each module adds less than tenfold to what it is given: no boundary's input agrees
    to the noise where its output is beyond the tight tolerance."""
    from prefixlint.introspect.compare.boundaries import first_tight
    from prefixlint.introspect.compare.facts import TIGHT_INPUT, TIGHT_TOLERANCE

    rels = [1e-6 * 3**i for i in range(8)]  # 1e-6 .. 2.2e-3, threefold per module
    found = [_b("model.embed_tokens", 0.0, None)]
    given = 0.0
    for i, rel in enumerate(rels):
        found.append(_b(f"model.layers.{i}", rel, given))
        given = rel
    found.append(_b("logits", rels[-1], None))
    assert first_tight(found, TIGHT_TOLERANCE, TIGHT_INPUT) is None


def test_the_logits_start_only_where_everything_before_agrees_to_the_noise() -> None:
    from prefixlint.introspect.compare.boundaries import first_tight
    from prefixlint.introspect.compare.facts import TIGHT_INPUT, TIGHT_TOLERANCE

    found = [
        _b("model.embed_tokens", 0.0, None),
        _b("model.layers.0", 5e-7, 0.0),
        _b("model.norm", 6e-7, 5e-7),
        _b("logits", 1e-4, None),
    ]
    assert first_tight(found, TIGHT_TOLERANCE, TIGHT_INPUT).path == "logits"
    # the final norm 1e-5 off (beyond the noise, within the tight tolerance): no start
    found[2] = _b("model.norm", 1e-5, 5e-7)
    assert first_tight(found, TIGHT_TOLERANCE, TIGHT_INPUT) is None


# (file, class, old, new, where the finding must be: class, needle); ``old`` replaced once
SWAPPED = [
    (
        "gemma.py",
        "GemmaForCausalLM",
        # in the MLP: whichever `hidden_activation` the comparison's guesses try
        # (transformers' GemmaConfig has none; guesses.py), the exact GeLU runs
        "self.act_fn = _get_gemma_act_fn(hidden_act, hidden_activation)",
        'self.act_fn = GeluAndMul(approximate="none")',
        ("GemmaDecoderLayer", "self.mlp = GemmaMLP("),
    ),
    (
        "gemma2.py",
        "Gemma2ForCausalLM",
        'GeluAndMul(approximate="tanh")',
        'GeluAndMul(approximate="none")',
        ("Gemma2DecoderLayer", "self.mlp = Gemma2MLP("),
    ),
    (  # GPT-2's `gelu_new` is the tanh approximation; "gelu" the exact one
        "gpt2.py",
        "GPT2LMHeadModel",
        "get_act_fn(config.activation_function)",
        'get_act_fn("gelu")',
        ("GPT2Block", "self.mlp = GPT2MLP("),
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "cls", "old", "new", "at"), SWAPPED, ids=[s[0] for s in SWAPPED])
def test_an_activation_approximation_swapped_differs_at_the_mlp(
    worker, tmp_path, name, cls, old, new, at
) -> None:
    clean, text = model_copy(tmp_path, name, lambda t: t)
    report = _introspect(worker, f"{clean}:{cls}")
    [result] = report.results
    assert result["compare"]["status"] == "equal", result["compare"]
    assert not [d for d in report.diagnostics if d.code == "PFX609"]

    def swap(t: str) -> str:
        assert t.count(old) == 1, old
        return t.replace(old, new)

    path, text = model_copy(tmp_path, name, swap)
    report = _introspect(worker, f"{path}:{cls}")
    found = [(d.severity, d.location.row) for d in report.diagnostics if d.code == "PFX609"]
    assert found == [("error", _line(text, *at))], (found, [d.message for d in report.diagnostics])
