"""A config flag the model ignores altogether (issue 38's blind batch: a bias flag, a MoE
``norm_topk_prob`` written over with a constant) leaves no read in the model's file, so
a variant of the flags the model reads never tries it. The comparison's variants also
flip the flags transformers' reference computes with and the model never reads
(``compare/variants.py``'s ``_ignored_flags``).

Fast: which variants such a copy gets. Slow (real vLLM, one worker): Qwen3-MoE's router
written with ``renormalize=False`` gives PFX609 at the experts' line on the variant
``norm_topk_prob=True``; the clean file's variant of that flag compares equal."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import requires_vllm
from tests.test_compare import _line, _replace, model_copy
from tests.test_compare_variants import _introspect, _pfx609

pytestmark = requires_vllm

READ = "renormalize=config.norm_topk_prob,"
IGNORED = "renormalize=False,"


def _labels(path: Path) -> list[str]:
    from transformers import Qwen3MoeConfig
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeForCausalLM

    from prefixlint.introspect.compare.variants import comparison_variants

    config = Qwen3MoeConfig(norm_topk_prob=False)
    model_config = SimpleNamespace(hf_config=config, hf_text_config=config)
    found = comparison_variants(model_config, [str(path)], None, Qwen3MoeForCausalLM)
    return [v.label for v in found]


def test_a_flag_the_model_no_longer_reads_still_gets_its_variant(tmp_path) -> None:
    clean, _ = model_copy(tmp_path, "qwen3_moe.py", lambda t: t)
    ignored, _ = model_copy(
        tmp_path, "qwen3_moe.py", _replace("Qwen3MoeSparseMoeBlock", READ, IGNORED)
    )
    assert "norm_topk_prob=True" in _labels(clean)
    labels = _labels(ignored)
    assert "norm_topk_prob=True" in labels
    # the flags the model reads come first; what a forward returns or caches is no variant
    assert labels.index("norm_topk_prob=True") > labels.index("attention_bias=True")
    assert not [x for x in labels if x.startswith(("use_cache", "output_", "return_"))]


def test_without_the_reference_no_flag_the_model_ignores_is_tried(tmp_path) -> None:
    from transformers import Qwen3MoeConfig

    from prefixlint.introspect.compare.variants import comparison_variants

    ignored, _ = model_copy(
        tmp_path, "qwen3_moe.py", _replace("Qwen3MoeSparseMoeBlock", READ, IGNORED)
    )
    config = Qwen3MoeConfig(norm_topk_prob=False)
    model_config = SimpleNamespace(hf_config=config, hf_text_config=config)
    labels = [v.label for v in comparison_variants(model_config, [str(ignored)], None)]
    assert "norm_topk_prob=True" not in labels  # nothing says the flag computes anything


@pytest.mark.slow
def test_a_moe_renormalisation_ignored_differs_on_its_variant(worker, tmp_path) -> None:
    edit = _replace("Qwen3MoeSparseMoeBlock", READ, IGNORED)
    path, text = model_copy(tmp_path, "qwen3_moe.py", edit)
    report = _introspect(worker, f"{path}:Qwen3MoeForCausalLM")
    [result] = report.results
    line = _line(text, "Qwen3MoeSparseMoeBlock", "self.experts = FusedMoEFactory(")
    found = [f for f in _pfx609(report) if f[2] == "norm_topk_prob=True"]
    assert found == [(path.name, line, "norm_topk_prob=True")], (_pfx609(report), result["compare"])

    clean, _ = model_copy(tmp_path, "qwen3_moe.py", lambda t: t)
    report = _introspect(worker, f"{clean}:Qwen3MoeForCausalLM")
    [result] = report.results
    variants = {v["variant"]: v["status"] for v in result["compare"]["variants"]}
    assert variants["norm_topk_prob=True"] == "equal", result["compare"]
