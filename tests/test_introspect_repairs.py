"""Config synthesis and the repairs of ``prefixlint/introspect/configs/repairs/``.

Each repair has a hand-written model file in ``tests/fixtures/models/repairs/`` (under
``models/``, where phase 2's repairs read model code) that fails the way real vLLM
models fail: the fast test runs its code on the config phase 2 synthesises for it and
checks which repairs of the table answer, in order, until the code runs; the slow test
builds its model class through the worker against the installed vLLM. Config classes
are the installed transformers' and vLLM's own; nothing is mocked. More tests drive
repairs with model files written at test time; the slow tests at the end build real
architectures."""

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
    from prefixlint.introspect.configs import layer_keyed, remap_layer_keyed

    full = {"head_dim": 512}
    d = {"layer_types": ["s", "s", "f", "s", "s", "f"], "per_layer": {"02": full, "05": full}}
    kw = {"layer_types": ["s", "f", "s", "f"]}
    assert layer_keyed(d["per_layer"], 6) and not layer_keyed(d["per_layer"], 5)
    assert not layer_keyed({"sliding": full}, 6)
    assert not layer_keyed({0: "LABEL_0", 1: "LABEL_1"}, 6)  # id2label
    assert remap_layer_keyed(d["per_layer"], d, kw, 4) == {1: full, 3: full}
    # no per-layer list says the kind: the indices that still exist keep theirs
    assert remap_layer_keyed({0: {"a": 1}, 5: {"b": 2}}, {}, {}, 4) == {0: {"a": 1}}


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
    from prefixlint.introspect.checks.base import config_value
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
    from prefixlint.introspect.configs import field_default_none, guess_attribute

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
    assert field_default_none("rope_scaling_layers", [code])
    assert not field_default_none("vit_layers", [code])
    assert guess_attribute("rmsnorm", cfg, [code]) is False
    assert guess_attribute("rope_interleave", cfg, [code]) is False
    assert guess_attribute("moe_layer_start_index", cfg, [code]) == [0, 2]


# --- one fixture per repair --------------------------------------------------------------

REPAIR_FIXTURES = Path(__file__).parent / "fixtures" / "models" / "repairs"

# Each fixture's failures, in the order its code raises them: the repair of the table
# that answers each (the first that gives something) and what it changed.
CHAINS: dict[str, list[tuple[str, str]]] = {
    "stated_value": [("stated_value", "mlp_bias"), ("stated_value", "attention_bias")],
    "missing_key": [("missing_key", "rope_parameters.factor")],
    "checked_class": [
        ("missing_sub_config", "vision_config"),
        ("checked_class", "vision_config"),
    ],
    "asserted_literal": [("asserted_literal", "hidden_act")],
    "asserted_argument": [("asserted_argument", "hidden_act")],
    "dispatched_value": [("dispatched_value", "hidden_act")],
    "zero_refused": [("missing_attribute", "num_experts"), ("zero_refused", "num_experts")],
    "sub_model_architecture": [("sub_model_architecture", "architectures")],
    "scalar_as_pair": [("missing_sub_config", "vision_config"), ("scalar_as_pair", "image_size")],
    "unpacked_stand_in": [
        ("missing_sub_config", "audio_encoder_conf"),
        ("unpacked_stand_in", "audio_encoder_conf"),
        ("missing_sub_config", "head_config"),
        ("unpacked_stand_in", "head_config"),
    ],
    "unpacked_config": [("unpacked_config", "vision_config")],
    "copied_mapping": [
        ("missing_sub_config", "vision_config"),
        ("copied_mapping", "num_positions"),
    ],
    "missing_sub_config": [("missing_sub_config", "vision_config")],
    "required_empty": [("required_empty", "yoco_layer"), ("required_empty", "moe_layers")],
    "missing_attribute": [
        ("missing_attribute", "ls_init_value"),
        ("missing_attribute", "conv_kernel_size"),
    ],
    "builds_itself": [("builds_itself", "text_config")],
    "dispatched_model_type": [
        ("missing_sub_config", "vit_config"),
        ("dispatched_model_type", "model_type"),
    ],
    "integral_sizes": [
        ("missing_attribute", "downsample_factor"),
        ("integral_sizes", "downsample_factor"),
    ],
    "mismatched_value": [("mismatched_value", "intermediate_size")],
    "none_fallback": [("none_fallback", "head_dim")],
    "sequence_as_text": [
        ("missing_attribute", "moe_layer_list"),
        ("sequence_as_text", "moe_layer_list"),
    ],
    "named_none": [("named_none", "pad_token_id")],
    "relation": [("missing_attribute", "num_kv_head"), ("relation", "num_kv_head")],
    "asserted_demand": [("asserted_demand", "hidden_act")],
    "asserted_read": [
        ("asserted_read", "num_experts_per_tok"),
        ("asserted_read", "sinkhorn_iters"),
    ],
    "asserted_flag": [
        ("asserted_flag", "attention_bias"),
        ("asserted_flag", "mlp_bias"),
        ("asserted_flag", "tie_word_embeddings"),
    ],
    "none_used": [("none_used", "layer_types")],
    "guarded_raise": [("guarded_raise", "kda_allow_negative_eigenvalues")],
    "none_read": [("none_read", "num_local_experts")],
    "empty_per_layer_spec": [("empty_per_layer_spec", "per_layer_config")],
    "short_list": [("short_list", "layer_types")],
}


