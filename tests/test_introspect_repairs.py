"""Config synthesis and repair mechanisms for multimodal models (issue 11).

Fast tests drive each repair with a small model file written under ``models/`` (as
vLLM's model files are) that fails the way real vLLM models fail, and check that the
repaired config lets the same code run. Config classes are the installed transformers'
and vLLM's own; nothing is mocked. The slow tests build real architectures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import model_module, requires_vllm

pytestmark = requires_vllm

_module = model_module


def _llama(**kw: Any) -> Any:
    from transformers import LlamaConfig

    return LlamaConfig(num_hidden_layers=4, hidden_size=128, num_attention_heads=16, **kw)


def _repair_until_built(build: Any, configs: list[Any], attempts: int = 10) -> list[str]:
    """Run ``build(configs[0])``; repair and retry until it runs. The names repaired."""
    from prefixlint.introspect.configs import repair

    repaired: list[str] = []
    for _ in range(attempts):
        try:
            build(configs[0])
            return repaired
        except Exception as e:  # what a model raises on a synthesised config
            attr = repair(e, configs)
            assert attr is not None, f"no repair for {type(e).__name__}: {e}"
            repaired.append(attr)
    raise AssertionError(f"still failing after {repaired}")


# --- synthesis ---------------------------------------------------------------------------


def test_per_layer_config_follows_the_trimmed_layers() -> None:
    """Gemma 4 keys ``per_layer_config`` by layer index (its full-attention layers): the
    shrunk config's entries are its own layers', derived from the trimmed layer_types."""
    from prefixlint.introspect.configs import synth_config

    for arch in ("Gemma4ForConditionalGeneration", "EmbeddingGemma2Model"):
        text = synth_config(arch).text_config
        n = text.num_hidden_layers
        assert n <= 4
        full = [i for i, t in enumerate(text.layer_types) if t == "full_attention"]
        assert full, text.layer_types
        heads = {i: text.per_layer_config[i].head_dim for i in range(n)}
        assert len({heads[i] for i in full}) == 1
        assert all(heads[i] != heads[full[0]] for i in range(n) if i not in full), heads


def test_remap_keeps_entries_by_layer_kind() -> None:
    from prefixlint.introspect.configs import _layer_keyed, _remap_layer_keyed

    full = {"head_dim": 512}
    d = {"layer_types": ["s", "s", "f", "s", "s", "f"], "per_layer": {"02": full, "05": full}}
    kw = {"layer_types": ["s", "f", "s", "f"]}
    assert _layer_keyed(d["per_layer"], 6) and not _layer_keyed(d["per_layer"], 5)
    assert not _layer_keyed({"sliding": full}, 6)
    assert not _layer_keyed({0: "LABEL_0", 1: "LABEL_1"}, 6)  # id2label
    assert _remap_layer_keyed(d["per_layer"], d, kw, 4) == {1: full, 3: full}
    # no per-layer list says the kind: the indices that still exist keep theirs
    assert _remap_layer_keyed({0: {"a": 1}, 5: {"b": 2}}, {}, {}, 4) == {0: {"a": 1}}


def test_a_tower_the_default_leaves_out_is_synthesised() -> None:
    """``Gemma4Config()`` has ``vision_config=None`` (a text-only checkpoint); the model
    builds the tower from it, so synthesis gives the tower's own config class."""
    from transformers import Gemma4VisionConfig

    from prefixlint.introspect.configs import synth_config

    cfg = synth_config("Gemma4ForConditionalGeneration")
    assert isinstance(cfg.vision_config, Gemma4VisionConfig)
    assert cfg.vision_config.hidden_size == 128 and cfg.vision_config.num_hidden_layers <= 4


def test_sizes_keep_their_shape_and_validators_are_met() -> None:
    from prefixlint.introspect.configs import synth_config

    # a strict dataclass field typed list[int] (one size per modality) stays a list
    ernie = synth_config("Ernie4_5_VLMoeForConditionalGeneration")
    sizes = ernie.text_config.moe_intermediate_size
    assert isinstance(sizes, list) and all(s == 64 for s in sizes), sizes
    # "num_attention_heads (16) must be the same as num_key_value_heads (8)"; a 0
    # (NoPE) is a part switched off, not a size to shrink
    glm = synth_config("Glm5NextForConditionalGeneration").text_config
    assert glm.num_attention_heads == glm.num_key_value_heads
    assert glm.qk_rope_head_dim == 0


