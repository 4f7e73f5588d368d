"""The static rules' classes of the third blind plugin corpus (issue 40): each false or
contested finding and each miss as a fixture that failed before its fix. Why each
severity is what it is: docs/precision.md, "Third blind corpus"."""

from __future__ import annotations

from prefixlint.rules.pfx203_missing_embed_input_ids import MissingEmbedInputIds
from prefixlint.rules.pfx501_pp_interface_incomplete import PPInterfaceIncomplete
from prefixlint.rules.pfx503_multimodal_interface_incomplete import (
    MultiModalInterfaceIncomplete,
)
from prefixlint.static.rule import example
from prefixlint.static.testing import lint_source


def found(code: str, rule: type, wanted: str) -> list[tuple[str, str]]:
    return [(d.severity.value, d.message) for d in lint_source(code, [rule]) if d.code == wanted]


# -- a method whose body only raises NotImplementedError is a method, not a missing one ----

_RAISING_EMBED = example(
    """
class MyForCausalLM(nn.Module):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()

    def embed_input_ids(self, input_ids):
        raise NotImplementedError("no separate embedding")

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        return input_ids
"""
)


def test_embed_input_ids_that_raises_is_a_note_not_missing() -> None:
    [(severity, message)] = found(_RAISING_EMBED, MissingEmbedInputIds, "PFX203")
    assert severity == "note" and "has no" not in message
    assert "`MyForCausalLM.embed_input_ids` only raises `NotImplementedError`" in message
    # Without the method it is still the error it was.
    gone = _RAISING_EMBED.replace("def embed_input_ids", "def unrelated")
    [(severity, message)] = found(gone, MissingEmbedInputIds, "PFX203")
    assert severity == "warning" and "has no `embed_input_ids`" in message


def test_pp_buffers_that_raise_are_named_as_raising() -> None:
    code = example(
        """
class MyForCausalLM(nn.Module, SupportsPP):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()

    def make_empty_intermediate_tensors(self, batch_size, dtype, device):
        raise NotImplementedError

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        return input_ids
"""
    )
    # A true defect (pipeline stages call it at start-up): still an error, told truly.
    [(severity, message)] = found(code, PPInterfaceIncomplete, "PFX501")
    assert severity == "error" and "has no" not in message
    assert "only raises `NotImplementedError`" in message


def test_multimodal_embedding_that_raises_is_named_as_raising() -> None:
    code = example(
        """
@MULTIMODAL_REGISTRY.register_processor(P, info=I, dummy_inputs=D)
class MyForConditionalGeneration(nn.Module, SupportsMultiModal):
    def embed_multimodal(self, **kwargs):
        raise NotImplementedError()
"""
    )
    [(severity, message)] = found(code, MultiModalInterfaceIncomplete, "PFX503")
    assert severity == "error" and "implements no" not in message
    assert "`MyForConditionalGeneration.embed_multimodal` only raises" in message


# -- a collective in a model that builds no vLLM layer: no layer owns its communication ---


def test_collective_in_a_model_without_vllm_layers_is_a_note() -> None:
    from prefixlint.rules.pfx401_direct_collective import DirectCollective

    code = example(
        """
class ShardedMLP(nn.Module):
    def __init__(self, hidden: int, prefix: str = ""):
        super().__init__()
        self.hidden = hidden
        self.fc = nn.Linear(hidden, hidden)

    def forward(self, x):
        y = self.fc(x)
        if y.shape[-1] != self.hidden:  # sharded: gather the pieces
            y = tensor_model_parallel_all_gather(y)
        return y
"""
    )
    [(severity, message)] = found(code, DirectCollective, "PFX401")
    assert severity == "note" and "no vLLM layer is built in this file" in message
    # With a vLLM parallel layer in the file, the same call is the warning it was.
    with_layer = code.replace(
        "nn.Linear(hidden, hidden)", 'RowParallelLinear(hidden, hidden, prefix=f"{prefix}.fc")'
    )
    [(severity, _)] = found(with_layer, DirectCollective, "PFX401")
    assert severity == "warning"


