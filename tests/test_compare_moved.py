"""The comparison's variant of moved values (``compare/moved.py``): a norm eps, a rotary
base and a per-layer sliding window set off the constants a model could write instead.

Fast: which values move for which config class. Slow (real vLLM, one worker): a rotary
base written as 10000 (Granite) and a window placed on the wrong layers (Gemma 2) give
PFX609 in the patched file on that variant, where the synthesised config (rope_theta
10000, a window of 64 over 9 tokens) compares equal; each clean file's variant compares
equal. A norm eps written as 1e-5 (Qwen3) differs already on the synthesised config
(Qwen3's released 1e-6: 7e-4 of the norm's output, the comparison's tight tier), an
error at the norm's line."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.conftest import requires_vllm
from tests.test_compare import _line, model_copy
from tests.test_compare_variants import _file, _introspect, _pfx609

pytestmark = requires_vllm


def _moved(config, name: str, reference: type) -> dict:
    from prefixlint.introspect.compare.variants import comparison_variants

    model_config = SimpleNamespace(hf_config=config, hf_text_config=config)
    found = comparison_variants(model_config, [_file(name)], None, reference)
    [moved] = [v for v in found if "eps=0.01" in v.label or "epsilon=0.01" in v.label]
    return moved.overrides


def test_the_values_a_model_could_hard_code_move_off_their_defaults() -> None:
    from transformers import Gemma2Config, MistralConfig
    from transformers.models.gemma2.modeling_gemma2 import Gemma2ForCausalLM
    from transformers.models.mistral.modeling_mistral import MistralForCausalLM

    gemma2 = _moved(Gemma2Config(), "gemma2.py", Gemma2ForCausalLM)
    assert gemma2["rms_norm_eps"] == 0.01 and gemma2["sliding_window"] == 4
    assert gemma2["rope_parameters"]["rope_theta"] == 1000.0
    # Mistral's window is the engine's CacheConfig's (no layer types): not moved, as the
    # comparison builds with the default CacheConfig
    mistral = _moved(MistralConfig(), "llama.py", MistralForCausalLM)
    assert "sliding_window" not in mistral and mistral["rms_norm_eps"] == 0.01


# (file, class, the class of the edit, old, new, the finding's class, its line's text)
CASES = [
    (
        "granite.py",
        "GraniteForCausalLM",
        'else config.rope_parameters["rope_theta"]',
        "else 10000.0",
        ("GraniteDecoderLayer", "self.self_attn = GraniteAttention("),
    ),
    (
        "gemma2.py",
        "Gemma2ForCausalLM",
        'is_sliding = config.layer_types[layer_idx] == "sliding_attention"',
        'is_sliding = config.layer_types[layer_idx] != "sliding_attention"',
        ("Gemma2DecoderLayer", "self.self_attn = Gemma2Attention("),
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize("name,cls,old,new,at", CASES, ids=[c[0] for c in CASES])
def test_a_value_hard_coded_differs_on_the_moved_variant(
    worker, tmp_path, name, cls, old, new, at
) -> None:
    def moved(results) -> list[dict]:
        return [v for v in results["compare"]["variants"] if "=0.01" in v["variant"]]

    path, text = model_copy(tmp_path, name, lambda t: t.replace(old, new, 1))
    assert new in text
    report = _introspect(worker, f"{path}:{cls}")
    [result] = report.results
    assert result["compare"]["status"] == "equal", result["compare"]
    [variant] = moved(result)
    line = _line(text, *at)
    found = [f for f in _pfx609(report) if f[2] == variant["variant"]]
    assert found == [(path.name, line, variant["variant"])], (_pfx609(report), result["compare"])

    clean, _ = model_copy(tmp_path, name, lambda t: t)
    report = _introspect(worker, f"{clean}:{cls}")
    [result] = report.results
    assert [v["status"] for v in moved(result)] == ["equal"], result["compare"]


@pytest.mark.slow
def test_a_norm_eps_hard_coded_differs_on_the_config_itself(worker, tmp_path) -> None:
    """Qwen3's norm built with eps 1e-5 against the config's (and released) 1e-6: 7e-4 of
    the norm's output, beyond the tight tier (facts.TIGHT_TOLERANCE) on the synthesised
    config itself, so an error there; the moved variant does not repeat the line."""
    old = "self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)"
    new = "self.input_layernorm = RMSNorm(config.hidden_size, eps=1e-5)"
    path, text = model_copy(tmp_path, "qwen3.py", lambda t: t.replace(old, new, 1))
    assert new in text
    report = _introspect(worker, f"{path}:Qwen3ForCausalLM")
    [result] = report.results
    assert result["compare"]["status"] == "differs", result["compare"]
    line = _line(text, "Qwen3DecoderLayer", "self.input_layernorm = RMSNorm(")
    # on the config itself; clean Qwen3's own `attention_bias=True` difference aside
    # (docs/precision.md)
    found = [f for f in _pfx609(report) if f[2] == ""]
    assert found == [(path.name, line, "")], (_pfx609(report), result["compare"])
    [finding] = [d for d in report.diagnostics if d.code == "PFX609" and d.location.row == line]
    assert finding.severity == "error"
