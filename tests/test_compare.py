"""The comparison with transformers (``prefixlint/introspect/compare/``, PFX609): where a
divergence starts (fast, on facts), the unit's findings from facts (fast), and on the real
vLLM: clean architectures of several families compare equal, a one-token numeric bug
planted in a copy of each family's file gives PFX609 at the line that built the first
divergent module, and a refactor that keeps the arithmetic gives nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import VLLM, requires_vllm

pytestmark = requires_vllm

TOL = 1e-3


def _b(path: str, rel: float, input_rel: float | None = 0.0):
    from prefixlint.introspect.compare.facts import Boundary

    return Boundary(path, path, rel, rel, input_rel, ("model.py", len(path)))


def test_first_divergent_is_where_a_difference_starts_and_persists() -> None:
    from prefixlint.introspect.compare.boundaries import first_divergent

    # a wrong attention scale: o_proj's input already differs, the attention module's agrees
    found = [
        _b("model.embed_tokens", 0.0, None),
        _b("model.layers.0.input_layernorm", 0.0),
        _b("model.layers.0.self_attn.o_proj", 0.2, 0.3),
        _b("model.layers.0.self_attn", 0.2, 0.0),
        _b("model.layers.0.post_attention_layernorm", 0.1, 0.1),
        _b("model.layers.0", 0.1, 0.0),
        _b("logits", 0.3, None),
    ]
    assert first_divergent(found, TOL).path == "model.layers.0.self_attn"
    # nothing differs: nothing starts
    assert first_divergent([_b("model.layers.0", 1e-6), _b("logits", 1e-6)], TOL) is None
    # only the logits differ: the head
    assert first_divergent([_b("model.norm", 1e-6), _b("logits", 0.5, None)], TOL).path == "logits"


def test_a_difference_the_next_boundary_no_longer_sees_is_no_divergence() -> None:
    """Gemma scales its embedding in the model (vLLM) or in the embedding module
    (transformers); Qwen2-MoE's shared expert gates inside or outside: the boundary after,
    or the block around, agrees."""
    from prefixlint.introspect.compare.boundaries import first_divergent

    gemma = [
        _b("model.embed_tokens", 0.9, None),
        _b("model.layers.0.input_layernorm", 0.0, 0.0),
        _b("logits", 1e-6, None),
    ]
    assert first_divergent(gemma, TOL) is None
    moe = [
        _b("model.layers.0.mlp.shared_expert", 0.3),
        _b("model.layers.0.mlp.experts", 1.5),
        _b("model.layers.0.mlp", 1e-6),
        _b("logits", 1e-6, None),
    ]
    assert first_divergent(moe, TOL) is None
    # the same embedding difference, carried on by the layers, is one
    carried = [gemma[0], _b("model.layers.0.input_layernorm", 0.0, 0.5), _b("logits", 0.2)]
    assert first_divergent(carried, TOL).path == "model.embed_tokens"


def test_the_unit_reports_facts_at_their_line_and_gaps_as_notes() -> None:
    from prefixlint.introspect.checks.pfx609_output_mismatch import OutputMismatch
    from prefixlint.introspect.compare.facts import Comparison, Reason, Status

    first = _b("model.layers.1.self_attn", 0.25)
    differs = Comparison(Status.DIFFERS, reference="LlamaForCausalLM", input_ids=(3, 1, 4))
    differs.boundaries, differs.first = [first], first
    [finding] = OutputMismatch().findings(differs, None)
    assert (finding.code, finding.severity, finding.file) == ("PFX609", "error", "model.py")
    assert finding.line == len("model.layers.1.self_attn")
    assert "`model.layers.1.self_attn`" in finding.message and "[3, 1, 4]" in finding.message
    assert not OutputMismatch().findings(Comparison(Status.EQUAL), None)
    [note] = OutputMismatch().findings(Comparison.not_run(Reason.NO_REFERENCE), None)
    assert (note.code, note.severity) == ("PFX600", "note")
    assert note.facts == {"not_verified": False}  # nothing to compare with: not a gap
    assert not OutputMismatch().findings(Comparison.not_run(Reason.DISABLED), None)


def test_a_difference_only_a_latent_variant_shows_is_a_warning() -> None:
    """A variant of values moved off the constants a model could write differs only for
    configs that set them so: a warning, saying so; a variant of a value the model reads
    that differs at the same line makes it an error."""
    from prefixlint.introspect.checks.pfx609_output_mismatch import OutputMismatch
    from prefixlint.introspect.compare.facts import Comparison, Status

    def differing(variant: str, latent: bool) -> Comparison:
        first = _b("model.layers.0.mlp.experts", 0.3)
        out = Comparison(Status.DIFFERS, reference="OlmoeForCausalLM", input_ids=(3, 1))
        out.boundaries, out.first = [first], first
        out.variant, out.latent = variant, latent
        return out

    unit, base = OutputMismatch(), Comparison(Status.EQUAL)
    moved = "rms_norm_eps=0.01"
    [latent] = unit.on_variants(base, [differing(moved, True)], None)
    assert (latent.code, latent.severity) == ("PFX609", "warning")
    assert "moved off the constants" in latent.message
    assert differing(moved, True).to_json()["latent"] is True
    both = [differing(moved, True), differing("attention_bias=True", False)]
    [merged] = unit.on_variants(base, both, None)
    assert merged.severity == "error"
    assert merged.variants == [moved, "attention_bias=True"]


def model_copy(folder: Path, name: str, edit) -> tuple[Path, str]:
    """vLLM's ``name`` as an out-of-tree plugin file (relative imports made absolute),
    edited."""
    assert VLLM is not None
    text = (VLLM / "model_executor" / "models" / name).read_text()
    text = re.sub(r"^from \.(\w+)", r"from vllm.model_executor.models.\1", text, flags=re.M)
    text = edit(text)
    path = folder / f"{name.removesuffix('.py')}_{abs(hash(text)) % 10**8}.py"
    path.write_text(text)
    return path, text


def _replace(cls: str, old: str, new: str):
    def edit(text: str) -> str:
        start = text.index(f"class {cls}(")
        at = text.index(old, start)
        return text[:at] + new + text[at + len(old) :]

    return edit


def _line(text: str, cls: str, needle: str) -> int:
    return text.count("\n", 0, text.index(needle, text.index(f"class {cls}("))) + 1


def _introspect(worker, target: str):
    from prefixlint.introspect import introspect

    return introspect(target, tp=(1,), pp=(1,), worker=worker, dryrun=False, explore_budget=0.0)


# (file, class, where the bug is, old, new, where the finding must be: class, needle)
PLANTED = [
    (
        "qwen2.py",
        "Qwen2ForCausalLM",
        "Qwen2Attention",
        "self.scaling = self.head_dim**-0.5",
        "self.scaling = self.head_dim**-0.4",
        ("Qwen2DecoderLayer", "self.self_attn = Qwen2Attention("),
    ),
    (
        "gemma.py",
        "GemmaForCausalLM",
        "GemmaModel",
        "return self.embed_tokens(input_ids) * self.normalizer",
        "return self.embed_tokens(input_ids) / self.normalizer",
        ("GemmaModel", "self.embed_tokens = VocabParallelEmbedding("),
    ),
    (
        "gemma2.py",
        "Gemma2ForCausalLM",
        "Gemma2Attention",
        "self.scaling = config.query_pre_attn_scalar**-0.5",
        "self.scaling = config.query_pre_attn_scalar**-0.4",
        ("Gemma2DecoderLayer", "self.self_attn = Gemma2Attention("),
    ),
    (
        "mixtral.py",
        "MixtralForCausalLM",
        "MixtralMoE",
        "renormalize=True",
        "renormalize=False",
        # transformers 5 names the block `mlp`, the checkpoint `block_sparse_moe`: the
        # block is matched by the name its renamed gate is saved under (the decoder
        # layer was the first before: bench/history_bugs.py)
        ("MixtralDecoderLayer", "self.block_sparse_moe = MixtralMoE("),
    ),
    (
        "qwen2_moe.py",
        "Qwen2MoeForCausalLM",
        "Qwen2MoeMLP",
        "out = F.sigmoid(self.expert_gate(x)[0]) * out",
        "out = (self.expert_gate(x)[0]) * out",
        ("Qwen2MoeSparseMoeBlock", "self.shared_expert = Qwen2MoeMLP("),
    ),
    (
        "olmoe.py",
        "OlmoeForCausalLM",
        "OlmoeMoE",
        "renormalize=False",
        "renormalize=True",
        ("OlmoeMoE", "self.experts = FusedMoEFactory("),
    ),
    (
        "opt.py",
        "OPTForCausalLM",
        "OPTDecoderLayer",
        "hidden_states = residual + hidden_states",
        "hidden_states = residual - hidden_states",
        ("OPTDecoder", "lambda prefix: OPTDecoderLayer("),
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize("case", PLANTED, ids=[c[1] for c in PLANTED])
def test_a_planted_numeric_bug_gives_pfx609_at_the_divergent_module(worker, tmp_path, case):
    name, arch, cls, old, new, at = case
    path, text = model_copy(tmp_path, name, _replace(cls, old, new))
    assert_one_pfx609_at(worker, path, text, arch, at)


def assert_one_pfx609_at(worker, path: Path, text: str, arch: str, at: tuple[str, str]) -> None:
    """The planted copy ``path`` (its ``text``) of ``arch`` gives one PFX609, at the line
    ``at`` names (a class, then the text of the line inside it)."""
    report = _introspect(worker, f"{path}:{arch}")
    found = [(d.code, Path(d.filename).name, d.location.row) for d in report.diagnostics]
    expected = ("PFX609", path.name, _line(text, *at))
    assert expected in found, (expected, found, [d.message for d in report.diagnostics])
    assert [d.code for d in report.diagnostics].count("PFX609") == 1


CLEAN = ["LlamaForCausalLM", "Qwen2ForCausalLM", "GemmaForCausalLM", "Gemma2ForCausalLM"]
CLEAN += ["Phi3ForCausalLM", "MixtralForCausalLM", "Qwen2MoeForCausalLM", "OlmoeForCausalLM"]
CLEAN += ["OPTForCausalLM", "MistralForCausalLM"]


@pytest.mark.slow
@pytest.mark.parametrize("arch", CLEAN)
def test_clean_vllm_compares_equal(worker, arch) -> None:
    report = _introspect(worker, arch)
    [result] = report.results
    assert result["compare"]["status"] == "equal", result["compare"]
    assert result["compare"]["compared"] >= 10
    assert not [d for d in report.diagnostics if d.code == "PFX609"]


# the same arithmetic, spelt another way, with renamed locals
REFACTOR = (
    (
        "        attn_output = self.attn(q, k, v)\n        output, _ = self.o_proj(attn_output)",
        "        mixed = self.attn(q, k, v)\n        output, _ = self.o_proj(mixed * 1.0)",
    ),
    ("self.scaling = self.head_dim**-0.5", "self.scaling = 1.0 / (self.head_dim**0.5)"),
    (
        "        x, _ = self.down_proj(x)\n        return x",
        "        down, _ = self.down_proj(x)\n        return down",
    ),
)


@pytest.mark.slow
def test_a_refactor_that_keeps_the_arithmetic_gives_nothing(worker, tmp_path) -> None:
    def edit(text: str) -> str:
        for old, new in REFACTOR:
            assert old in text, old
            text = text.replace(old, new, 1)
        return text

    path, _ = model_copy(tmp_path, "llama.py", edit)
    report = _introspect(worker, f"{path}:LlamaForCausalLM")
    [result] = report.results
    assert result["compare"]["status"] == "equal", result["compare"]
    assert not [d for d in report.diagnostics if d.code == "PFX609"]


def _llama_config(folder: Path, **values) -> str:
    from transformers import LlamaConfig

    base = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, vocab_size=384)
    base.update(num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    folder.mkdir(exist_ok=True)
    LlamaConfig(**{**base, **values}).save_pretrained(folder)
    return str(folder)


# config variants: (config values, the planted bug's class, old, new, finding's class, needle)
VARIANTS = [
    (
        {"attention_bias": True},  # the flag read, then the biases dropped by the layer
        "LlamaAttention",
        "            bias=bias,\n            quant_config=quant_config,\n"
        '            prefix=f"{prefix}.qkv_proj",',
        "            bias=False,\n            quant_config=quant_config,\n"
        '            prefix=f"{prefix}.qkv_proj",',
        # transformers' q, k and v projections side by side are the fused layer's output
        ("LlamaAttention", "self.qkv_proj = QKVParallelLinear("),
    ),
    (
        {"tie_word_embeddings": True},  # the tie removed: the head stays unloaded
        "LlamaForCausalLM",
        "                self.lm_head = self.lm_head.tie_weights(self.model.embed_tokens)",
        "                pass",
        ("LlamaForCausalLM", "self.lm_head = ParallelLMHead("),  # logits: the head's line
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize("case", VARIANTS, ids=["attention_bias", "tie_word_embeddings"])
def test_a_config_variant_s_bug_gives_pfx609_and_its_clean_copy_nothing(worker, tmp_path, case):
    from prefixlint.introspect import introspect

    values, cls, old, new, (at_cls, at) = case
    config = _llama_config(tmp_path / "config", **values)
    path, text = model_copy(tmp_path, "llama.py", _replace(cls, old, new))
    clean, _ = model_copy(tmp_path, "llama.py", lambda t: t)
    for target, broken in ((path, True), (clean, False)):
        report = introspect(
            f"{target}:LlamaForCausalLM",
            tp=(1,),
            pp=(1,),
            config=config,
            worker=worker,
            dryrun=False,
            explore_budget=0.0,
        )
        found = [(d.code, d.location.row) for d in report.diagnostics if d.code == "PFX609"]
        expected = [("PFX609", _line(text, at_cls, at))] if broken else []
        assert found == expected, [d.message for d in report.diagnostics]
        assert report.results[0]["compare"]["status"] == ("differs" if broken else "equal")


@pytest.mark.slow
def test_no_compare_turns_it_off_without_a_note(worker, tmp_path) -> None:
    from prefixlint.introspect import introspect

    old, new = "self.scaling = self.head_dim**-0.5", "self.scaling = self.head_dim**-0.4"
    path, _ = model_copy(tmp_path, "llama.py", _replace("LlamaAttention", old, new))
    report = introspect(
        f"{path}:LlamaForCausalLM",
        tp=(1,),
        pp=(1,),
        worker=worker,
        dryrun=False,
        explore_budget=0.0,
        compare=False,
    )
    assert report.results[0]["compare"]["reason"] == "disabled"
    assert not [d for d in report.diagnostics if d.code == "PFX609"]
    assert not [d for d in report.diagnostics if "comparison" in d.message]