# -- a registration outside register() that overwrites one of vLLM's own architectures ----


def test_registration_outside_register_that_overwrites_vllm_is_found() -> None:
    from prefixlint.rules.pfx504_plugin_registration import PluginRegistration

    at_import = (
        "from vllm import ModelRegistry\n\n"
        'ModelRegistry.register_model("LlamaForCausalLM", "my_pkg.model:MyLlama")\n'
    )
    [(_, message)] = found(at_import, PluginRegistration, "PFX504")
    assert "at import time" in message and "vLLM's own `LlamaForCausalLM`" in message
    entry_point = (
        "from vllm import ModelRegistry\n\n"
        "def main():\n"
        '    ModelRegistry.register_model("Qwen2ForCausalLM", "my_pkg.model:MyQwen")\n'
    )
    [(_, message)] = found(entry_point, PluginRegistration, "PFX504")
    assert "in `main()`" in message and "`Qwen2ForCausalLM`" in message
    # The plugin's own name outside register(), and a guarded overwrite: nothing.
    own = at_import.replace('"LlamaForCausalLM"', '"MyLlamaForCausalLM"')
    assert found(own, PluginRegistration, "PFX504") == []
    guarded = (
        "from vllm import ModelRegistry\n\n"
        'if "LlamaForCausalLM" not in ModelRegistry.get_supported_archs():\n'
        '    ModelRegistry.register_model("LlamaForCausalLM", "my_pkg.model:MyLlama")\n'
    )
    assert found(guarded, PluginRegistration, "PFX504") == []


# -- a leading-dot name at the root when nothing under it reads the name ------------------

_LEADING_DOT = example(
    """
class MyModel(nn.Module):
    def __init__(self, *, vllm_config, prefix: str = ""):
        super().__init__()
        self.fc = RowParallelLinear(8, 8, prefix=f"{prefix}.fc")


class MyForCausalLM(nn.Module):
    def __init__(self, *, vllm_config, prefix: str = ""):
        super().__init__()
        self.model = MyModel(vllm_config=vllm_config, prefix=f"{prefix}.model")

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        return self.model(input_ids, positions, intermediate_tensors, inputs_embeds)
"""
)


def test_leading_dot_at_the_root_is_a_note_when_nothing_below_reads_it() -> None:
    from prefixlint.rules.pfx302_prefix_attribute_mismatch import PrefixAttributeMismatch

    dots = [
        (severity, message)
        for severity, message in found(_LEADING_DOT, PrefixAttributeMismatch, "PFX302")
        if "starts with a dot" in message
    ]
    assert [s for s, _ in dots] == ["note"], dots
    assert "nothing `MyModel` builds takes a name from it" in dots[0][1]
    # A layer under it that a quantization config reaches: the error it was.
    read = _LEADING_DOT.replace("8, 8, prefix", "8, 8, quant_config=qc, prefix")
    dots = [
        s
        for s, message in found(read, PrefixAttributeMismatch, "PFX302")
        if "starts with a dot" in message
    ]
    assert dots == ["error"]


# -- a plugin written for the V0 engine: it targets another vLLM ---------------------------

_V0_PLUGIN = (
    "from torch import nn\n"
    "from vllm.attention import AttentionMetadata\n"
    "from vllm.model_executor.sampling_metadata import SamplingMetadata\n\n"
    "class MyForCausalLM(nn.Module):\n"
    '    def __init__(self, *, vllm_config, prefix: str = ""):\n'
    "        super().__init__()\n\n"
    "    def forward(self, input_ids, positions, kv_caches, attn_metadata,\n"
    "                intermediate_tensors=None, inputs_embeds=None):\n"
    "        return input_ids\n"
)


