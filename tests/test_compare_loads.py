"""The comparison's checkpoint load as a finding (``compare/extras.py``, the PFX609 unit).

Fast: a kind of name real checkpoints carry counts as refused only where the rest of the
checkpoint loads without it (never a refusal of the probe's own stream); the head_dim
variant, whose refused checkpoint is the model's (``served``; the refusal's own unit test
is ``test_compare_schedules.py``'s). Slow (real vLLM, one worker):
a loader that keeps ``rotary_emb.inv_freq`` is a PFX609 error at its line; Qwen3-MoE's
``head_dim`` derived from ``hidden_size`` fails to load on the head_dim variant, a PFX609
warning; a copy of HY V3 given by file builds and compares (its config repairs read the
copy), and the clean copies give none of these."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import requires_vllm
from tests.test_compare import model_copy

pytestmark = requires_vllm


def _raise(message: str) -> BaseException:
    try:
        raise KeyError(message)
    except KeyError as e:
        return e


def test_a_kind_is_refused_only_where_the_rest_of_the_checkpoint_loads_without_it() -> None:
    from prefixlint.introspect.compare.extras import refusals

    state = {"model.embed.weight": 0, "lm_head.weight": 1, "model.layers.0.rotary_emb.inv_freq": 2}
    extras = ["lm_head.weight", "model.layers.0.rotary_emb.inv_freq"]
    model = SimpleNamespace(lm_head=object())
    streamed: list[list[str]] = []

    def only_the_embedding(items):  # refuses anything alone, takes the whole checkpoint
        streamed.append([k for k, _ in items])
        return None if "model.embed.weight" in streamed[-1] else _raise("alone")

    assert refusals(model, state, extras, only_the_embedding) == []
    assert all("model.embed.weight" in s for s in streamed)  # never an extra alone

    def refuses_inv_freq(items):
        names = [k for k, _ in items]
        return _raise(names[-1]) if names[-1].endswith("inv_freq") else None

    [found] = refusals(model, state, extras, refuses_inv_freq)
    assert found.tensor == "model.layers.0.rotary_emb.inv_freq" and found.rotary
    assert "KeyError" in found.said

    def fails_anyway(items):  # the stream itself fails here (a loader needing values)
        return _raise("no")

    assert refusals(model, state, extras, fails_anyway) == []
    # a model without a head has no duplicate to skip: the tied head is not probed
    headless = SimpleNamespace()
    seen: list[list[str]] = []
    refusals(headless, state, extras, lambda items: seen.append([k for k, _ in items]))
    assert not any("lm_head.weight" in s for s in seen)


def test_a_refused_extra_is_an_error_for_inv_freq_and_a_warning_for_a_tied_head() -> None:
    from prefixlint.introspect.checks.pfx609_output_mismatch import OutputMismatch
    from prefixlint.introspect.compare.facts import Comparison, Refusal, Status

    comparison = Comparison(Status.EQUAL, reference="R")
    comparison.refusals = [
        Refusal("model.layers.0.self_attn.rotary_emb.inv_freq", "", ("/m/a.py", 7), "KeyError: x"),
        Refusal("lm_head.weight", "", ("/m/a.py", 9), "ValueError: y"),
    ]
    found = OutputMismatch().findings(comparison, None)
    assert [(f.line, f.severity) for f in found] == [(7, "error"), (9, "warning")]
    assert "rotary_emb.inv_freq" in found[0].message


def test_the_head_dim_variant_moves_it_off_hidden_over_heads() -> None:
    from transformers import GPT2LMHeadModel, Qwen3MoeConfig, Qwen3MoeForCausalLM

    from prefixlint.introspect.compare.variants import _head_dim_moved

    config = Qwen3MoeConfig(hidden_size=128, num_attention_heads=16, head_dim=None)
    variant = _head_dim_moved(config, Qwen3MoeForCausalLM)
    assert variant is not None and variant.overrides == {"head_dim": 16} and variant.latent
    assert variant.served == "always" and not variant.schedule  # run among the others
    config.head_dim = 8  # the quotient, written out: the same
    assert _head_dim_moved(config, Qwen3MoeForCausalLM) == variant
    config.head_dim = 32  # off it already: the config itself compares it
    assert _head_dim_moved(config, Qwen3MoeForCausalLM) is None
    # a reference that never reads head_dim has nothing to compare it with
    assert _head_dim_moved(Qwen3MoeConfig(head_dim=None), GPT2LMHeadModel) is None


def _introspect(worker, target: str):
    from prefixlint.introspect import introspect

    return introspect(target, tp=(1,), pp=(1,), worker=worker, dryrun=False, explore_budget=30)


def _pfx609(report, path: Path, words: str) -> list[tuple[int, str]]:
    return [
        (d.location.row, str(d.severity).lower().rsplit(".", 1)[-1])
        for d in report.diagnostics
        if d.code == "PFX609" and Path(d.filename).name == path.name and words in d.message
    ]


LOADER = "        loader = AutoWeightsLoader(self)\n"
# the rotary skip vLLM's loader makes for every model, gone: as a hand-written loader has none
NO_SKIP = LOADER + "        loader.REMOVE_UNUSED_ROTARY_EMBEDS_MAPPER = WeightsMapper()\n"


@pytest.mark.slow
def test_a_loader_that_keeps_inv_freq_is_a_pfx609_error_at_its_line(worker, tmp_path) -> None:
    path, text = model_copy(tmp_path, "llama.py", lambda t: t.replace(LOADER, NO_SKIP))
    assert NO_SKIP in text
    report = _introspect(worker, f"{path}:LlamaForCausalLM")
    [result] = report.results
    assert result["compare"]["status"] == "equal", result["compare"]
    loads = {
        i + 1 for i, line in enumerate(text.splitlines()) if "return loader.load_weights" in line
    }
    found = _pfx609(report, path, "rotary_emb.inv_freq")
    assert found and {line for line, _ in found} <= loads, (found, result["compare"])
    assert {severity for _, severity in found} == {"error"}
    clean, _ = model_copy(tmp_path, "llama.py", lambda t: t)
    assert _pfx609(_introspect(worker, f"{clean}:LlamaForCausalLM"), clean, "refuses") == []


HEAD_DIM = "self.head_dim = head_dim or (hidden_size // self.total_num_heads)"


@pytest.mark.slow
def test_head_dim_derived_from_the_width_fails_its_variant_a_pfx609_warning(
    worker, tmp_path
) -> None:
    edit = HEAD_DIM.replace("head_dim or (hidden_size // self.total_num_heads)", "")
    path, _ = model_copy(
        tmp_path,
        "qwen3_moe.py",
        lambda t: t.replace(HEAD_DIM, edit + "hidden_size // self.total_num_heads", 1),
    )
    report = _introspect(worker, f"{path}:Qwen3MoeForCausalLM")
    found = _pfx609(report, path, "refuses transformers' checkpoint")
    assert found and {severity for _, severity in found} == {"warning"}, report.results
    clean, _ = model_copy(tmp_path, "qwen3_moe.py", lambda t: t)
    assert _pfx609(_introspect(worker, f"{clean}:Qwen3MoeForCausalLM"), clean, "refuses") == []


@pytest.mark.slow
def test_a_copy_of_hy_v3_given_by_file_builds_and_compares(worker, tmp_path) -> None:
    """HY V3 refuses a config without ``first_k_dense_replace`` behind ``hasattr``: the
    repair loop seeds what the model's files read, and a copy outside a ``models/``
    folder was not among them (the build failed: a PFX600 note, no comparison)."""
    path, _ = model_copy(tmp_path, "hy_v3.py", lambda t: t)
    [result] = _introspect(worker, f"{path}:HYV3ForCausalLM").results
    assert result["status"] == "built", result["reason"]
    assert "first_k_dense_replace" in result["config_source"]
    assert result["compare"]["status"] == "equal", result["compare"]


def test_a_module_whose_conversion_reverts_some_tensors_only_is_half_converted() -> None:
    """HRM-Text's conversion fuses the attention's weights and leaves their biases: the
    reverted checkpoint mixes both layouts, a tool gap, not the model's load."""
    from prefixlint.introspect.compare.extras import half_converted

    names = ["a.gate_proj.weight", "a.gate_proj.bias", "a.o_proj.weight", "lm_head.weight"]
    mixed = {"a.gqkv_proj.weight": 0, "a.gate_proj.bias": 0, "a.o_proj.weight": 0}
    refused = "m.a.gate_proj.bias"  # the tensor the loader refuses (the model's prefix)
    assert half_converted(names, mixed, refused) == "a.gate_proj"
    # a refusal in another module: the mixture is not why it failed
    assert half_converted(names, mixed, "m.a.o_proj.bias") == ""
    # all renamed (or dropped, as a tied head) is a layout of its own, not a mixture
    whole = {"a.gqkv_proj.weight": 0, "a.gqkv_proj.bias": 0, "a.o_proj.weight": 0}
    assert half_converted(names, whole, refused) == ""


def test_a_variant_value_transformers_refuses_is_no_value_it_accepts() -> None:
    """The explorer's ``interleave_moe_layer_step=0`` makes Llama 4's config derivation
    raise (and Laguna refuses ``moe_apply_router_weight_on_input``): a failure on such a
    variant says nothing of the model (its refusal is not served, so no PFX609)."""
    from transformers import LagunaConfig, Llama4TextConfig, Qwen3MoeConfig

    from prefixlint.introspect.compare.variants import _class_accepts

    def of(config):
        return SimpleNamespace(hf_config=config, hf_text_config=None)

    assert not _class_accepts(of(Llama4TextConfig()), {"interleave_moe_layer_step": 0})
    assert not _class_accepts(of(LagunaConfig()), {"moe_apply_router_weight_on_input": True})
    assert _class_accepts(of(Llama4TextConfig()), {"attention_bias": True})
    assert _class_accepts(of(Qwen3MoeConfig()), {"head_dim": 16})
