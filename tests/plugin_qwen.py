"""A plugin package adapted from the installed vLLM's ``qwen2.py`` (copied at test time):
classes renamed, relative imports made absolute, registered with
``ModelRegistry.register_model`` as an out-of-tree model is."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import VLLM

# Appended to the copy: registers the renamed architecture as an out-of-tree plugin does.
REGISTER = (Path(__file__).parent / "fixtures" / "plugin_register.py").read_text()


def make_plugin(root: Path, edit=None) -> Path:
    """``root/myplugin/{__init__,models}.py``; returns the models file."""
    assert VLLM is not None
    source = (VLLM / "model_executor" / "models" / "qwen2.py").read_text()
    source = re.sub(
        r"^from \.(\w+) import", r"from vllm.model_executor.models.\1 import", source, flags=re.M
    )
    source = re.sub(
        r"\bQwen2(ForCausalLM|Model|DecoderLayer|Attention|MLP)\b",
        lambda m: f"MyQwen{'2' if m.group(1) == 'ForCausalLM' else ''}{m.group(1)}",
        source,
    )
    if edit is not None:
        source = edit(source)
    package = root / "myplugin"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    models = package / "models.py"
    models.write_text(source + REGISTER)
    return models


# A Qwen2-MoE-style plugin (FusedMoE experts, a shared expert, a router, PP and LoRA, a
# guarded registration), the shape of issue 40's trial: vLLM's own qwen2_moe.py renamed.
MOE_ARCH = "MyQwenMoeForCausalLM"
MOE_CONFIG = {
    "architectures": [MOE_ARCH],
    "model_type": "qwen2_moe",
    "hidden_size": 64,
    "intermediate_size": 128,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 64,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "vocab_size": 256,
    "max_position_embeddings": 128,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "norm_topk_prob": False,
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
}


def make_moe_plugin(root: Path, edit=None) -> Path:
    """``root/myplugin/models.py`` from vLLM's ``qwen2_moe.py``, with a ``pyproject.toml``
    that gives phase 2 the config above (the renamed architecture has no config class to
    synthesise one from); returns the models file."""
    import json

    assert VLLM is not None
    source = (VLLM / "model_executor" / "models" / "qwen2_moe.py").read_text()
    source = re.sub(
        r"^from \.(\w+) import", r"from vllm.model_executor.models.\1 import", source, flags=re.M
    )
    source = re.sub(
        r"\bQwen2Moe(ForCausalLM|Model|DecoderLayer|Attention|MLP|SparseMoeBlock)\b",
        r"MyQwenMoe\1",
        source,
    )
    if edit is not None:
        edited = edit(source)
        assert edited != source, "the edit did not apply"
        source = edited
    package = root / "myplugin"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    (root / "config.json").write_text(json.dumps(MOE_CONFIG))
    (root / "pyproject.toml").write_text(
        f'[tool.prefixlint.configs]\n{MOE_ARCH} = "{root / "config.json"}"\n'
    )
    models = package / "models.py"
    models.write_text(source + REGISTER.replace("MyQwen2ForCausalLM", MOE_ARCH))
    return models