def test_checks_read_a_heterogeneous_config_without_raising() -> None:
    from prefixlint.introspect.checks import config_value
    from prefixlint.introspect.configs import synth_config

    text = synth_config("EmbeddingGemma2Model").text_config
    with pytest.raises(Exception, match="per-layer attribute"):
        _ = text.num_key_value_heads
    assert config_value(text, "num_key_value_heads") is None
    assert config_value(text, "num_attention_heads") == 16


# --- guesses -----------------------------------------------------------------------------


def test_guesses_by_name() -> None:
    from prefixlint.introspect.configs import guess_attribute

    cfg = _llama()
    # a layer count and an activation are not widths, though their names say "hidden"
    assert guess_attribute("num_hidden_layers", cfg) == 4
    assert guess_attribute("projector_hidden_act", cfg) == "silu"
    assert guess_attribute("rope_parameters", cfg) == {
        "rope_type": "default",
        "rope_theta": 10000.0,
    }
    assert guess_attribute("image_token_id", cfg) == 10
    assert guess_attribute("pad_token_id", cfg) == 0
    assert guess_attribute("mlp_depth", cfg) == 2


def test_guesses_from_the_models_code() -> None:
    from prefixlint.introspect.configs import _field_default_none, guess_attribute

    cfg = _llama()
    code = """
@dataclass
class AdapterConfig:
    vit_layers: tuple[int, int] = (-3, -9)
    rope_scaling_layers: tuple[int, ...] | None = None

def __init__(self, embed_dim: int = 1280,
             config=None):
    norm = RMSNorm if config.rmsnorm else LayerNorm
    start = min(config.moe_layer_start_index)
    rope = RotaryEmbedding(is_neox_style=not config.rope_interleave, base=1)
"""
    assert guess_attribute("vit_layers", cfg, [code]) == [-3, -9]
    assert guess_attribute("embed_dim", cfg, [code]) == 128  # a parameter's default: no
    assert _field_default_none("rope_scaling_layers", [code])
    assert not _field_default_none("vit_layers", [code])
    assert guess_attribute("rmsnorm", cfg, [code]) is False
    assert guess_attribute("rope_interleave", cfg, [code]) is False
    assert guess_attribute("moe_layer_start_index", cfg, [code]) == [0, 2]


# --- repairs -----------------------------------------------------------------------------


def test_stand_in_replaced_by_the_class_an_isinstance_check_names(tmp_path: Path) -> None:
    """``Unsupported vision config: SubConfig`` and ``assert isinstance(...)``."""
    from transformers import CLIPVisionConfig, PixtralVisionConfig

    from prefixlint.introspect.subconfigs import sub_config

    module = _module(
        tmp_path,
        "from transformers import CLIPVisionConfig, PixtralVisionConfig\n"
        "def tower(config):\n"
        "    vision_config = config.vision_config\n"
        "    if isinstance(vision_config, CLIPVisionConfig):\n"
        "        return vision_config.hidden_size\n"
        '    raise NotImplementedError(f"Unsupported vision config: {type(vision_config)}")\n'
        "def checked(config):\n"
        "    assert isinstance(config.vision_config, PixtralVisionConfig)\n",
    )
    cfg = _llama()
    cfg.vision_config = sub_config("vision_config", cfg)
    assert _repair_until_built(module.tower, [cfg]) == ["vision_config"]
    assert isinstance(cfg.vision_config, CLIPVisionConfig)
    assert cfg.vision_config.hidden_size == 128  # shrunk
    cfg.vision_config = sub_config("vision_config", cfg)
    assert _repair_until_built(module.checked, [cfg]) == ["vision_config"]
    assert isinstance(cfg.vision_config, PixtralVisionConfig)


