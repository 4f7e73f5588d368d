"""What a synthesised config lacks that a checkpoint has, read from the code or message
that refused it: a guarded raise's test (``guards.py``), a validator tying a value to a
shrunk size (``rescale.py``), a local read from the config under alias names that holds
None (``demands.none_reads``), the MTP part of per-layer lists (``backend_drafts.py``).
Toy model files and hand-written messages in the shapes vLLM 0.33 and transformers 5.20
use; each mechanism with a case it must leave alone."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from prefixlint.introspect.configs.demands import none_reads
from prefixlint.introspect.configs.guards import give_guard_demands, guard_demands
from prefixlint.introspect.configs.rescale import rescale_indices, rescale_sections, rescaled
from prefixlint.introspect.drafts.mtp_layers import (
    add_mtp_layer_lists,
    complete_mtp_layers,
    mtp_layer_count,
)
from tests.conftest import model_module, requires_vllm

GUARDED = """
def verify(hf_config):
    if getattr(hf_config, "kda_allow_negative_eigenvalues", None) is not False:
        raise NotImplementedError("Toy requires kda_allow_negative_eigenvalues=false")
    if getattr(hf_config, "router_score_function", None) != "sigmoid":
        raise ValueError("Toy requires router_score_function='sigmoid'")
    if hf_config.mode not in ("a", "b"):
        raise ValueError("unsupported mode")


def block_size(hf_config):
    size = getattr(hf_config, "block_size", None)
    if isinstance(size, bool) or not isinstance(size, int):
        raise ValueError("Toy requires a positive integer block_size")
    return size


def layer(config):
    if config.sparse_config is None:
        raise NotImplementedError(
            "Toy requires a checkpoint with a sparse_config section; dense-only "
            "checkpoints are not supported."
        )


def model_bug(config):
    raise RuntimeError("the model's own failure")
"""


def _raised(fn, config) -> BaseException:
    with pytest.raises(Exception) as info:
        fn(config)
    return info.value


def test_guarded_raises_give_what_the_check_asks(tmp_path: Path) -> None:
    toy = model_module(tmp_path, GUARDED)
    config = SimpleNamespace(mode="c")
    asked = []
    for _ in range(4):
        try:
            toy.verify(config)
            break
        except Exception as e:
            asked.append(give_guard_demands(e, [config]))
    assert asked == ["kda_allow_negative_eigenvalues", "router_score_function", "mode"]
    assert config.kda_allow_negative_eigenvalues is False
    assert config.router_score_function == "sigmoid" and config.mode == "a"
    toy.verify(config)  # passes now


def test_an_integer_and_a_section_the_message_asks_for(tmp_path: Path) -> None:
    toy = model_module(tmp_path, GUARDED)
    assert guard_demands(_raised(toy.block_size, SimpleNamespace())) == {"block_size": 1}
    demands = guard_demands(_raised(toy.layer, SimpleNamespace(sparse_config=None)))
    assert demands["sparse_config"] == {}


def test_a_raise_that_asks_nothing_of_the_config_is_left_alone(tmp_path: Path) -> None:
    toy = model_module(tmp_path, GUARDED)
    error = _raised(toy.model_bug, SimpleNamespace())
    assert guard_demands(error) == {}
    assert give_guard_demands(error, [SimpleNamespace()]) is None


# transformers 5.20's validators, as they word it
MOLMO2 = (
    "Class validation error for validator 'validate_architecture':\n    ValueError: "
    "`adapter_config.vision_feature_layer` [24, 18] must index the 4 layers of `vision_config`."
)
COSMOS = (
    "Class validation error for validator 'validate_architecture':\n    ValueError: "
    "`rope_parameters.mrope_section` must contain three sections whose sum equals half of "
    "`head_dim`, got [24, 20, 20] for head_dim=16."
)


class _Default:
    def __init__(self, data: dict) -> None:
        self.data = data

    def to_dict(self) -> dict:
        return self.data


def test_layer_indices_rescaled_to_the_shrunk_tower() -> None:
    default = _Default(
        {
            "vision_config": {"num_hidden_layers": 27},
            "adapter_config": {"vision_feature_layer": [24, 18], "hidden_size": 1152},
        }
    )
    kw = {"vision_config": {"num_hidden_layers": 4}}
    fixed = rescaled(ValueError(MOLMO2), kw, default)
    assert fixed["adapter_config"] == {"vision_feature_layer": [3, 2], "hidden_size": 1152}
    assert fixed["vision_config"] == {"num_hidden_layers": 4}
    assert rescale_indices([-1, -30, 0], 27, 4) == [-1, -4, 0]


def test_sections_rescaled_to_the_shrunk_head_dim_in_a_sub_config() -> None:
    default = _Default({"text_config": {"rope_parameters": {"mrope_section": [24, 20, 20]}}})
    fixed = rescaled(ValueError(COSMOS), {"text_config": {"head_dim": 16}}, default)
    sections = fixed["text_config"]["rope_parameters"]["mrope_section"]
    assert sum(sections) == 8 and len(sections) == 3 and min(sections) >= 1
    assert fixed["text_config"]["head_dim"] == 16
    assert rescale_sections([24, 20, 20], 2) is None  # cannot hold one per section


def test_an_unrelated_validation_error_is_not_rescaled() -> None:
    error = ValueError("The hidden size (100) is not a multiple of the number of heads (16).")
    assert rescaled(error, {}, _Default({"hidden_size": 100})) is None


ALIASED = """
CONFIG_FIELD_ALIASES = {"num_experts": ("num_experts", "n_routed_experts")}


