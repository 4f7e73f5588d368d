"""The comparison on the synthesised configs of the DeepSeek/MLA family (issue 38, fourth
round): DeepSeek-V3's routing fields transformers hard-codes (``guesses.absent_guesses``),
GLM-4-MoE-Lite's per-layer MLP kinds as transformers' class derives them
(``layerlists.py``), and vLLM's reference CPU MLA backend instead of AMX's
(``vllm_api.reference_mla_backend``). Fast: each piece on its own; slow: clean vLLM
compares equal with no ``--config``, and a bug planted in a copy of the model's file is
PFX609 at the line that built the divergent module."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.conftest import requires_vllm
from tests.test_compare import _introspect, _line, _replace, assert_one_pfx609_at, model_copy
from tests.test_compare_mla import _compared, _copy

pytestmark = requires_vllm


def _model_config(config):
    return SimpleNamespace(hf_config=config, hf_text_config=config)


def test_routing_fields_a_v3_config_lacks_are_tried_with_the_values_the_code_names() -> None:
    """transformers' ``DeepseekV3Config`` holds neither ``topk_method`` nor
    ``scoring_func`` (its router is always sigmoid with a correction bias); vLLM reads both
    with a default. Lacking, they are tried: the default first, then "noaux_tc" (the
    string the code compares with) and "sigmoid" (the other scoring the routing computes).
    A config that holds them (a checkpoint's) has nothing to try."""
    import vllm.model_executor.models.deepseek_v2 as deepseek
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    from prefixlint.introspect.compare.guesses import ABSENT, absent_guesses

    config = DeepseekV3Config(num_hidden_layers=2)
    found = absent_guesses(_model_config(config), DeepseekV3ForCausalLM, [deepseek.__file__])
    assert found["topk_method"] == [ABSENT, "noaux_tc"]
    assert found["scoring_func"] == [ABSENT, "sigmoid"]
    assert "index_topk_pattern" not in found  # its elements are compared, not the list
    config.topk_method, config.scoring_func = "noaux_tc", "sigmoid"
    held = absent_guesses(_model_config(config), DeepseekV3ForCausalLM, [deepseek.__file__])
    assert "topk_method" not in held and "scoring_func" not in held


def test_a_shrunk_layer_list_only_transformers_reads_is_derived_by_its_class(tmp_path) -> None:
    import vllm.model_executor.models.glm4_moe_lite as glm
    from transformers import Glm4MoeLiteConfig, Glm4MoeLiteForCausalLM

    from prefixlint.introspect.compare.layerlists import derived

    config = Glm4MoeLiteConfig(num_hidden_layers=4)
    config.mlp_layer_types = ["dense", "sparse", "dense", "sparse"]  # the shrink's
    lists = derived(_model_config(config), Glm4MoeLiteForCausalLM, [glm.__file__])
    assert lists == {"mlp_layer_types": ["dense", "sparse", "sparse", "sparse"]}
    assert config.mlp_layer_types == ["dense", "sparse", "dense", "sparse"]  # untouched
    # a model that reads the list sees the same one as transformers: left alone
    reader = tmp_path / "reader.py"
    reader.write_text("def build(config):\n    return config.mlp_layer_types\n")
    assert derived(_model_config(config), Glm4MoeLiteForCausalLM, [str(reader)]) == {}


def test_an_mla_model_is_compared_on_vllm_s_reference_cpu_mla_backend() -> None:
    from prefixlint.introspect import vllm_api

    backend = vllm_api.reference_mla_backend(SimpleNamespace(use_mla=True))
    assert backend is not None and backend.name == "CPU_MLA"
    assert vllm_api.reference_mla_backend(SimpleNamespace(use_mla=False)) is None


@pytest.mark.slow
def test_deepseek_v3_and_glm4_moe_lite_compare_on_their_synthesised_configs(worker) -> None:
    expected = {
        "DeepseekV3ForCausalLM": ("assumed", {"topk_method": "'noaux_tc'"}),
        "Glm4MoeLiteForCausalLM": (
            "derived",
            {"mlp_layer_types": "['dense', 'sparse', 'sparse', 'sparse']"},
        ),
        "DeepseekV2ForCausalLM": ("assumed", None),  # AMX's MLA backend refused it
    }
    for arch, (field, values) in expected.items():
        report = _introspect(worker, arch)
        compared = _compared(report)
        assert compared["status"] == "equal", (arch, compared)
        assert compared["compared"] >= 30
        if values is None:
            assert field not in compared
        else:
            assert set(values.items()) <= set(compared[field].items()), compared
            [attr] = values  # and a PFX600 note says the comparison ran with it
            notes = [d for d in report.diagnostics if d.code == "PFX600" and attr in d.message]
            assert len(notes) == 1, [d.message for d in report.diagnostics]
        assert not [d for d in report.diagnostics if d.code == "PFX609"]
    notes = [d.message for d in report.diagnostics if d.code == "PFX600"]
    assert not [n for n in notes if "did not run" in n and "comparison" in n]


@pytest.mark.slow
def test_a_planted_routing_bug_of_v3_is_found_on_its_synthesised_config(worker, tmp_path):
    """No ``--config``: the guesses settle on sigmoid with the bias, and no value of them
    makes the flipped renormalisation agree."""
    old, new = "renormalize=config.norm_topk_prob,", "renormalize=not config.norm_topk_prob,"
    path, text = _copy(tmp_path, "deepseek_v2.py", _replace("DeepseekV2MoE", old, new))
    at = ("DeepseekV2MoE", "self.experts = FusedMoEFactory(")
    assert_one_pfx609_at(worker, path, text, "DeepseekV3ForCausalLM", at)


@pytest.mark.slow
def test_a_planted_bug_of_glm4_moe_lite_is_found_on_its_synthesised_config(worker, tmp_path):
    old = "hidden_states = self.mlp(hidden_states)"
    edit = _replace("Glm4MoeLiteDecoderLayer", old, "hidden_states = 2 * self.mlp(hidden_states)")
    path, text = model_copy(tmp_path, "glm4_moe_lite.py", edit)
    report = _introspect(worker, f"{path}:Glm4MoeLiteForCausalLM")
    found = [(d.code, d.location.row) for d in report.diagnostics if d.code == "PFX609"]
    assert len(found) == 1, [d.message for d in report.diagnostics]
    at = _line(text, "Glm4MoeLiteModel", "lambda prefix: Glm4MoeLiteDecoderLayer(")
    assert found[0][1] in range(at, at + 3), (found, at)


def test_a_load_that_fails_on_the_guesses_is_settled_by_their_other_values() -> None:
    """The base comparison did not run (the load refused the checkpoint's bias): the
    combinations are tried, the one that compares equal wins, and what it assumed leaves
    out the attributes it left absent. When none runs, nothing is assumed."""
    from prefixlint.introspect.compare.facts import Comparison, Reason, Status
    from prefixlint.introspect.compare.guesses import ABSENT, settle

    failed = Comparison.not_run(Reason.LOAD_FAILED, "KeyError: 'gate.e_score_correction_bias'")
    choices = {"topk_method": [ABSENT, "noaux_tc"], "scoring_func": [ABSENT, "sigmoid"]}
    right = {"topk_method": "noaux_tc", "scoring_func": "sigmoid"}

    def run(values):
        if values == right:
            return Comparison(Status.EQUAL)
        if values["topk_method"] == "noaux_tc":  # loads, routes with softmax: differs
            return Comparison(Status.DIFFERS)
        return Comparison.not_run(Reason.LOAD_FAILED)

    settled = settle(failed, choices, run)
    assert settled.status is Status.EQUAL and settled.assumed == right
    none = settle(failed, choices, lambda values: Comparison.not_run(Reason.LOAD_FAILED))
    assert none is failed and none.assumed == {}
    partly = {"topk_method": [ABSENT, "noaux_tc"], "scoring_func": [ABSENT]}
    differs = settle(failed, partly, run)  # one that runs beats one that does not
    assert differs.status is Status.DIFFERS and differs.assumed == {"topk_method": "noaux_tc"}


def test_a_flag_a_config_lacks_and_a_guessed_scoring_are_tried_both_ways() -> None:
    """MiniMax M2: vLLM reads ``getattr(config, "use_routing_bias", False)`` and passes
    ``config.scoring_func`` to its router; transformers' class declares neither (its
    router is always a sigmoid with a correction bias). The lacking flag is tried with its
    other value, the guessed scoring with the other scoring the routing computes."""
    import vllm.model_executor.models.minimax_m2 as minimax
    from transformers import MiniMaxM2Config, MiniMaxM2ForCausalLM

    from prefixlint.introspect.compare.guesses import ABSENT, absent_guesses, unread_guesses

    config = MiniMaxM2Config(num_hidden_layers=2)
    config.scoring_func = "softmax"  # synthesis's guess (configs/hints.py)
    model_config, files = _model_config(config), [minimax.__file__]
    assert absent_guesses(model_config, MiniMaxM2ForCausalLM, files)["use_routing_bias"] == [
        ABSENT,
        True,
    ]
    guessed = unread_guesses(model_config, MiniMaxM2ForCausalLM, files)
    assert guessed["scoring_func"] == ["softmax", "sigmoid"]


@pytest.mark.slow
def test_minimax_m2_compares_on_the_routing_transformers_hard_codes(worker) -> None:
    report = _introspect(worker, "MiniMaxM2ForCausalLM")
    compared = _compared(report)
    assert compared["status"] == "equal", compared
    assert compared["assumed"] == {"scoring_func": "'sigmoid'", "use_routing_bias": "True"}
    assert not [d for d in report.diagnostics if d.code == "PFX609"]