def test_asserted_values_are_given(tmp_path: Path) -> None:
    module = _module(
        tmp_path,
        "class Projector:\n"
        "    def __init__(self, hidden_act):\n"
        '        assert hidden_act == "silu"\n'
        "def build(config):\n"
        '    assert config.layer_norm_type == "rms"\n'
        "    adapter_config = config.adapter_config\n"
        "    Projector(\n"
        "        hidden_act=adapter_config.hidden_act,\n"
        "    )\n"
        '    rope_parameters = getattr(config, "rope_parameters", None)\n'
        "\n"
        "    assert rope_parameters is not None\n",
    )
    from prefixlint.introspect.subconfigs import sub_config

    cfg = _llama(layer_norm_type="layer")
    cfg.adapter_config = sub_config("adapter_config", cfg)  # hidden_act "gelu"
    cfg.rope_parameters = None
    repaired = _repair_until_built(module.build, [cfg, cfg.adapter_config])
    assert repaired == ["layer_norm_type", "hidden_act", "rope_parameters"]
    assert cfg.layer_norm_type == "rms" and cfg.adapter_config.hidden_act == "silu"


def test_a_number_read_as_a_pair_or_list_becomes_one(tmp_path: Path) -> None:
    module = _module(
        tmp_path,
        "def build(config):\n"
        "    size = config.vision_config.image_size[0]\n"
        "    experts = config.moe_num_experts\n"
        "    return size, max(experts)\n",
    )
    from prefixlint.introspect.subconfigs import sub_config

    cfg = _llama(moe_num_experts=4)
    cfg.vision_config = sub_config("vision_config", cfg)
    repaired = _repair_until_built(module.build, [cfg, cfg.vision_config])
    assert repaired == ["image_size", "moe_num_experts"]
    assert cfg.vision_config.image_size == [56, 56] and cfg.moe_num_experts == [4, 4]


def test_none_used_as_a_list_or_a_number_is_filled(tmp_path: Path) -> None:
    module = _module(
        tmp_path,
        "def build(config):\n"
        "    pad = int(config.pad_token_id)\n"
        "    return [i for i in range(len(config.deepstack_layer_map))]\n",
    )
    cfg = _llama()
    cfg.pad_token_id = None
    cfg.deepstack_layer_map = None
    assert _repair_until_built(module.build, [cfg]) == ["pad_token_id", "deepstack_layer_map"]


def test_an_unpacked_stand_in_fits_the_callees_signature(tmp_path: Path) -> None:
    """``Encoder(**config.audio_encoder_conf)``: the stand-in's keys become exactly the
    encoder's parameters (its required ones guessed)."""
    module = _module(
        tmp_path,
        "class Encoder:\n"
        "    def __init__(self, idim: int, n_layers_enc: int, d_model: int, k: int = 3):\n"
        "        self.sizes = (idim, n_layers_enc, d_model, k)\n"
        "def build(config):\n"
        "    return Encoder(\n"
        "        **config.audio_encoder_conf\n"
        "    )\n",
    )
    from prefixlint.introspect.subconfigs import sub_config

    cfg = _llama()
    cfg.audio_encoder_conf = sub_config("audio_encoder_conf", cfg)
    assert _repair_until_built(module.build, [cfg]) == ["audio_encoder_conf"]
    assert module.build(cfg).sizes == (16, 2, 128, 3)  # the encoder's 2 layers


def test_a_config_the_model_unpacks_becomes_a_mapping(tmp_path: Path) -> None:
    """``Namespace(**config.vision_config)``; what the copy lacks goes on the original."""
    module = _module(
        tmp_path,
        "from argparse import Namespace\n"
        "def build(config):\n"
        "    vision_config = Namespace(**config.vision_config)\n"
        "    return vision_config.num_positions, vision_config.hidden_size\n",
    )
    from transformers import CLIPVisionConfig

    cfg = _llama()
    cfg.vision_config = CLIPVisionConfig(hidden_size=64, num_attention_heads=16)
    assert _repair_until_built(module.build, [cfg, cfg.vision_config]) == [
        "vision_config",
        "num_positions",
    ]
    assert isinstance(cfg.vision_config, CLIPVisionConfig)
    assert module.build(cfg) == (2, 64)