def getattr_iter(obj, names, default):
    return next((getattr(obj, n) for n in names if hasattr(obj, n)), default)


def replace(text_config):
    num_experts_names = CONFIG_FIELD_ALIASES["num_experts"]
    num_experts = getattr_iter(text_config, num_experts_names, None)
    redundant = 0
    return num_experts + redundant


def literal(text_config):
    top_k = getattr_iter(text_config, ["num_experts_per_tok", "top_k"], None)
    return top_k + 1


def model_bug(text_config):
    count = None
    return count + 1
"""


def test_none_read_under_alias_names(tmp_path: Path) -> None:
    toy = model_module(tmp_path, ALIASED)
    config = SimpleNamespace()
    assert none_reads(_raised(toy.replace, config)) == ["num_experts"]  # the table's first
    assert none_reads(_raised(toy.literal, config)) == ["num_experts_per_tok"]
    assert none_reads(_raised(toy.model_bug, config)) == []  # None not read from a config


def test_mtp_parts_of_per_layer_lists() -> None:
    config = {"layer_types": ["full_attention", "sliding_attention"], "mtp_mlp_layer_types": None}
    config["mlp_layer_types"] = ["dense", "sparse"]
    assert sorted(add_mtp_layer_lists(config, 1)) == ["mtp_layer_types", "mtp_mlp_layer_types"]
    assert config["mtp_layer_types"] == ["full_attention"]
    assert config["mtp_mlp_layer_types"] == ["dense"]
    assert add_mtp_layer_lists(config, 1) == []  # given lists are kept
    with_mtp = SimpleNamespace(num_nextn_predict_layers=2, layer_types=["full_attention"] * 4)
    without = SimpleNamespace(num_nextn_predict_layers=0, layer_types=["full_attention"] * 4)
    assert complete_mtp_layers([with_mtp, without]) == ["mtp_layer_types"]
    assert with_mtp.mtp_layer_types == ["full_attention"] * 2
    assert not hasattr(without, "mtp_layer_types")
    assert mtp_layer_count(with_mtp) == 2 and mtp_layer_count(without) == 0


# -- repairs that run these, end to end on toy model files (vLLM 0.33's shapes) ----------

REPAIRED = """
class Layer:
    def __init__(self, config, layer_idx):
        position_type = config.position_layers[layer_idx]
        match position_type:
            case "rope":
                self.rope = True
            case "nope":
                self.rope = False
            case _:
                raise ValueError(f"Unsupported position encoding type: {position_type}")
        self.window = config.window_sizes[layer_idx][0]


class Compressor:
    def __init__(self, config):
        self.head_dim = config.head_dim
        if self.head_dim == 512:
            self.block = 64
        elif self.head_dim == 128:
            self.block = 128
        else:
            raise ValueError(f"Unsupported head_dim for fused quant+cache: {self.head_dim}")


