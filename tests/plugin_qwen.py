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
