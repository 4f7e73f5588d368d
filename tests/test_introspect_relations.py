"""Repairs of a synthesised config that the failing check's own words decide (two counts
that must agree, a literal an ``assert`` demands, a value named as None), the name
table's precedence, vLLM's CPU worker set-up, and the reasons of builds this machine
cannot make. Fast except the marked builds of real architectures."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from prefixlint.introspect.configs.relations import (
    Change,
    fix_overrides,
    make_consistent,
    proposals,
)
from prefixlint.introspect.verdict.gaps import fix_hint
from tests.conftest import requires_vllm


def raised_in_file(tmp_path: Path, source: str, config: object) -> BaseException:
    """The error ``build(config)`` raises, defined in a real file (a traceback the repair
    reads lines from, as it reads a model file's)."""
    path = tmp_path / "model_code.py"
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    namespace: dict = {}
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), namespace)
    try:
        namespace["build"](config)
    except Exception as e:
        return e
    raise AssertionError("build() did not raise")


# -- relations -----------------------------------------------------------------------------


def test_divisibility_raises_the_numerator_then_lowers_the_divisor() -> None:
    assert proposals("num_heads (2) is not divisible by num_kv_heads (8)") == [
        Change("num_heads", 2, 8),
        Change("num_kv_heads", 8, 2),
    ]
    assert proposals("index_topk (6) must be divisible by index_kpool (4).") == [
        Change("index_topk", 6, 8),
        Change("index_kpool", 4, 2),
    ]
    # holds already, or names one value only: nothing to change
    assert proposals("hidden (16) is divisible by heads (8)") == []
    assert proposals("head_dim must be divisible by 16 (4:6:6)") == []


def test_equality_and_a_derived_value_it_must_match() -> None:
    text = (
        "Class validation error:\n"
        "    ValueError: num_attention_heads (16) must be the same as num_key_value_heads (8)."
    )
    assert proposals(text) == [
        Change("num_key_value_heads", 8, 16),
        Change("num_attention_heads", 16, 8),
    ]
    assert proposals("vision output_dim=6144 does not match pixel-shuffle output 512") == [
        Change("output_dim", 6144, 512)
    ]
    assert proposals("a (3) must be the same as b (3)") == []
    assert proposals("unrelated: x (3) and y (4)") == []


def test_overrides_are_fixed_where_they_are_nested() -> None:
    kw = {"vocab_size": 512, "text_config": {"num_attention_heads": 16, "num_key_value_heads": 8}}
    text = "num_attention_heads (16) must be the same as num_key_value_heads (8)"
    fixed = fix_overrides(text, kw)
    assert fixed == {
        "vocab_size": 512,
        "text_config": {"num_attention_heads": 16, "num_key_value_heads": 16},
    }
    assert kw["text_config"]["num_key_value_heads"] == 8  # the caller's copy is kept
    assert fix_overrides(text, {"vocab_size": 512}) is None


def test_the_attribute_holding_the_value_is_changed_by_a_shared_word() -> None:
    # TeleChat2: the layer says num_heads; the config holds it as n_head
    config = SimpleNamespace(n_head=2, num_key_value_heads=8, num_experts_per_tok=2)
    text = "num_heads (2) is not divisible by num_kv_heads (8)"
    assert make_consistent(text, [config], {"num_key_value_heads": 8}) == "n_head"
    assert config.n_head == 8 and config.num_experts_per_tok == 2


def test_no_attribute_holds_the_value_nothing_changes() -> None:
    config = SimpleNamespace(num_attention_heads=16, num_key_value_heads=8)
    before = dict(vars(config))
    assert (
        make_consistent("num_heads (6) is not divisible by num_kv_heads (4)", [config], {}) is None
    )
    assert make_consistent("no relation here", [config], {}) is None
    assert vars(config) == before


# -- repairs the failing line decides --------------------------------------------------------


def test_an_asserted_literal_is_given(tmp_path: Path) -> None:
    from prefixlint.introspect.configs import repair

    config = SimpleNamespace(gate_activation="silu", norm_after_topk=True)
    source = """
    def build(config):
        assert config.gate_activation == "sigmoid" and config.norm_after_topk
    """
    error = raised_in_file(tmp_path, source, config)
    assert repair(error, [config]) == "gate_activation"
    assert config.gate_activation == "sigmoid"
    with pytest.raises(AssertionError, match="did not raise"):  # the assert now passes
        raised_in_file(tmp_path, source, config)


def test_a_value_named_as_none_takes_the_default_of_the_raising_file(tmp_path: Path) -> None:
    from prefixlint.introspect.configs import repair

    config = SimpleNamespace(output_gate_type=None, hidden_size=128)
    source = """
    def build(config):
        output_gate_type = getattr(config, "output_gate_type", "sigmoid")
        assert output_gate_type in ["silu", "sigmoid"], f"unsupported {output_gate_type=}"
    """
    error = raised_in_file(tmp_path, source, config)
    assert repair(error, [config]) == "output_gate_type"
    assert config.output_gate_type == "sigmoid"


def test_a_divisibility_assert_on_a_guessed_count(tmp_path: Path) -> None:
    from prefixlint.introspect.configs import repair

    config = SimpleNamespace(n_head=2, num_key_value_heads=8, hidden_size=128)
    source = """
    def build(config):
        heads, kv = config.n_head, config.num_key_value_heads
        assert heads % kv == 0, f"num_heads ({heads}) is not divisible by num_kv_heads ({kv})"
    """
    error = raised_in_file(tmp_path, source, config)
    assert repair(error, [config]) == "n_head"
    assert config.n_head == 8 and config.num_key_value_heads == 8