def test_v0_plugin_is_said_to_target_another_vllm() -> None:
    from prefixlint.rules.pfx201_forward_signature import ForwardSignature

    [(severity, message)] = found(_V0_PLUGIN, ForwardSignature, "PFX201")
    assert severity == "warning" and "targets another" in message
    assert "`vllm.model_executor.sampling_metadata.SamplingMetadata`" in message
    # The same forward in a file whose imports this vLLM has: today's contract applies.
    today = _V0_PLUGIN.replace(
        "from vllm.model_executor.sampling_metadata import SamplingMetadata\n", ""
    ).replace("from vllm.attention import AttentionMetadata\n", "")
    errors = [s for s, _ in found(today, ForwardSignature, "PFX201")]
    assert errors and set(errors) == {"error"}


# -- a literal cache-layer name in a model that is only ever the top-level model ----------

_TOP_LEVEL_ONLY = {
    "lit/__init__.py": (
        "def register():\n"
        "    from vllm import ModelRegistry\n"
        '    if "LitForCausalLM" not in ModelRegistry.get_supported_archs():\n'
        '        ModelRegistry.register_model("LitForCausalLM", "lit.model:LitForCausalLM")\n'
    ),
    "lit/model.py": (
        "from torch import nn\n"
        "from vllm.config import VllmConfig\n"
        "from vllm.model_executor.layers.attention import Attention\n"
        "from vllm.model_executor.models.utils import maybe_prefix\n\n"
        "class LitAttention(nn.Module):\n"
        "    def __init__(self, layer_idx: int, cache_config=None, prefix: str = ''):\n"
        "        super().__init__()\n"
        "        self.attn = Attention(4, 8, 1.0, cache_config=cache_config,\n"
        '                              prefix=f"model.layers.{layer_idx}.attn")\n\n'
        "class LitModel(nn.Module):\n"
        "    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ''):\n"
        "        super().__init__()\n"
        "        self.layers = nn.ModuleList(\n"
        '            [LitAttention(i, prefix=f"{prefix}.layers.{i}") for i in range(2)]\n'
        "        )\n\n"
        "class LitForCausalLM(nn.Module):\n"
        "    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ''):\n"
        "        super().__init__()\n"
        "        self.model = LitModel(\n"
        '            vllm_config=vllm_config, prefix=maybe_prefix(prefix, "model"))\n\n'
        "    def forward(self, input_ids, positions, intermediate_tensors=None,\n"
        "                inputs_embeds=None):\n"
        "        return self.model(input_ids)\n"
    ),
}


def _lint_package(root, files: dict[str, str], name: str) -> list[tuple[str, str]]:
    from prefixlint.rules.pfx303_prefix_not_derived import PrefixNotDerived
    from prefixlint.static.engine import Linter
    from prefixlint.static.resolve import ModuleLoader, Resolver

    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    package = root / rel.split("/")[0]
    linter = Linter([PrefixNotDerived], Resolver(ModuleLoader(roots=[package])))
    path = root / name
    return [(d.severity.value, d.message) for d in linter.lint_path(path, path.name)]


def test_literal_cache_layer_name_in_a_top_level_only_model_is_a_warning(tmp_path) -> None:
    [(severity, message)] = _lint_package(tmp_path / "a", _TOP_LEVEL_ONLY, "lit/model.py")
    assert severity == "warning" and "spells the path from `LitForCausalLM`" in message
    # A package that nests a model of its own (a stage): the literal breaks there, an error.
    nested = dict(_TOP_LEVEL_ONLY)
    nested["lit/__init__.py"] += '        ModelRegistry.register_model("LitVL", "lit.vl:LitVL")\n'
    nested["lit/vl.py"] = (
        "from torch import nn\n"
        "from vllm.config import VllmConfig\n"
        "from vllm.model_executor.models.utils import init_vllm_registered_model\n"
        "from vllm.model_executor.models.utils import maybe_prefix\n\n"
        "class LitVL(nn.Module):\n"
        "    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ''):\n"
        "        super().__init__()\n"
        "        self.language_model = init_vllm_registered_model(\n"
        "            vllm_config=vllm_config, architectures=['LitForCausalLM'],\n"
        '            prefix=maybe_prefix(prefix, "language_model"))\n\n'
        "    def forward(self, input_ids, positions, intermediate_tensors=None,\n"
        "                inputs_embeds=None):\n"
        "        return self.language_model(input_ids)\n"
    )
    [(severity, _)] = _lint_package(tmp_path / "b", nested, "lit/model.py")
    assert severity == "error"