def test_dispatch_on_a_config_value_and_a_refused_zero(tmp_path: Path) -> None:
    """Code shared by a family dispatches on ``config.model_type`` (or another value) and
    raises for others, quoting the value it got; a 0 that a ``getattr(..., 0)``
    elsewhere gave is refused on the line that raised."""
    module = _module(
        tmp_path,
        "def layer(config):\n"
        '    if config.model_type == "qwen3_5_moe_text":\n'
        "        if 1 > config.num_experts:\n"
        '            raise ValueError(f"tp 1 is greater than experts {config.num_experts}")\n'
        '    elif config.model_type == "qwen3_5_text":\n'
        "        pass\n"
        "    else:\n"
        '        raise ValueError(f"Invalid model_type {config.model_type}")\n'
        '    if config.tile_tag == "2D":\n'
        "        return\n"
        "    tag = config.tile_tag\n"
        '    raise ValueError(f"Only 2D tile_tag is supported currently, got: {tag}")\n',
    )
    cfg = _llama(num_experts=0, tile_tag="tile_tag")
    assert _repair_until_built(module.layer, [cfg]) == ["model_type", "num_experts", "tile_tag"]
    assert (cfg.model_type, cfg.num_experts, cfg.tile_tag) == ("qwen3_5_moe_text", 4, "2D")


def test_a_sub_config_built_as_a_model_gets_its_architecture(tmp_path: Path) -> None:
    """``init_vllm_registered_model(hf_config=self.text_config)``: vLLM's registry needs
    the sub-config's ``architectures``, which checkpoints carry."""
    module = _module(
        tmp_path,
        "def init_vllm_registered_model(hf_config):\n"
        "    if not getattr(hf_config, 'architectures', None):\n"
        '        raise ValueError("No model architectures are specified")\n'
        "    return hf_config.architectures\n"
        "def build(config):\n"
        "    return init_vllm_registered_model(hf_config=config.text_config)\n",
    )
    from transformers import Qwen2Config

    cfg = _llama()
    cfg.text_config = Qwen2Config()
    assert _repair_until_built(module.build, [cfg]) == ["architectures"]
    assert module.build(cfg) == ["Qwen2ForCausalLM"]


def test_a_sub_config_saved_under_the_name_its_constructor_reads(tmp_path: Path) -> None:
    """DeepseekVLV2's config reads ``language_config`` and saves ``text_config``: the
    synthesised file reloads with the shrunk text config."""
    import json

    from prefixlint.introspect.configs import resolve_config

    source = resolve_config("DeepseekVLV2ForCausalLM")
    data = json.loads(Path(source.folder, "config.json").read_text())
    assert "language_config" in data and "text_config" not in data
    assert data["language_config"]["hidden_size"] == 128


def test_a_tokenizer_holds_the_models_special_tokens(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from prefixlint.introspect.configs import write_tokenizer

    model = tmp_path / "models" / "toy_vl.py"
    model.parent.mkdir()
    model.write_text('_IMAGE_TOKEN = "<image>"\nPAD = "<|vision_pad|>"\nX = "<not a token>"\n')
    write_tokenizer(str(tmp_path), [str(model)])
    tokenizer = AutoTokenizer.from_pretrained(str(tmp_path))
    vocab = tokenizer.get_vocab()
    assert {"<image>", "<|vision_pad|>"} <= set(vocab) and "<not a token>" not in vocab
    assert max(vocab.values()) < 512  # inside the shrunk vocabulary
    assert tokenizer.encode("<image>", add_special_tokens=False) == [vocab["<image>"]]


def test_no_moe_kernel_on_this_platform_is_an_environment_gap() -> None:
    from prefixlint.introspect.build import classify

    error = NotImplementedError("No Unquantized MoE backend supports the deployment configuration.")
    assert classify(error, [], True) == "environment"


# --- builds ------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "arch",
    [
        "Gemma4ForConditionalGeneration",  # per_layer_config, a synthesised vision tower
        "BeeForConditionalGeneration",  # the vision config class llava's isinstance names
        "FireRedASR2ForConditionalGeneration",  # an unpacked audio encoder config
        "MolmoForCausalLM",  # assert config.layer_norm_type == "rms"
        "Ernie4_5_VLMoeForConditionalGeneration",  # list-typed sizes, min()/max() of lists
        "DeepseekVLV2ForCausalLM",  # a tokenizer at construction; language_config
        "InternS2PreviewForConditionalGeneration",  # dispatch on config.model_type
    ],
)
def test_multimodal_architecture_builds(worker, arch: str) -> None:
    from prefixlint.introspect import introspect

    report = introspect(arch, tp=(1,), pp=(1,), worker=worker, explore_budget=0)
    assert report.error is None, report.error
    [result] = report.results
    assert result["status"] == "built", result["reason"]
    assert result["config_source"].startswith("synthesised"), result["config_source"]