class Attention:
    def __init__(self, config):
        mla_use_nope = config.mla_use_nope
        assert mla_use_nope, "MLA is NoPE-only"
        self.size = config.hidden_size
        assert self.size, "a size is not a flag"


def build_layers(config):
    return [Layer(config, i) for i in range(config.num_hidden_layers)]
"""


@requires_vllm
def test_guessed_per_layer_values_follow_the_code(tmp_path: Path) -> None:
    """A ``match`` on a per-layer list names its kinds; a list read as pairs per layer
    becomes one."""
    from transformers import LlamaConfig

    from prefixlint.introspect.configs import repair

    toy = model_module(tmp_path, REPAIRED)
    config = LlamaConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=16)
    repaired = []
    for _ in range(6):
        try:
            layers = toy.build_layers(config)
            break
        except Exception as e:
            repaired.append(repair(e, [config], [toy.__file__]))
    else:
        raise AssertionError(f"still failing after {repaired}")
    assert config.position_layers == ["rope", "nope"]
    assert all(isinstance(w, list) and len(w) == 2 for w in config.window_sizes)
    assert {layer.rope for layer in layers} == {True, False}
    assert "position_layers" in repaired and "window_sizes" in repaired


@requires_vllm
def test_a_size_the_dispatch_does_not_take_and_a_flag_an_assert_needs(tmp_path: Path) -> None:
    from prefixlint.introspect.configs import repair

    toy = model_module(tmp_path, REPAIRED)
    shrunk = SimpleNamespace(head_dim=16)
    assert repair(_raised(toy.Compressor, shrunk), [shrunk]) == "head_dim"
    assert shrunk.head_dim == 128 and toy.Compressor(shrunk).block == 128
    flags = SimpleNamespace(mla_use_nope=False, hidden_size=128)
    assert repair(_raised(toy.Attention, flags), [flags]) == "mla_use_nope"
    assert flags.mla_use_nope is True
    toy.Attention(flags)
    # a truth test of a size is not turned into a flag
    sized = SimpleNamespace(mla_use_nope=True, hidden_size=0)
    error = _raised(toy.Attention, sized)
    repair(error, [sized])
    assert sized.hidden_size is not True


def test_a_sub_config_keeps_an_even_head_split() -> None:
    """Molmo 2's adapter splits its width evenly over its heads (vLLM's layer asserts it):
    shrunk, it still does; a sub-config that never did is left as shrunk."""
    from prefixlint.introspect.configs.shrink import _keep_head_split

    even = {"head_dim": 72, "hidden_size": 1152, "num_attention_heads": 16}
    shrunk = {"head_dim": 16, "hidden_size": 128, "num_attention_heads": 16}
    assert _keep_head_split(even, shrunk)["head_dim"] == 8
    uneven = {"head_dim": 256, "hidden_size": 1152, "num_attention_heads": 16}
    assert _keep_head_split(uneven, shrunk)["head_dim"] == 16


def test_backend_drafts_only_for_a_draft_listed_with_the_backend() -> None:
    """A Transformers-backend draft gets the backend's other classes as targets; a draft
    of the speculative table gets none, though vLLM's aggregate table lists it too."""
    from prefixlint.introspect.drafts.backend import backend_table, backend_targets

    registry = SimpleNamespace(
        _SPECULATIVE_DECODING_MODELS={"Step3p5MTP": 1},
        _TRANSFORMERS_BACKEND_MODELS={"TransformersForCausalLM": 1, "TransformersForMTP": 1},
        _VLLM_MODELS={"Step3p5MTP": 1, "TransformersForCausalLM": 1, "TransformersForMTP": 1},
    )
    assert backend_table("Step3p5MTP", registry) == {}
    assert backend_targets("Step3p5MTP", registry, lambda a, r: "MTP" in a) == []
    table = backend_table("TransformersForMTP", registry)
    assert set(table) == {"TransformersForCausalLM", "TransformersForMTP"}
    targets = backend_targets("TransformersForMTP", registry, lambda a, r: "MTP" in a)
    assert {t for t, _ in targets} <= {"TransformersForCausalLM"}