# -- cross-attention built without quant_config/cache_config, from a removed vLLM module --

_CROSS = (
    "from torch import nn\n"
    "from vllm.attention import Attention, AttentionType\n"
    "from vllm.model_executor.layers.linear import QKVParallelLinear\n\n"
    "class MyCrossAttention(nn.Module):\n"
    '    def __init__(self, config, prefix: str = ""):\n'
    "        super().__init__()\n"
    '        self.qkv_proj = QKVParallelLinear(8, 8, 2, prefix=f"{prefix}.qkv_proj")\n'
    "        self.attn = Attention(4, 8, 1.0, attn_type=AttentionType.ENCODER_DECODER,\n"
    '                              prefix=f"{prefix}.attn")\n\n'
    "class MyDecoderLayer(nn.Module):\n"
    '    def __init__(self, config, cache_config=None, quant_config=None, prefix: str = ""):\n'
    "        super().__init__()\n"
    '        self.cross_attn = MyCrossAttention(config, prefix=f"{prefix}.cross_attn")\n'
)


def test_cross_attention_that_takes_no_configs_is_found() -> None:
    from prefixlint.rules.pfx405_quant_config_not_passed import QuantConfigNotPassed
    from prefixlint.rules.pfx406_cache_config_not_passed import CacheConfigNotPassed

    [(severity, message)] = found(_CROSS, QuantConfigNotPassed, "PFX405")
    assert severity == "error" and "`MyCrossAttention` takes no `quant_config`" in message
    assert "targets another vLLM" in message and "`vllm.attention.AttentionType`" in message
    [(severity, message)] = found(_CROSS, CacheConfigNotPassed, "PFX406")
    assert severity == "error" and "`MyCrossAttention` takes no `cache_config`" in message
    # Handed down, nothing is reported.
    passed = _CROSS.replace(
        '    def __init__(self, config, prefix: str = ""):\n',
        '    def __init__(self, config, cache_config=None, quant_config=None, prefix=""):\n',
    ).replace(
        "MyCrossAttention(config, prefix",
        "MyCrossAttention(config, cache_config, quant_config, prefix",
    )
    passed = passed.replace("2, prefix=", "2, quant_config=quant_config, prefix=").replace(
        "1.0, attn_type", "1.0, cache_config=cache_config, quant_config=quant_config, attn_type"
    )
    assert found(passed, QuantConfigNotPassed, "PFX405") == []
    assert found(passed, CacheConfigNotPassed, "PFX406") == []


def test_a_block_unquantized_on_purpose_is_a_note() -> None:
    """vLLM's Inkling MTP depth layer: it passes ``quant_config=None`` to its block and
    builds its projection without one (a bf16 draft layer)."""
    from prefixlint.rules.pfx405_quant_config_not_passed import QuantConfigNotPassed

    qkv = 'QKVParallelLinear(8, 8, 2, prefix=f"{prefix}.qkv_proj")\n'
    chosen = _CROSS.replace(
        qkv,
        'QKVParallelLinear(8, 8, 2, quant_config=None, prefix=f"{prefix}.qkv_proj")\n'
        '        self.o_proj = RowParallelLinear(8, 8, prefix=f"{prefix}.o_proj")\n',
    ).replace("import QKVParallelLinear", "import QKVParallelLinear, RowParallelLinear")
    assert chosen != _CROSS
    [(severity, message)] = found(chosen, QuantConfigNotPassed, "PFX405")
    assert severity == "note" and "unquantized on purpose" in message
    assert "give `MyCrossAttention`" not in message
