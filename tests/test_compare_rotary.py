"""vLLM's CPU rotary kernel and 3-D query/key (docs/precision.md, "PFX609 on clean vLLM,
the whole registry": LFM2). The comparison runs what the model's code means, not the
CPU kernel's misreading of ``[tokens, heads, head_size]``."""

from __future__ import annotations

import pytest
import torch

from prefixlint.introspect import vllm_api
from tests.conftest import requires_vllm


def _rope(head_size: int) -> torch.nn.Module:
    from vllm.config import CompilationConfig, VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.rotary_embedding import get_rope

    config = VllmConfig(compilation_config=CompilationConfig(custom_ops=["all"]))
    with set_current_vllm_config(config):  # the dispatch an engine on the CPU binds
        rope = get_rope(
            head_size,
            max_position=64,
            rope_parameters={"rope_theta": 1e6, "rope_type": "default"},
            is_neox_style=True,
        )
    holder = torch.nn.Module()
    holder.rotary_emb = rope
    return holder


def _inputs(head_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return torch.arange(9), torch.randn(9, 4, head_size), torch.randn(9, 2, head_size)


@requires_vllm
@pytest.mark.parametrize("head_size", [8, 64])
def test_three_d_query_is_rotated_as_the_native_formula_says(head_size: int) -> None:
    model = _rope(head_size)
    rope = model.rotary_emb
    positions, q, k = _inputs(head_size)
    want_q, want_k = rope.forward_native(positions, q.clone(), k.clone())
    with vllm_api.cpu_rotary_heads_flattened(model):
        got_q, got_k = rope(positions, q.clone(), k.clone())
    assert got_q.shape == q.shape and got_k.shape == k.shape
    torch.testing.assert_close(got_q, want_q, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_k, want_k, rtol=1e-5, atol=1e-5)


@requires_vllm
def test_the_cpu_kernel_misreads_three_d_and_the_patch_is_undone() -> None:
    """The fact the accessor works around, on this vLLM: if a later vLLM's kernel reads
    3-D inputs right, this fails and the accessor can go."""
    model = _rope(8)
    rope = model.rotary_emb
    bound = rope._forward_method
    if getattr(bound, "__name__", "") != "forward_cpu":
        pytest.skip("this vLLM does not dispatch rotary to a CPU kernel")
    positions, q, k = _inputs(8)
    want_q, _ = rope.forward_native(positions, q.clone(), k.clone())
    raw_q, _ = rope(positions, q.clone(), k.clone())
    assert (raw_q - want_q).abs().max() > 0.1
    flat_q, _ = rope(positions, q.clone().reshape(9, -1), k.clone().reshape(9, -1))
    torch.testing.assert_close(flat_q.reshape(q.shape), want_q, rtol=1e-5, atol=1e-5)
    with vllm_api.cpu_rotary_heads_flattened(model):
        assert rope._forward_method is not bound
    assert rope._forward_method is bound


@pytest.mark.slow
@requires_vllm
def test_lfm2_compares_equal(worker) -> None:
    """LFM2 passes 3-D q/k to its rotary embedding: a PFX609 on clean vLLM (37.5%) before."""
    from prefixlint.introspect import introspect

    report = introspect(
        "Lfm2ForCausalLM", tp=(1,), pp=(1,), worker=worker, dryrun=False, explore_budget=0.0
    )
    [result] = report.results
    assert result["compare"]["status"] == "equal", result["compare"]
    assert not [d for d in report.diagnostics if d.code == "PFX609"]
