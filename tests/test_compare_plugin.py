"""The comparison with transformers for a plugin's MoE model by ``file:Class`` with its own
config: a Qwen2-MoE-style plugin (vLLM's ``qwen2_moe.py`` with every class renamed, so no
name of it is transformers') ships a ``config.json`` beside it. transformers' class comes
from the config's class (``Qwen2MoeConfig``), or the nearest base of a plugin's own config
class that transformers maps. The clean plugin compares equal; a one-token numeric bug
planted in it is PFX609 at the construction line, in the plugin's file, of the first
divergent module."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import VLLM, requires_vllm

pytestmark = requires_vllm

CLASSES = r"\bQwen2Moe(ForCausalLM|Model|DecoderLayer|Attention|MLP|SparseMoeBlock)\b"


def _plugin(folder: Path, edit=None) -> tuple[Path, str]:
    """``folder/mymoe.py`` (classes ``MyMoe*``) and its ``config.json`` beside it."""
    from transformers import Qwen2MoeConfig

    assert VLLM is not None
    text = (VLLM / "model_executor" / "models" / "qwen2_moe.py").read_text()
    text = re.sub(r"^from \.(\w+)", r"from vllm.model_executor.models.\1", text, flags=re.M)
    text = re.sub(CLASSES, lambda m: f"MyMoe{m.group(1)}", text)
    if edit is not None:
        text = edit(text)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "mymoe.py"
    path.write_text(text)
    shape = dict(hidden_size=64, intermediate_size=128, moe_intermediate_size=32)
    shape.update(shared_expert_intermediate_size=64, num_hidden_layers=2, vocab_size=384)
    shape.update(num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    shape.update(num_experts=4, num_experts_per_tok=2, architectures=["MyMoeForCausalLM"])
    Qwen2MoeConfig(**shape).save_pretrained(folder)
    return path, text


def _introspect(worker, path: Path):
    from prefixlint.introspect import introspect

    return introspect(
        f"{path}:MyMoeForCausalLM",
        tp=(1,),
        pp=(1,),
        config=str(path.parent),
        worker=worker,
        dryrun=False,
        explore_budget=0.0,
    )


def test_a_plugin_s_own_config_class_names_transformers_class() -> None:
    """A plugin's config class of its own model type, derived from transformers' one, and a
    config transformers maps directly give transformers' class; an unrelated one none."""
    from transformers import PretrainedConfig, Qwen2MoeConfig, Qwen2MoeForCausalLM

    from prefixlint.introspect import vllm_api
    from prefixlint.introspect.compare.reference import reference_class

    class MyMoeConfig(Qwen2MoeConfig):
        model_type = "my_moe"

    class MyMoeForCausalLM:  # a plugin's class: its module is not vLLM's
        pass

    assert vllm_api.causal_lm_class_of_config(MyMoeConfig()) is Qwen2MoeForCausalLM
    assert vllm_api.causal_lm_class_of_config(Qwen2MoeConfig()) is Qwen2MoeForCausalLM
    assert vllm_api.causal_lm_class_of_config(PretrainedConfig()) is None
    config = MyMoeConfig(architectures=["MyMoeForCausalLM"])
    assert reference_class(config, MyMoeForCausalLM) is Qwen2MoeForCausalLM
    # a config prefixlint synthesised (a guessed Llama shape) says nothing of the family:
    # a plugin's Qwen2 compared with Llama was a false PFX609 (test_check_introspect)
    assert reference_class(config, MyMoeForCausalLM, by_config=False) is None
    # vLLM's own class of a name transformers lacks is another model (a reward head)
    MyMoeForCausalLM.__module__ = "vllm.model_executor.models.qwen2_rm"
    assert reference_class(config, MyMoeForCausalLM) is None


@pytest.mark.slow
def test_a_clean_plugin_moe_compares_equal(worker, tmp_path) -> None:
    path, _ = _plugin(tmp_path / "clean")
    report = _introspect(worker, path)
    [result] = report.results
    assert result["compare"]["status"] == "equal", result["compare"]
    assert result["compare"]["compared"] >= 10
    assert not [d for d in report.diagnostics if d.code == "PFX609"]


@pytest.mark.slow
def test_a_planted_bug_in_a_plugin_moe_is_pfx609_at_its_line(worker, tmp_path) -> None:
    old = "out = F.sigmoid(self.expert_gate(x)[0]) * out"
    new = "out = (self.expert_gate(x)[0]) * out"  # the shared expert's gate: no sigmoid

    def edit(text: str) -> str:
        assert old in text
        return text.replace(old, new, 1)

    path, text = _plugin(tmp_path / "planted", edit)
    report = _introspect(worker, path)
    needle = "self.shared_expert = MyMoeMLP("
    line = text.count("\n", 0, text.index(needle, text.index("class MyMoeSparseMoeBlock("))) + 1
    found = [(d.code, d.filename, d.location.row) for d in report.diagnostics if d.code == "PFX609"]
    assert found == [("PFX609", str(path), line)], [d.message for d in report.diagnostics]
    assert report.results[0]["compare"]["status"] == "differs"
