"""The comparison with transformers on config variants (``compare/variants.py``) and on
guessed values transformers never reads (``compare/guesses.py``).

Fast: which variants a config class and a model file give; which guesses transformers'
class does not read; how the tried values are settled. Slow (real vLLM, one worker): a
bias flag the attention ignores and a partial rotary factor ignored give PFX609 at the
model's line on the variant that takes that path, while the config itself compares
equal; clean vLLM gives none; AFMoE's guessed router settings are no PFX609."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import VLLM, requires_vllm
from tests.test_compare import _line, _replace, model_copy

pytestmark = requires_vllm


def _model_config(config):
    return SimpleNamespace(hf_config=config, hf_text_config=config)


def _file(name: str) -> str:
    assert VLLM is not None
    return str(VLLM / "model_executor" / "models" / name)


def test_variants_are_the_declared_flags_and_fractions_the_model_reads() -> None:
    from transformers import LlamaConfig, Phi3Config, StableLmConfig

    from prefixlint.introspect.compare.variants import comparison_variants

    def labels(config, name: str) -> list[str]:
        return [v.label for v in comparison_variants(_model_config(config), [_file(name)], None)]

    llama = labels(LlamaConfig(), "llama.py")
    assert {"attention_bias=True", "mlp_bias=True", "tie_word_embeddings=True"} <= set(llama)
    # generic flags every config has change nothing the model computes
    assert not [x for x in llama if x.startswith(("use_cache", "return_dict", "output_"))]
    # Phi3 declares a partial rotary factor (1.0) in rope_parameters; llama.py passes it on
    assert "rope_parameters.partial_rotary_factor=0.5" in labels(Phi3Config(), "llama.py")
    # StableLM's is 0.25 already: its variant is the full rotary embedding
    stablelm = labels(StableLmConfig(), "stablelm.py")
    assert "rope_parameters.partial_rotary_factor=1.0" in stablelm
    assert "use_qkv_bias=True" in stablelm
    # Llama declares no partial rotary factor: transformers' Llama could not honour one
    assert not [x for x in llama if "rotary" in x]


def test_a_heterogeneous_config_gives_variants_without_a_lost_target() -> None:
    """Gemma 4's config refuses a global read of a per-layer attribute (``head_dim``) with
    its own error; reading it for the variants lost the whole target (the zoo's Gemma 4:
    built -> skipped). Such an attribute has no one value to vary: none is read."""
    from transformers import AutoConfig

    from prefixlint.introspect.compare.variants import comparison_variants

    config = AutoConfig.for_model("gemma4_text")
    with pytest.raises(Exception, match="per-layer"):
        _ = config.head_dim
    labels = [
        v.label for v in comparison_variants(_model_config(config), [_file("gemma4.py")], None)
    ]
    assert not [x for x in labels if x.startswith("head_dim")]


def test_a_flag_transformers_never_computes_with_is_no_variant() -> None:
    """transformers' DeepSeek-V2 declares ``norm_topk_prob`` but never reads it (its router
    never renormalises; the authors' code and vLLM do when it is set): a variant of it was
    a false PFX609 on clean vLLM. Cohere2-MoE's router reads it: its variant stays, as
    does the tied head every transformers class ties."""
    from transformers import Cohere2MoeConfig, DeepseekV2Config
    from transformers.models.cohere2_moe.modeling_cohere2_moe import Cohere2MoeForCausalLM
    from transformers.models.deepseek_v2.modeling_deepseek_v2 import DeepseekV2ForCausalLM

    from prefixlint.introspect.compare.variants import comparison_variants

    def labels(config, name: str, reference: type | None) -> list[str]:
        found = comparison_variants(_model_config(config), [_file(name)], None, reference)
        return [v.label for v in found]

    deepseek = DeepseekV2Config()
    assert "norm_topk_prob=True" in labels(deepseek, "deepseek_v2.py", None)
    assert "norm_topk_prob=True" not in labels(deepseek, "deepseek_v2.py", DeepseekV2ForCausalLM)
    cohere = labels(Cohere2MoeConfig(), "cohere2_moe.py", Cohere2MoeForCausalLM)
    assert "norm_topk_prob=False" in cohere


def test_a_flag_transformers_only_copies_is_no_variant() -> None:
    """transformers' Zamba2 mixer copies ``use_conv_bias`` into ``self`` and builds its
    convolution with ``bias=True`` (as Zyphra's code): the variant ``use_conv_bias=False``
    compared a reference that ignores it (a false PFX609 on clean vLLM). Mamba 2's mixer
    builds with ``bias=self.use_conv_bias``: its variant stays."""
    from transformers import Mamba2Config, Zamba2Config
    from transformers.models.mamba2.modeling_mamba2 import Mamba2ForCausalLM
    from transformers.models.zamba2.modeling_zamba2 import Zamba2ForCausalLM

    from prefixlint.introspect.compare.variants import comparison_variants

    def labels(config, name: str, reference: type | None) -> list[str]:
        found = comparison_variants(_model_config(config), [_file(name)], None, reference)
        return [v.label for v in found]

    assert "use_conv_bias=False" in labels(Zamba2Config(), "zamba2.py", None)
    assert "use_conv_bias=False" not in labels(Zamba2Config(), "zamba2.py", Zamba2ForCausalLM)
    assert "use_conv_bias=False" in labels(Mamba2Config(), "mamba2.py", Mamba2ForCausalLM)


def test_a_variant_carries_what_the_config_class_derives_from_it() -> None:
    from transformers import Qwen2Config

    from prefixlint.introspect.compare.variants import _variant

    config = Qwen2Config(num_hidden_layers=4, max_window_layers=2)
    assert set(config.layer_types) == {"full_attention"}
    variant = _variant(config, "use_sliding_window", True)
    assert variant.overrides["use_sliding_window"] is True
    assert "sliding_attention" in variant.overrides["layer_types"]  # as transformers derives


def test_guesses_transformers_never_reads_are_found_with_the_values_the_model_tells_apart():
    from transformers import AfmoeConfig, AfmoeForCausalLM

    from prefixlint.introspect.compare.guesses import unread_guesses

    config = AfmoeConfig()
    config.score_func, config.route_norm, config.n_group = "softmax", False, 1
    found = unread_guesses(_model_config(config), AfmoeForCausalLM, [_file("afmoe.py")])
    # the guess first, then what afmoe.py compares it with / the flag's other value;
    # `n_group` is a number (no finite set); `route_scale` is declared (transformers reads it)
    assert found == {"route_norm": [False, True], "score_func": ["softmax", "sigmoid"]}
    # a config class that declares the attribute: not a guess transformers ignores
    assert "route_scale" not in found


def test_settling_keeps_the_first_equal_values_else_the_furthest_agreeing_ones() -> None:
    from prefixlint.introspect.compare.facts import Boundary, Comparison, Status
    from prefixlint.introspect.compare.guesses import settle

    def differs_at(path: str) -> Comparison:
        order = ["a", "b", "c"]
        first = Boundary(path, path, 1.0, 1.0, 0.0)
        found = [Boundary(p, p, 0.0, 0.0) for p in order]
        return Comparison(Status.DIFFERS, boundaries=found, first=first)

    choices = {"flag": [False, True], "kind": ["x", "y"]}
    tried: list[dict] = []

    def run_equal_at(values: dict) -> Comparison:
        tried.append(values)
        equal = values == {"flag": True, "kind": "x"}
        return Comparison(Status.EQUAL) if equal else differs_at("a")

    result = settle(differs_at("a"), choices, run_equal_at)
    assert result.status is Status.EQUAL and result.assumed == {"flag": True, "kind": "x"}
    assert {"flag": False, "kind": "x"} not in tried  # the guess itself is not run again
    # nothing agrees: the values that agree furthest (the difference at `c`); a tie keeps
    # the guess
    later = settle(differs_at("a"), choices, lambda v: differs_at("c" if v["kind"] == "y" else "a"))
    assert later.first.path == "c" and later.assumed["kind"] == "y"
    same = settle(differs_at("b"), choices, lambda v: differs_at("b"))
    assert same.assumed == {"flag": False, "kind": "x"}
    # nothing to try: the comparison as it was, nothing assumed
    plain = differs_at("a")
    assert settle(plain, {}, run_equal_at) is plain and not plain.assumed


def test_the_unit_names_the_variant_and_reports_each_line_once() -> None:
    from prefixlint.introspect.checks.pfx609_output_mismatch import OutputMismatch
    from prefixlint.introspect.compare.facts import Boundary, Comparison, Reason, Status

    def differs(variant: str, line: int) -> Comparison:
        first = Boundary("m.qkv", "m.q+m.k+m.v", 1.0, 0.5, 0.0, ("model.py", line))
        return Comparison(Status.DIFFERS, first=first, variant=variant, reference="R")

    unit = OutputMismatch()
    base = Comparison(Status.EQUAL)
    found = unit.on_variants(
        base, [differs("attention_bias=True", 7), differs("mlp_bias=True", 7)], None
    )
    [finding] = found
    assert (finding.code, finding.line) == ("PFX609", 7)
    assert finding.variants == ["attention_bias=True", "mlp_bias=True"]
    assert "on config variant attention_bias=True" in finding.message
    # a line the config itself reports is not repeated for a variant
    assert not unit.on_variants(differs("", 7), [differs("mlp_bias=True", 7)], None)
    # a variant that could not run is listed in the JSON, not reported
    assert not unit.on_variants(base, [Comparison.not_run(Reason.FORWARD_FAILED)], None)
    # values assumed for unread guesses: a note (a gap), also when the comparison is equal
    settled = Comparison(Status.EQUAL, assumed={"score_func": "sigmoid"}, reference="R")
    [note] = unit.findings(settled, None)
    assert note.code == "PFX600" and "score_func='sigmoid'" in note.message


def _introspect(worker, target: str, budget: float = 120.0):
    from prefixlint.introspect import introspect

    return introspect(target, tp=(1,), pp=(1,), worker=worker, dryrun=False, explore_budget=budget)


def _pfx609(report) -> list[tuple[str, int, str]]:
    """(file name, line, the config variant the message names or "") of each PFX609."""

    def variant(message: str) -> str:
        on = " on config variant "
        return message.split(on, 1)[1].split(":", 1)[0].split(" (", 1)[0] if on in message else ""

    return [
        (Path(d.filename).name, d.location.row, variant(d.message))
        for d in report.diagnostics
        if d.code == "PFX609"
    ]


QKV = (
    "            bias=bias,\n            quant_config=quant_config,\n"
    '            prefix=f"{prefix}.qkv_proj",'
)


@pytest.mark.slow
def test_an_attention_bias_the_layer_ignores_differs_on_its_variant(worker, tmp_path) -> None:
    """llama.py reads ``attention_bias`` and the qkv layer is built without it: the
    synthesised config (no bias) compares equal, the variant with biases drops the
    checkpoint's biases and differs at the qkv layer's line."""
    edit = _replace("LlamaAttention", QKV, QKV.replace("bias=bias,", "bias=False,", 1))
    path, text = model_copy(tmp_path, "llama.py", edit)
    report = _introspect(worker, f"{path}:LlamaForCausalLM")
    [result] = report.results
    assert result["compare"]["status"] == "equal", result["compare"]  # the config itself
    line = _line(text, "LlamaAttention", "self.qkv_proj = QKVParallelLinear(")
    found = _pfx609(report)
    assert found == [(path.name, line, "attention_bias=True")], (found, result["compare"])
    [finding] = [d for d in report.diagnostics if d.code == "PFX609"]
    assert finding.severity == "error"
    variants = {v["variant"]: v["status"] for v in result["compare"]["variants"]}
    assert variants["attention_bias=True"] == "differs" and variants["mlp_bias=True"] == "equal"


PHI3 = """

class Phi3ForCausalLM(LlamaForCausalLM):
    packed_modules_mapping = {"qkv_proj": ["qkv_proj"], "gate_up_proj": ["gate_up_proj"]}
"""
ROPE = 'rope_parameters=getattr(config, "rope_parameters", None),'
IGNORED = 'rope_parameters={**config.rope_parameters, "rope_dim": self.head_dim},'


@pytest.mark.slow
def test_a_partial_rotary_factor_ignored_differs_on_its_variant(worker, tmp_path) -> None:
    """Phi3 (llama.py's layers) declares a partial rotary factor of 1: the rotary
    embedding built over the whole head (``rotary_dim = head_dim``) agrees there, and
    differs on the variant with a factor of 0.5, at the rotary embedding's line."""

    def edit(text: str) -> str:
        return _replace("LlamaAttention", ROPE, IGNORED)(text) + PHI3

    path, text = model_copy(tmp_path, "llama.py", edit)
    report = _introspect(worker, f"{path}:Phi3ForCausalLM")
    [result] = report.results
    assert result["compare"]["status"] == "equal", result["compare"]
    line = _line(text, "LlamaAttention", "self.rotary_emb = get_rope(")
    variant = "rope_parameters.partial_rotary_factor=0.5"
    found = [f for f in _pfx609(report) if f[2] == variant]
    assert found == [(path.name, line, variant)], (_pfx609(report), result["compare"])
    [finding] = [d for d in report.diagnostics if d.code == "PFX609"]
    sizes = re.search(
        r"rotates (\d+) dimensions of each head, transformers' rotary embedding (\d+)",
        finding.message,
    )
    assert sizes and int(sizes[1]) == 2 * int(sizes[2]), finding.message  # the whole head, half


def test_a_rotary_embedding_of_another_size_is_where_the_difference_starts() -> None:
    from prefixlint.introspect.compare.boundaries import first_divergent
    from prefixlint.introspect.compare.facts import Boundary
    from prefixlint.introspect.compare.rotary import with_sizes

    def b(path: str, rel: float, input_rel: float | None = 0.0) -> Boundary:
        return Boundary(path, path, rel, rel, input_rel, ("model.py", len(path)))

    attn = "model.layers.0.self_attn"
    found = [
        b(f"{attn}.qkv_proj", 0.0),
        b(f"{attn}.o_proj", 0.4, 0.5),
        b(attn, 0.4),
        b("model.layers.0", 0.3),
        b("logits", 0.3, None),
    ]
    sites = {f"{attn}.rotary_emb": ("model.py", 99)}
    # without it, the attention module is where the difference starts
    assert first_divergent(found, 1e-3).path == attn
    placed = with_sizes(found, {f"{attn}.rotary_emb": 16}, {8}, sites)
    first = first_divergent(placed, 1e-3)
    assert (first.path, first.site) == (f"{attn}.rotary_emb", ("model.py", 99))
    assert "rotates 16 dimensions" in first.detail
    # the same size, or no rotary module in transformers: nothing added
    assert with_sizes(found, {f"{attn}.rotary_emb": 8}, {8}, sites) == found
    assert with_sizes(found, {f"{attn}.rotary_emb": 16}, set(), sites) == found


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["LlamaForCausalLM", "Phi3ForCausalLM"])
def test_clean_vllm_compares_equal_on_its_variants(worker, arch) -> None:
    report = _introspect(worker, arch)
    [result] = report.results
    variants = result["compare"].get("variants", [])
    assert result["compare"]["status"] == "equal", result["compare"]
    assert variants and all(v["status"] == "equal" for v in variants), variants
    assert not _pfx609(report)


@pytest.mark.slow
def test_afmoe_s_guessed_router_settings_are_no_pfx609(worker) -> None:
    """The synthesised config guesses AFMoE's ``score_func`` and ``route_norm``, which
    transformers' class never reads (its router is a sigmoid with renormalised weights):
    the comparison settles on the values that agree, and a note says the rest is not
    verified. Before, a PFX609 at `model.layers.1.mlp.experts` blamed the model."""
    report = _introspect(worker, "AfmoeForCausalLM", budget=0.0)
    [result] = report.results
    assert result["compare"]["status"] == "equal", result["compare"]
    assert result["compare"]["assumed"] == {"route_norm": "True", "score_func": "'sigmoid'"}
    assert not _pfx609(report)
    notes = [d for d in report.diagnostics if d.code == "PFX600" and "score_func" in d.message]
    assert notes, [d.message for d in report.diagnostics]


def test_the_zoo_counts_the_variants_compared_and_those_that_differ() -> None:
    from prefixlint.introspect.zoo.run import Row, compared_counts, compared_line

    variants = [
        {"variant": "attention_bias=True", "status": "differs", "first": "model.layers.0"},
        {"variant": "mlp_bias=True", "status": "equal"},
        {"variant": "tie_word_embeddings=True", "status": "not run", "reason": "load_failed"},
    ]
    rows = [
        Row("A", "llama", "built", compare={"status": "equal", "variants": variants}),
        Row("B", "llama", "built", compare={"status": "equal"}),
    ]
    counts = compared_counts(rows)["all"]
    assert counts["variants"] == 2  # the one not run is not compared
    assert counts["variants_differ_at"] == ["A (attention_bias=True): model.layers.0"]
    assert "config variants: 2 compared, 1 differ" in compared_line(compared_counts(rows))


@pytest.mark.slow
def test_falcon_s_alibi_agrees_with_transformers_sdpa_path(worker, tmp_path) -> None:
    """transformers' eager Falcon attention adds ALiBi twice (in its mask and in its
    logits; its SDPA path once, as vLLM does): the comparison that differs from the eager
    reference runs again against the SDPA path, and vLLM's Falcon agrees with it. This
    was a PFX609 on clean vLLM's config variant ``alibi=True``."""
    from transformers import FalconConfig

    from prefixlint.introspect import introspect

    folder = tmp_path / "falcon"
    shape = dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, vocab_size=384)
    FalconConfig(**shape, alibi=True).save_pretrained(folder)
    report = introspect(
        "FalconForCausalLM",
        tp=(1,),
        pp=(1,),
        config=str(folder),
        worker=worker,
        dryrun=False,
        explore_budget=0.0,
    )
    [result] = report.results
    assert result["compare"]["status"] == "equal", result["compare"]
    assert result["compare"]["reference_attention"] == "sdpa"
    assert not _pfx609(report)
