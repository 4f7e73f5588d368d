"""Values a model's own code states it needs, read from the error it raised
(``prefixlint/introspect/configs/demands.py``), and the config-synthesis mechanisms that give a
multimodal or pooling architecture what its checkpoint would: each on a small
hand-written model file raising the real error, then (slow) on the installed vLLM's
architectures that needed it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import model_module, requires_vllm

toy = model_module


def raised(func, *args) -> BaseException:
    try:
        func(*args)
    except Exception as e:
        return e
    raise AssertionError("expected an error")


def _config(**kw):
    from transformers import LlamaConfig

    return LlamaConfig(num_hidden_layers=4, hidden_size=128, num_attention_heads=16, **kw)


def test_validator_asserts_become_demands(tmp_path: Path) -> None:
    """vLLM's ``ModelConfig`` wraps a validator's ``assert`` in pydantic's ValidationError;
    the assertion inside says the value (and the remote-code class name) it needs."""
    from pydantic.dataclasses import dataclass

    from prefixlint.introspect.configs.demands import (
        CLASS_NAME,
        apply_demands,
        assertion_demands,
        validation_cause,
    )

    module = toy(
        tmp_path,
        "def verify(config):\n"
        '    assert config.__class__.__name__ == "NewConfig"\n'
        "def verify_values(config):\n"
        '    assert config.hidden_act == "gelu" and not config.interleaved\n'
        "def verify_choice(config):\n"
        '    assert config.activation_function in ["swiglu", "gelu"]\n'
        "def verify_other(config):\n"
        "    assert config.hidden_size > 4096\n"
        "def gate(config):\n"
        '    kind = getattr(config, "output_gate_type", "silu")\n'
        '    assert kind in ["silu", "sigmoid"], f"unsupported {kind=}"\n',
    )
    cfg = _config()

    @dataclass
    class Holder:
        x: int = 0

        def __post_init__(self) -> None:
            module.verify(cfg)

    wrapped = raised(Holder)
    assert type(wrapped).__name__ == "ValidationError"
    cause = validation_cause(wrapped)
    assert isinstance(cause, AssertionError)
    assert assertion_demands(cause) == {CLASS_NAME: "NewConfig"}
    apply_demands(cfg, {CLASS_NAME: "NewConfig"})
    assert type(cfg).__name__ == "NewConfig" and cfg.hidden_size == 128
    module.verify(cfg)  # passes now, and the config is still a LlamaConfig
    from transformers import LlamaConfig

    assert isinstance(cfg, LlamaConfig)
    values = assertion_demands(raised(module.verify_values, cfg))
    assert values == {"hidden_act": "gelu", "interleaved": False}
    cfg.activation_function = "silu"
    assert assertion_demands(raised(module.verify_choice, cfg)) == {"activation_function": "swiglu"}
    # an inequality names no value: nothing is made up
    assert assertion_demands(raised(module.verify_other, cfg)) == {}
    # a local read from the config stands for the attribute
    cfg.output_gate_type = None
    assert assertion_demands(raised(module.gate, cfg)) == {"output_gate_type": "silu"}
    from prefixlint.introspect.configs import repair

    assert repair(raised(module.gate, cfg), [cfg]) == "output_gate_type"
    module.gate(cfg)


def test_choice_and_asserted_reads_name_a_missing_field(tmp_path: Path) -> None:
    from prefixlint.introspect.configs.demands import asserted_reads, choice_demands

    module = toy(
        tmp_path,
        "def verify(config):\n"
        '    pooling = getattr(config, "pooling", None)\n'
        "    if pooling is None:\n"
        "        raise ValueError(\n"
        "            \"requires a 'pooling' field in its HF config (one of 'avg', 'cls')\"\n"
        "        )\n"
        "def verify_contract(config):\n"
        '    if getattr(config, "contract", None) is None:\n'
        "        raise ValueError(\"must declare contract as 'causal' or 'bidirectional'\")\n"
        "def unrelated(config):\n"
        "    raise ValueError(\"pooling must be one of 'avg', 'cls'\")\n"
        "def verify_type(config):\n"
        '    pooling = getattr(config, "pooling", None)\n'
        "    assert isinstance(pooling, str)\n"
        "def getattr_iter(obj, names, default):\n"
        "    return next((getattr(obj, n) for n in names if hasattr(obj, n)), default)\n"
        "def moe(config):\n"
        '    top_k = getattr_iter(config, ["num_experts_per_tok", "top_k"], None)\n'
        "    assert top_k is not None\n",
    )
    cfg = _config()
    assert choice_demands(raised(module.verify, cfg)) == {"pooling": "avg"}
    assert choice_demands(raised(module.verify_contract, cfg)) == {"contract": "causal"}
    # the message names values, but the code reads no such attribute: no demand
    assert choice_demands(raised(module.unrelated, cfg)) == {}
    assert asserted_reads(raised(module.verify_type, cfg)) == ["pooling"]
    assert asserted_reads(raised(module.moe, cfg)) == ["num_experts_per_tok"]
    from prefixlint.introspect.configs import repair

    assert repair(raised(module.moe, cfg), [cfg]) == "num_experts_per_tok"
    module.moe(cfg)


def test_alias_and_validator_function_source(tmp_path: Path) -> None:
    """``config.intermediate_size = config.n_inner``: a checkpoint's own name for a size
    the synthesised config has under another; only the raising function is read."""
    from prefixlint.introspect.configs import guess_attribute
    from prefixlint.introspect.configs.demands import alias_value, raising_function_source

    module = toy(
        tmp_path,
        "def other(config):\n"
        '    return getattr(config, "position_embedding_type", "rope")\n'
        "def verify(config):\n"
        "    config.intermediate_size = config.n_inner\n"
        "def verify_rotary(config):\n"
        '    if config.position_embedding_type == "rotary":\n'
        "        pass\n",
    )
    cfg = _config(intermediate_size=256)
    assert alias_value(raised(module.verify, cfg), "n_inner", cfg) == 256
    assert alias_value(raised(module.verify_rotary, cfg), "position_embedding_type", cfg) is None
    texts = raising_function_source(raised(module.verify_rotary, cfg))
    # the other function's getattr default is not this validator's word
    assert guess_attribute("position_embedding_type", cfg, texts) == "rotary"


def test_repair_takes_defaults_the_code_declares(tmp_path: Path) -> None:
    """A stand-in sub-config read by code that annotates its config class, or that
    passes the attribute straight to a parameter with a default, or whose config type
    vLLM registers another class for: the declared default."""
    from transformers import PretrainedConfig

    from prefixlint.introspect.configs import repair

    module = toy(
        tmp_path,
        "from transformers import PretrainedConfig\n"
        "class ToyEncoderConfig(PretrainedConfig):\n"
        "    def __init__(self, n_window_infer=800, **kw):\n"
        "        self.n_window_infer = n_window_infer\n"
        "        super().__init__(**kw)\n"
        "class Encoder:\n"
        "    def __init__(self, config: ToyEncoderConfig, prefix: str = ''):\n"
        "        self.n_window_infer = config.n_window_infer\n"
        "def scale(d_model, ls_init_value: float | None = None, eps=1e-6):\n"
        "    return ls_init_value\n"
        "def embed(config):\n"
        '    layer = config.img_processor.get("layer_idx", -2)\n'
        '    return layer, config.img_processor["image_dim_out"]\n'
        "def build(config):\n"
        "    return scale(\n"
        "        config.hidden_size,\n"
        "        ls_init_value=config.ls_init_value,\n"
        "    )\n",
    )
    vision, audio = PretrainedConfig(), PretrainedConfig()
    parent = _config()
    parent.vision_config, parent.audio_config = vision, audio
    error = raised(module.Encoder, audio)
    # both stand-ins share a class name: the one that lacked it gets it
    assert repair(error, [parent, vision, audio]) == "n_window_infer"
    assert audio.n_window_infer == 800 and not hasattr(vision, "n_window_infer")
    module.Encoder(audio)
    cfg = _config()
    assert repair(raised(module.embed, cfg), [cfg], [str(module.__file__)]) == "img_processor"
    assert cfg.img_processor == {"layer_idx": -2, "image_dim_out": 16}
    module.embed(cfg)
    assert repair(raised(module.build, cfg), [cfg]) == "ls_init_value"
    assert cfg.ls_init_value is None
    module.build(cfg)


def test_repair_fits_an_unpacked_sub_config_to_the_callee(tmp_path: Path) -> None:
    from prefixlint.introspect.configs import repair
    from prefixlint.introspect.configs.subconfigs import sub_config

    module = toy(
        tmp_path,
        "class Head:\n"
        "    def __init__(self, hidden_size: int, width: int, routing_layers: int,\n"
        "                 heads: int, dropout: float = 0.1):\n"
        "        self.args = (hidden_size, width, routing_layers, heads)\n"
        "def build(config):\n"
        "    head_config = config.head_config\n"
        "    return Head(**head_config)\n",
    )
    cfg = _config()
    cfg.head_config = sub_config("head_config", cfg)
    error = raised(module.build, cfg)
    assert "unexpected keyword" in str(error)
    # two mechanisms fit it (the sub-config named on the line; the mapping a local holds)
    assert repair(error, [cfg]) is not None
    head = module.build(cfg)
    assert all(isinstance(a, int) and a > 0 for a in head.args)  # the required values given
    assert set(cfg.head_config.keys()) <= {"hidden_size", "width", "routing_layers", "heads"}


def test_repair_reads_stated_values(tmp_path: Path) -> None:
    from prefixlint.introspect.configs import repair

    module = toy(
        tmp_path,
        "def rope(config):\n"
        "    if not config.use_rope2d:\n"
        '        raise ValueError("use_rope2d must be True")\n'
        "def shuffle(config):\n"
        "    expected = config.hidden_size * 4\n"
        "    if config.output_dim != expected:\n"
        "        raise ValueError(\n"
        '            f"vision output_dim={config.output_dim} does not match "\n'
        '            f"pixel-shuffle output {expected}"\n'
        "        )\n"
        "def sizes(config):\n"
        "    return list(range(\n"
        "        config.d_model * config.downsample_factor,\n"
        "    ))\n"
        "def make(width, n):\n"
        "    return [0] * width * n\n"
        "class Head:\n"
        "    def __init__(self, config):\n"
        "        self.classify_num = config.classify_num\n"
        "        self.out = make(4, self.classify_num)\n"
        "def scaled(config):\n"
        '    head_dim = getattr(config, "head_dim", config.hidden_size // '
        "config.num_attention_heads)\n"
        "    return head_dim ** -0.5\n",
    )
    cfg = _config(use_rope2d=False, output_dim=6144, d_model=128, downsample_factor=4.0)
    assert repair(raised(module.rope, cfg), [cfg]) == "use_rope2d"
    assert cfg.use_rope2d is True
    assert repair(raised(module.shuffle, cfg), [cfg]) == "output_dim"
    assert cfg.output_dim == 512
    module.shuffle(cfg)
    assert repair(raised(module.sizes, cfg), [cfg]) == "downsample_factor"
    assert cfg.downsample_factor == 4 and isinstance(cfg.downsample_factor, int)
    cfg.head_dim = None
    assert repair(raised(module.scaled, cfg), [cfg]) == "head_dim"
    assert cfg.head_dim == 8  # the code's own fallback: hidden_size // heads
    # the callee raises; the caller's frame read the None value into ``self``
    cfg.classify_num = None
    assert repair(raised(module.Head, cfg), [cfg]) == "classify_num"
    assert cfg.classify_num == 16  # used as a size
    module.Head(cfg)


def test_repair_gives_a_stand_in_the_model_type_the_code_dispatches_on(tmp_path: Path) -> None:
    from prefixlint.introspect.configs import repair
    from prefixlint.introspect.configs.subconfigs import sub_config

    module = toy(
        tmp_path,
        "def backbone(config):\n"
        "    model_type = config.model_type\n"
        '    if model_type == "siglip_vision_model":\n'
        "        return config.layer_norm_eps\n"
        '    raise ValueError(f"Unsupported visual tokenizer model_type: {model_type}")\n'
        "def tower(parent):\n"
        "    return backbone(parent.vit_config)\n",
    )
    cfg = _config()
    cfg.vit_config = sub_config("vit_config", cfg)
    cfg.vit_config.hidden_size = 64  # what the stand-in has already is kept
    del cfg.vit_config.layer_norm_eps
    assert repair(raised(module.tower, cfg), [cfg, cfg.vit_config]) == "model_type"
    assert cfg.vit_config.model_type == "siglip_vision_model"
    assert cfg.vit_config.hidden_size == 64
    assert module.tower(cfg) == 1e-6  # SiglipVisionConfig's own default filled in


def test_guesses_by_name_and_shape() -> None:
    from prefixlint.introspect.configs import guess_attribute
    from prefixlint.introspect.configs.subconfigs import sub_config

    cfg = _config()
    # "deepstack" holds "eps": an index list iterated by len() is no epsilon
    assert guess_attribute("eps", cfg) == 1e-6
    assert guess_attribute("layer_norm_epsilon", cfg) == 1e-6
    code = ["n = len(self.deepstack_visual_indexes)\nx = config.deepstack_visual_indexes\n"]
    assert guess_attribute("deepstack_visual_indexes", cfg, code) == [0, 2]
    assert guess_attribute("layers", cfg) == 4
    rope = guess_attribute("rope_parameters", cfg)
    assert rope == {"rope_type": "default", "rope_theta": 10000.0}
    assert rope is not guess_attribute("rope_parameters", cfg)  # a fresh dict each time
    # an audio encoder's window is an STFT window: 25 ms and 10 ms at its rate
    audio = _config(num_mel_bins=128, sampling_rate=16000)
    assert guess_attribute("window_size", audio) == 400
    assert guess_attribute("hop_length", audio) == 160
    assert guess_attribute("window_size", cfg) == 64  # elsewhere a token window
    assert sub_config("audio_config", cfg).window_size == 400
    assert sub_config("vision_config", cfg).window_size == 56


@requires_vllm
def test_synthesis_follows_the_model_class_and_names_the_language_model() -> None:
    from prefixlint.introspect.builds.pipeline import load_class, vllm_registry
    from prefixlint.introspect.configs import arch_to_model_types, synth_config
    from prefixlint.introspect.configs.subconfigs import sub_config

    registry = vllm_registry()
    # (a head subclassing another architecture's class: ColQwen3_5 in the slow builds;
    # its module needs torchvision, which only the phase-2 worker puts on the path)
    # a ColBERT head building an LFM2 backbone with its own vllm_config reads LFM2's
    lfm2 = load_class(registry, "ColBERTLfm2Model")
    assert arch_to_model_types("ColBERTLfm2Model", lfm2) == ["lfm2"]
    # the text sub-config names the language model vLLM builds from it
    step = synth_config("Step3VLForConditionalGeneration")
    assert step.text_config.architectures == ["Step3TextForCausalLM"]
    # MoE layer indices all beyond the shrunk depth: the last layer stays MoE
    assert list(step.text_config.moe_layers_enum) == [3]
    assert sub_config("text_config", _config()).architectures == ["LlamaForCausalLM"]
    # multi-query attention keeps its single KV head (12 query heads under another name)
    bigcode = synth_config("GPTBigCodeForCausalLM")
    assert bigcode.num_key_value_heads == 1
    assert synth_config("LlamaForCausalLM").num_key_value_heads == 8


# Architectures the mechanisms above made buildable, one per kind of gap.
BUILDS = [
    "GteNewModel",  # validator asserts: class name, hidden_act
    "NomicBertModel",  # a GPT-2-named checkpoint read through aliases
    "LlamaBidirectionalModel",  # a 'pooling' field the validator lists the values of
    "LlamaNemotronVLModel",  # an asserted read, a flat config building itself
    "XLMRobertaModel",  # the validator's comparison, the rope dict
    "ColQwen3_5",  # the base class's config, a declared contract
    "ColBERTLfm2Model",  # the backbone's config
    "ClefOmniForJointSchema",  # annotated defaults, an unpacked head config
    "VoxtralForConditionalGeneration",  # STFT sizes, an integral factor
    "HunYuanDenseV1ForCausalLM",  # the code's fallback for a None head_dim
    "StepVLForConditionalGeneration",  # must-be values, callee defaults, text arch
    "GPTBigCodeForCausalLM",  # multi-query: one KV head
    "Qwen3ASRForcedAlignerForTokenClassification",  # a None size read in the caller
    "TransformersMoEForCausalLM",  # an asserted getattr_iter read
    "Ovis2_5",  # a stand-in vision config dispatched on by model type
    "Qwen4ExpForConditionalGeneration",  # an asserted local read from the config
]


@requires_vllm
@pytest.mark.slow
@pytest.mark.parametrize("arch", BUILDS)
def test_architecture_builds_from_a_synthesised_config(worker, arch: str) -> None:
    from prefixlint.introspect import introspect

    report = introspect(arch, tp=(1,), pp=(), worker=worker, dryrun=False, explore_budget=0)
    assert report.error is None
    [result] = report.results
    assert result["status"] == "built", result["reason"]
    assert result["config_source"].startswith("synthesised")
