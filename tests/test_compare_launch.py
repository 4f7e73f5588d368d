"""A Triton kernel launched where vLLM found no Triton backend: the PFX600 note names the
kernel (``compare/launch.py``), not only ``'function' object is not subscriptable``."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from tests.conftest import requires_vllm

KERNELS = """
from vllm.triton_utils import tl, triton


@triton.jit
def _double_kernel(x_ptr, N: tl.constexpr):
    pass


def double(x):
    _double_kernel[(1,)](x, 4)
    return x


def plain(x):
    table = {"a": 1}
    return x[0] + table["a"]
"""


def _kernels(tmp_path):
    """A module of vLLM-style kernel code, imported from ``tmp_path``."""
    pytest.importorskip("vllm")
    import vllm.triton_utils  # noqa: F401  (sets HAS_TRITON)

    from prefixlint.introspect import vllm_api

    if vllm_api.triton_found() is not False:
        pytest.skip("vLLM found a Triton backend here: the kernel would run")
    path = tmp_path / "planted_kernels.py"
    path.write_text(KERNELS)
    spec = importlib.util.spec_from_file_location("planted_kernels", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@requires_vllm
def test_a_kernel_launched_through_the_placeholder_is_named(tmp_path) -> None:
    from prefixlint.introspect.compare.launch import triton_launch

    module = _kernels(tmp_path)
    with pytest.raises(TypeError, match="not subscriptable") as raised:
        module.double(object())
    text = triton_launch(raised.value)
    assert text.startswith("a Triton kernel, `_double_kernel` (`")
    assert "planted_kernels.py:5`), launched at `" in text and "planted_kernels.py:11`" in text
    with pytest.raises(TypeError, match="not subscriptable") as raised:  # no kernel there
        module.plain(3)
    assert triton_launch(raised.value) == ""
    assert triton_launch(TypeError("'function' object is not subscriptable")) == ""


# transformers accepts it (no indexed-attention layer: its QSA fields may stay None) and
# vLLM builds it in float32 (its QSA layers alone demand bfloat16); `output_gate_type`
# given, which vLLM's GatedDeltaNet asserts on (`qwen_gdn_linear_attn.py:565-570`)
QWEN4_EXP_LINEAR = {
    "architectures": ["Qwen4ExpForCausalLM"],
    "model_type": "qwen4_exp_text",
    "vocab_size": 256,
    "hidden_size": 64,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "hc_count": 4,
    "hc_lowrank": 12,
    "max_position_embeddings": 512,
    "output_gate_type": "silu",
    "layer_types": ["linear_attention"] * 4,
}


@pytest.mark.slow
@requires_vllm
def test_qwen4_exp_s_forward_stops_at_its_first_hyper_connection_kernel(worker, tmp_path):
    """Past the reference config (a config of no indexed layer), vLLM's Qwen4Exp builds
    and loads, and its forward stops at the hyper-connection's Triton glue
    (``nvidia/hyperconnection.py:164``): the note names the kernel."""
    from prefixlint.introspect import introspect

    (tmp_path / "config.json").write_text(json.dumps(QWEN4_EXP_LINEAR))
    report = introspect(
        "Qwen4ExpForCausalLM",
        tp=(1,),
        pp=(1,),
        worker=worker,
        dryrun=False,
        explore_budget=0.0,
        config=str(tmp_path),
    )
    [result] = report.results
    compare = result["compare"]
    assert (compare["status"], compare["reason"]) == ("not run", "forward_failed"), compare
    assert "a Triton kernel, `_grouped_gemma_rmsnorm_kernel` (`" in compare["detail"]
    assert "qwen4_exp/nvidia/ops/hc.py:" in compare["detail"]
    assert not [d for d in report.diagnostics if d.code == "PFX609"]