def _text_config_without_architecture(config: Any) -> None:
    from transformers import Qwen2Config

    config.text_config = Qwen2Config()


# Fixtures whose failure no synthesised config reaches today: the state is made by hand,
# and there is no model class to build.
def _empty_per_layer_spec(config: Any) -> None:
    config.per_layer_config = {}  # heterogeneous with no override, as Step3p7TextConfig is


PREPARED = {
    "sub_model_architecture": _text_config_without_architecture,
    "empty_per_layer_spec": _empty_per_layer_spec,
}


def _fixture(name: str) -> Any:
    import importlib.util
    import sys

    path = REPAIR_FIXTURES / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"repair_fixture_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as phase 2 imports a model file
    spec.loader.exec_module(module)
    return module


def _model_class(module: Any) -> type | None:
    from torch import nn

    classes = [
        v
        for v in vars(module).values()
        if isinstance(v, type) and issubclass(v, nn.Module) and v.__module__ == module.__name__
    ]
    return next((c for c in classes if "For" in c.__name__), None)


def _synthesised(module: Any) -> Any:
    """The config phase 2 gives the fixture's architecture (``resolve_config``): its
    model type's, synthesised, else the Llama-shaped one of a remote-code model."""
    from prefixlint.introspect.configs import ConfigGap, llama_shaped, synth_config

    cls = _model_class(module)
    arch = cls.__name__ if cls is not None else "ToyForCausalLM"
    try:
        config = synth_config(arch, model_cls=cls)
    except ConfigGap:
        config = llama_shaped()
    config.architectures = [arch]
    return config


def _config_objects(config: Any) -> list[Any]:
    """As the build's repair loop passes them: the config, then its sub-configs."""
    out = [config]
    for value in vars(config).values():
        if hasattr(value, "to_dict") and hasattr(value, "model_type") and value not in out:
            out.append(value)
    return out


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_each_repair_answers_the_failure_its_fixture_raises(name: str) -> None:
    from prefixlint.introspect.configs.repairs import apply
    from prefixlint.introspect.configs.repairs.reading import Failure

    module = _fixture(name)
    config = _synthesised(module)
    PREPARED.get(name, lambda _: None)(config)
    answered: list[tuple[str, str]] = []
    for _ in range(len(CHAINS[name]) + 1):
        try:
            module.build(config)
            break
        except Exception as e:  # what the fixture raises on the config as it is now
            found = apply(Failure(e, _config_objects(config), [module.__file__]))
            assert found is not None, f"no repair for {type(e).__name__}: {e} after {answered}"
            answered.append((found[0].name, found[1]))
    else:
        raise AssertionError(f"still failing after {answered}")
    assert answered == CHAINS[name]


def test_every_repair_has_its_fixture_and_says_what_it_reads() -> None:
    from prefixlint.introspect.configs import REPAIRS

    names = [entry.name for entry in REPAIRS]
    assert len(names) == len(set(names))
    assert set(names) == set(CHAINS)  # one fixture per repair, named after it
    for name, chain in CHAINS.items():
        assert name in {repair for repair, _ in chain}, name
    for entry in REPAIRS:
        doc = entry.module.__doc__ or ""
        assert all(word in doc for word in ("Failure:", "Change:", "Limits:")), entry.name
        assert entry.why, entry.name


def test_a_repair_that_claims_a_failure_ends_the_search(tmp_path: Path) -> None:
    """``missing_key`` claims every KeyError: when it gives nothing, no later repair reads
    the error's words (here ``sub_model_architecture``'s, which the same words raised as
    a ValueError reach)."""
    from transformers import Qwen2Config

    from prefixlint.introspect.configs import repair

    module = _module(
        tmp_path,
        "def init_vllm_registered_model(hf_config, kind):\n"
        '    raise kind("No model architectures are specified")\n',
    )
    for kind, expected in ((KeyError, None), (ValueError, "architectures")):
        text = Qwen2Config()
        try:
            module.init_vllm_registered_model(text, kind)
        except kind as e:
            assert repair(e, [_llama()]) == expected
        assert bool(text.architectures) == (expected is not None)