def test_a_local_asserted_present_gets_the_config_value_it_came_from(tmp_path: Path) -> None:
    from prefixlint.introspect.configs import code_hints, repair

    config = SimpleNamespace(hidden_size=128, skip_rope=False)
    source = """
    def build(config):
        rope_parameters = getattr(config, "rope_parameters", None)
        skip = config.skip_rope

        if not skip:
            assert rope_parameters is not None
    """
    error = raised_in_file(tmp_path, source, config)
    assert repair(error, [config]) == "rope_parameters"
    assert config.rope_parameters["rope_type"] == "default"
    # an assert on a local that never came from the config: nothing to give
    other = raised_in_file(
        tmp_path, "def build(config):\n    x = None\n    assert x is not None\n", config
    )
    assert repair(other, [config]) is None
    # a flag passed on negated (``is_neox_style=not config.x,``) is a flag
    assert code_hints("x", ["f(a=1, b=not config.x, c=2)"]).truth


# -- the name table and shrinking ------------------------------------------------------------


def test_a_whole_name_wins_over_a_word_inside_it() -> None:
    from prefixlint.introspect.configs import guess_attribute

    config = SimpleNamespace(hidden_size=128, num_attention_heads=16, num_hidden_layers=4)
    assert guess_attribute("hidden_act", config) == "silu"  # not 128 for "hidden"
    assert guess_attribute("num_hidden_layers", config) == 4
    # head counts divide every tp size; other counts stay small
    assert guess_attribute("num_attention_heads", config) == 16
    assert guess_attribute("n_head", config) == 16
    assert guess_attribute("num_experts_per_tok", config) == 2
    assert guess_attribute("num_shared_experts", config) == 4
    assert guess_attribute("swiglu_alpha", config) == 1.0
    assert guess_attribute("hc_sinkhorn_iters", config) == 1


def test_a_zero_default_is_a_switch_not_a_size() -> None:
    from transformers import PretrainedConfig

    from prefixlint.introspect.configs import shrink_kwargs

    class NoPE(PretrainedConfig):
        model_type = "nope_test"

        def __init__(self, qk_rope_head_dim=0, hidden_size=4096, **kw):
            self.qk_rope_head_dim = qk_rope_head_dim
            self.hidden_size = hidden_size
            super().__init__(**kw)

    kw = shrink_kwargs(NoPE())
    assert "qk_rope_head_dim" not in kw and kw["hidden_size"] == 128


# -- reasons -------------------------------------------------------------------------------


def test_cpu_platform_refusals_say_a_cuda_platform_is_needed() -> None:
    for reason in (
        "NotImplementedError: Sparse Attention is not supported on CPU.",
        "NotImplementedError: is_act_and_mul=False is supported only for CUDA, XPU and ROCm",
        "TypeError: CPUAttentionBackendImpl.__init__() got an unexpected keyword argument 'x'",
        "ValueError: use_alibi_sqrt is not supported by backend CPU_ATTN.",
        "NotImplementedError: No Unquantized MoE backend supports the deployment configuration.",
    ):
        assert fix_hint("environment", reason, True).startswith("needs a CUDA platform"), reason
    hint = fix_hint(
        "environment", "AttributeError: module 'triton' has no attribute 'set_allocator'", True
    )
    assert "needs Triton" in hint and "`set_allocator`" in hint
    # a missing CUDA-only package keeps its own hint
    assert "cutlass" in fix_hint("environment", "No module named 'cutlass'", True)


# -- vLLM's CPU worker set-up ------------------------------------------------------------------


@requires_vllm
def test_cpu_worker_setup_makes_cuda_events_constructible() -> None:
    code = textwrap.dedent(
        """
        import torch
        from prefixlint.introspect.process.env import prepare
        prepare()
        if torch.cuda.is_available():
            print("cuda"); raise SystemExit
        try:
            torch.cuda.Event()
            print("event before")
        except RuntimeError:
            pass
        from prefixlint.introspect.process.cpuworker import prepare_cpu_worker
        print(prepare_cpu_worker())
        torch.cuda.Event(); torch.cuda.Stream()
        print(prepare_cpu_worker())
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    ).stdout.split()
    if out == ["cuda"]:
        pytest.skip("torch has CUDA here: its events are real")
    # the dummy class raised before; vLLM's own set-up ran once and made both buildable
    assert out == ["vllm.v1.worker.cpu.shm", "vllm.v1.worker.cpu.shm"], out


@pytest.mark.slow
@requires_vllm
def test_gpu_written_models_build_and_cpu_refusals_are_notes(worker) -> None:
    from prefixlint.introspect import introspect

    # torch.cuda.Event in __init__ (vLLM's CPU worker placeholders) and a guessed head
    # count that the attention layer's divisibility check corrected
    for arch in ("InklingForConditionalGeneration", "TeleChat2ForCausalLM"):
        report = introspect(arch, tp=(1, 2), pp=(1,), worker=worker, explore_budget=0)
        assert report.results[0]["status"] == "built", (arch, report.results[0]["reason"])
        assert "PFX604" not in {d.code for d in report.diagnostics}
    report = introspect("GlmMoeDsaForCausalLM", tp=(1,), pp=(1,), worker=worker)
    result = report.results[0]
    assert result["status"] == "failed" and result["category"] == "environment"
    [note] = [d for d in report.diagnostics if "building `" in d.message]
    assert note.code == "PFX600" and "needs a CUDA platform" in note.message