def test_an_assert_on_a_flag_that_is_off_is_no_missing_read(tmp_path: Path) -> None:
    """``asserted_read`` gives a value only where the local came back None: ``assert
    use_nope`` on a False flag read from the config is about its value (the flag repair's
    turn), and a sub-config that lacks the name must not get it."""
    from prefixlint.introspect.configs.repairs import asserted_read
    from prefixlint.introspect.configs.repairs.reading import Failure
    from prefixlint.introspect.configs.subconfigs import sub_config

    module = _module(
        tmp_path,
        "def build(config):\n    use_nope = config.use_nope\n    assert use_nope, 'NoPE only'\n",
    )
    cfg = _llama(use_nope=False)
    cfg.vision_config = sub_config("vision_config", cfg)
    try:
        module.build(cfg)
    except AssertionError as e:
        assert asserted_read.repair(Failure(e, [cfg, cfg.vision_config])) is None
    assert not hasattr(cfg.vision_config, "use_nope")
    cfg.use_nope = None  # the read came back None: now it is this repair's failure
    try:
        module.build(cfg)
    except AssertionError as e:
        assert asserted_read.repair(Failure(e, [cfg, cfg.vision_config])) == "use_nope"
    assert cfg.use_nope is not None


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(CHAINS) - set(PREPARED)))
def test_each_repair_fixture_builds_through_the_worker(worker, name: str) -> None:
    from prefixlint.introspect import introspect

    path = REPAIR_FIXTURES / f"{name}.py"
    report = introspect(str(path), tp=(1,), pp=(), worker=worker, dryrun=False, explore_budget=0)
    assert report.error is None, report.error
    [result] = report.results
    assert result["status"] == "built", result["reason"]
    source = result["config_source"]
    assert source.startswith("synthesised"), source
    for _, changed in CHAINS[name]:
        assert changed in source, source


# --- repairs -----------------------------------------------------------------------------


def test_stand_in_replaced_by_the_class_an_isinstance_check_names(tmp_path: Path) -> None:
    """``Unsupported vision config: SubConfig`` and ``assert isinstance(...)``."""
    from transformers import CLIPVisionConfig, PixtralVisionConfig

    from prefixlint.introspect.configs.subconfigs import sub_config

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


SUB_MODEL = (
    "from torch import nn\n"
    "def build(config):\n"
    "    encoder = config.encoder\n"
    "    width = config.encoder.hidden_size\n"
    "    return nn.Linear(width * encoder.num_hidden_layers, config.hidden_size)\n"
)


def test_a_sub_model_config_read_under_any_name_is_synthesised(tmp_path: Path) -> None:
    """Issue 29: ``'LlamaConfig' object has no attribute 'encoder'`` where the model reads
    ``config.encoder.hidden_size``: a nested sub-config (an encoder's shrunk sizes), not a
    guessed scalar and not an unrepaired failure."""
    module = _module(tmp_path, SUB_MODEL)
    cfg = _llama()
    assert _repair_until_built(module.build, [cfg]) == ["encoder"]
    assert cfg.encoder.hidden_size == 128 and cfg.encoder.num_hidden_layers == 2
    # a scalar read is no sub-config: a method called on it, or nothing read from it
    from prefixlint.introspect.configs.subconfigs import read_as_sub_config

    assert not read_as_sub_config("encoder", ["x = config.encoder.lower()\n"])
    assert not read_as_sub_config("encoder", ["x = config.encoder\nself.encoder.layers\n"])
    assert read_as_sub_config("encoder", ["e = self.config.encoder\nn = e.num_layers\n"])


@pytest.mark.slow
def test_a_model_reading_a_sub_model_config_builds(worker, tmp_path: Path) -> None:
    """The same model built through the worker on its synthesised (Llama-shaped) config:
    built, the sub-config said in the config's source, no note."""
    from prefixlint.introspect import introspect

    model = tmp_path / "models" / "sub_model_encoder.py"
    model.parent.mkdir()
    model.write_text(
        SUB_MODEL + "\n\nclass SubModelEncoderForCausalLM(nn.Module):\n"
        "    def __init__(self, *, vllm_config, prefix: str = ''):\n"
        "        super().__init__()\n"
        "        self.part = build(vllm_config.model_config.hf_config)\n\n"
        "    def embed_input_ids(self, input_ids):\n        return input_ids\n\n"
        "    def forward(self, input_ids, positions):\n        return input_ids\n\n"
        "    def compute_logits(self, hidden_states):\n        return hidden_states\n"
    )
    # the config's repair alone: no comparison (a toy of no transformers class is its note)
    report = introspect(
        str(model), tp=(1,), pp=(), worker=worker, dryrun=False, compare=False, explore_budget=0
    )
    assert report.error is None, report.error
    [result] = report.results
    assert result["status"] == "built", result["reason"]
    assert "encoder" in result["config_source"], result["config_source"]
    assert not [d for d in report.diagnostics if d.code == "PFX600"], report.diagnostics


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
    from prefixlint.introspect.configs.subconfigs import sub_config

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
    from prefixlint.introspect.configs.subconfigs import sub_config

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
    from prefixlint.introspect.configs.subconfigs import sub_config

    cfg = _llama()
    cfg.audio_encoder_conf = sub_config("audio_encoder_conf", cfg)
    assert _repair_until_built(module.build, [cfg]) == ["audio_encoder_conf"]
    # a required int no name explains: a width every head count divides
    assert module.build(cfg).sizes == (128, 2, 128, 3)  # the encoder's 2 layers


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
    from prefixlint.introspect.builds.pipeline import classify

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
